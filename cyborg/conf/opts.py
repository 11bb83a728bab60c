"""Entry points for oslo-config-generator."""

import copy

from oslo_config import cfg
from oslo_db import options as db_options

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
from cyborg.conf import intel_nic
from cyborg.conf import metrics
from cyborg.conf import notifications
from cyborg.conf import nova
from cyborg.conf import pci
from cyborg.conf import placement
from cyborg.conf import privsep
from cyborg.conf import quota
from cyborg.conf import scrub
from cyborg.conf import upgrade_levels


def list_opts():
    """Every option group of the service, as the generator wants them."""
    groups = {}
    for module in (default, api, placement, nova, glance, pci, gpu_devices,
                   intel_nic, agent, privsep, device_config, conductor,
                   fake_driver, upgrade_levels, metrics, notifications,
                   quota, scrub):
        for group, opts in module.list_opts().items():
            groups.setdefault(group, []).extend(opts)
    return [(group, copy.deepcopy(opts)) for group, opts in groups.items()]


def update_defaults():
    """Let the generator show the service's defaults for library options.

    The generator reads the defaults of the library's option objects, so
    they are changed there, not on a ConfigOpts.
    """
    cfg.set_defaults(db_options.database_opts,
                     connection=database.DEFAULT_CONNECTION)
    cors.set_defaults()
    # oslo.messaging lists copies of its notifier options; the generator
    # shows the originals, which it keeps under a private name.
    from oslo_messaging.notify import notifier as messaging_notifier

    from cyborg.notifications import notifier
    cfg.set_defaults(messaging_notifier._notifier_opts, retry=notifier.RETRY)
