"""[privsep_agent] options: how the agent starts its privileged helper.

oslo.privsep's own options, for the agent's context
(``cyborg.privsep.agent_pctxt``): ``helper_command`` (in a deployment,
``cyborg-privsep-launcher <link> sudo privsep-helper`` with the agent's
configuration files, see ``cyborg.privsep.launcher``), the
``capabilities`` the daemon keeps, ``user``/``group``, ``thread_pool_size``
and logging. oslo.privsep reads them from the agent's ``cfg.CONF``;
registering them here lets the service (and its tests) know them.
"""

import copy

from oslo_privsep import priv_context

from cyborg import privsep
from cyborg.conf import groups

GROUP = privsep.CONFIG_SECTION
TITLE = "The agent's privileged helper (oslo.privsep)"


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, priv_context.OPTS)
    conf.set_default('capabilities', list(privsep.CAPABILITIES), group=GROUP)


def list_opts():
    """The options with the agent's defaults, for the sample."""
    opts = copy.deepcopy(priv_context.OPTS)
    for opt in opts:
        if opt.dest == 'capabilities':
            opt.default = privsep.capability_names(privsep.CAPABILITIES)
    return groups.listing(GROUP, TITLE, opts)
