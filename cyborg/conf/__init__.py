"""Configuration options, one module per option group.

Services build their own ``cfg.ConfigOpts`` (or use ``cfg.CONF`` at the
entry point) and pass it down; nothing below the entry points reads a
global configuration object.
"""

from oslo_config import cfg

from cyborg.conf import agent
from cyborg.conf import api
from cyborg.conf import conductor
from cyborg.conf import cors
from cyborg.conf import database
from cyborg.conf import default
from cyborg.conf import device_config
from cyborg.conf import fake_driver
from cyborg.conf import glance
from cyborg.conf import gpu_devices
from cyborg.conf import http_proxy
from cyborg.conf import intel_nic
from cyborg.conf import keystone_authtoken
from cyborg.conf import metrics
from cyborg.conf import notifications
from cyborg.conf import nova
from cyborg.conf import pci
from cyborg.conf import placement
from cyborg.conf import privsep
from cyborg.conf import quota
from cyborg.conf import scrub
from cyborg.conf import sizelimit
from cyborg.conf import upgrade_levels

_GROUP_MODULES = (default, api, database, keystone_authtoken, cors,
                  http_proxy, placement, nova, glance, pci, gpu_devices,
                  intel_nic, agent, privsep, device_config, conductor,
                  fake_driver, upgrade_levels, metrics, notifications,
                  sizelimit, quota, scrub)


def register_opts(conf):
    """Register every option of the service on ``conf``."""
    for module in _GROUP_MODULES:
        module.register_opts(conf)


def load(args=None, conf=None, default_config_files=None):
    """Return a parsed configuration with every option registered."""
    conf = conf if conf is not None else cfg.ConfigOpts()
    register_opts(conf)
    conf(args if args is not None else [], project='cyborg',
         default_config_files=default_config_files)
    return conf
