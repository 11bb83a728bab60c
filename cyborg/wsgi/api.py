"""WSGI entry point: ``cyborg.wsgi.api:application``.

Reads the configuration files given by ``CYBORG_CONFIG_FILES`` (comma
separated) or the default locations of oslo.config.
"""

# First of all: eventlet stays out of the process.
from cyborg import no_eventlet  # noqa: F401, I001

import os

from oslo_config import cfg
from oslo_log import log

from cyborg import conf as cyborg_conf
from cyborg import long_lived
from cyborg.api import app as api_app


def init_application():
    conf = cfg.CONF
    log.register_options(conf)
    files = os.environ.get('CYBORG_CONFIG_FILES')
    cyborg_conf.load([], conf=conf,
                     default_config_files=files.split(',') if files
                     else None)
    log.setup(conf, 'cyborg')
    app = api_app.build_app(conf, warm=True)
    long_lived.settle()
    return app


application = init_application()
