"""cyborg-all-in-one: the service on one machine, with embedded defaults.

SQLite under a state directory, no authentication, the API on 127.0.0.1.
Runs in the foreground until interrupted; a second start reuses the
state directory (the database is migrated, not recreated).
"""

import argparse
import os
import signal
import sys

from oslo_config import cfg
from oslo_log import log

from cyborg import conf as cyborg_conf
from cyborg.cmd import api as api_cmd
from cyborg.db import migration

LOG = log.getLogger(__name__)
DEFAULT_STATE_DIR = os.path.join(
    os.environ.get('XDG_STATE_HOME', os.path.expanduser('~/.local/state')),
    'cyborg')


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog='cyborg-all-in-one',
        description='Run the accelerator service on this machine alone.')
    parser.add_argument('--state-dir', default=DEFAULT_STATE_DIR,
                        help='Where the database and log live '
                             '(default: %(default)s).')
    parser.add_argument('--host', default='127.0.0.1',
                        help='Address the API listens on.')
    parser.add_argument('--port', type=int, default=6666,
                        help='Port the API listens on.')
    parser.add_argument('--config-file', action='append', default=[],
                        help='Extra configuration files, read last.')
    return parser.parse_args(argv)


def make_conf(args):
    """The embedded defaults, then whatever the extra files say."""
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    cyborg_conf.load(['--config-file=%s' % f for f in args.config_file],
                     conf=conf, default_config_files=[])
    conf.set_default('connection', 'sqlite:///%s' % os.path.join(
        args.state_dir, 'cyborg.sqlite'), group='database')
    conf.set_default('auth_strategy', 'noauth')
    conf.set_default('state_path', args.state_dir)
    conf.set_default('host_ip', args.host, group='api')
    conf.set_default('port', args.port, group='api')
    conf.set_default('log_file', os.path.join(args.state_dir,
                                              'cyborg.log'))
    return conf


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.state_dir, exist_ok=True)
    conf = make_conf(args)
    log.setup(conf, 'cyborg')
    migration.upgrade(conf.database.connection)
    server = api_cmd.make_server(conf)
    server.prepare()

    def stop(signum, frame):
        LOG.info('Stopping on signal %d', signum)
        server.stop()
    signal.signal(signal.SIGTERM, stop)

    print('cyborg-all-in-one: API on http://%s:%d (state in %s)'
          % (conf.api.host_ip, conf.api.port, args.state_dir), flush=True)
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print('cyborg-all-in-one: stopped', flush=True)
