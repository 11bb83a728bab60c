"""cyborg-conductor: the only writer of inventory; syncs Placement.

    cyborg-conductor [--config-file F ...]

Runs until SIGTERM or SIGINT (exit 0); SIGHUP re-reads the configuration
files and restarts the RPC server.
"""

# First of all: eventlet stays out of the process.
from cyborg import no_eventlet  # noqa: F401, I001

import sys

from oslo_config import cfg
from oslo_log import log

from cyborg import cmd
from cyborg import conf as cyborg_conf
from cyborg import service  # noqa: F401  first: keeps eventlet out
from cyborg.cmd import console
from cyborg.conductor import manager


def main(argv=None):
    console.guard()
    conf = cfg.CONF
    log.register_options(conf)
    cyborg_conf.load(sys.argv[1:] if argv is None else argv, conf=conf)
    log.setup(conf, 'cyborg')
    sys.exit(cmd.launch(manager.ConductorService(conf), conf))
