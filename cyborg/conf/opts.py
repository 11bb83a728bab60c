"""Entry points for oslo-config-generator."""

import copy

from oslo_db import options as db_options

from cyborg.conf import api
from cyborg.conf import database
from cyborg.conf import default


def list_opts():
    """Every option group of the service, as the generator wants them."""
    groups = {}
    for module in (default, api):
        for group, opts in module.list_opts().items():
            groups.setdefault(group, []).extend(opts)
    return [(group, copy.deepcopy(opts)) for group, opts in groups.items()]


def update_defaults():
    """Let the generator show the service's defaults for library options."""
    from oslo_config import cfg
    db_options.set_defaults(cfg.CONF,
                            connection=database.DEFAULT_CONNECTION)
