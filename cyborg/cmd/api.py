"""cyborg-api: serve the REST API with the built-in threaded server.

Production deployments may serve ``cyborg.wsgi.api:application`` with
uwsgi, gunicorn or mod_wsgi instead.
"""

import sys

from cheroot import wsgi
from oslo_config import cfg
from oslo_log import log

from cyborg import conf as cyborg_conf
from cyborg.api import app as api_app

LOG = log.getLogger(__name__)


def make_server(conf, app=None):
    """A cheroot server for the API on ``[api] host_ip:port``."""
    app = app if app is not None else api_app.build_app(conf)
    return wsgi.Server((conf.api.host_ip, conf.api.port), app,
                       numthreads=conf.api.threads,
                       server_name='cyborg-api')


def main(argv=None):
    conf = cfg.CONF
    log.register_options(conf)
    cyborg_conf.load(sys.argv[1:] if argv is None else argv, conf=conf)
    log.setup(conf, 'cyborg')
    server = make_server(conf)
    LOG.info('cyborg-api listening on http://%s:%d',
             conf.api.host_ip, conf.api.port)
    try:
        server.safe_start()
    finally:
        server.stop()
