"""cyborg-dbsync: migrate the schema of the [database] connection.

    cyborg-dbsync [--config-file F] upgrade [--revision R]
    cyborg-dbsync [--config-file F] version
    cyborg-dbsync [--config-file F] stamp REVISION
"""

import logging
import sys

from alembic import util as alembic_util
from oslo_config import cfg
import sqlalchemy as sa

from cyborg import conf as cyborg_conf
from cyborg.db import migration


def _upgrade(conf, url):
    migration.upgrade(url, conf.command.revision)


def _version(conf, url):
    print(migration.version(url))


def _stamp(conf, url):
    migration.stamp(url, conf.command.revision)


def _add_commands(subparsers):
    upgrade = subparsers.add_parser(
        'upgrade', help='Migrate the schema up to a revision.')
    upgrade.add_argument('--revision', default='head',
                         help='Revision to reach (default: head).')
    upgrade.set_defaults(run=_upgrade)

    version = subparsers.add_parser(
        'version', help='Print the revision the schema is at (None if '
                        'the database has none).')
    version.set_defaults(run=_version)

    stamp = subparsers.add_parser(
        'stamp', help='Record a revision as the schema version without '
                      'migrating, for a schema made by other means.')
    stamp.add_argument('revision', help='Revision to record, or "head".')
    stamp.set_defaults(run=_stamp)


command_opt = cfg.SubCommandOpt('command', title='Commands',
                                handler=_add_commands,
                                help='What to do with the schema.')


def _log_progress():
    # Alembic says at INFO which revisions it runs; that goes to stderr so
    # that stdout carries only what a command prints.
    logging.basicConfig(stream=sys.stderr, format='%(message)s')
    logging.getLogger('alembic.runtime.migration').setLevel(logging.INFO)


def _unreachable(url):
    """Why the database at ``url`` cannot be used, or None if it can."""
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    except sa.exc.ArgumentError as e:
        return 'invalid [database] connection: %s' % e
    try:
        with engine.connect():
            return None
    except sa.exc.DBAPIError as e:
        where = engine.url.render_as_string(hide_password=True)
        reason = str(e.orig).strip().splitlines()[0]
        return 'cannot reach the database %s: %s' % (where, reason)
    finally:
        engine.dispose()


def main(argv=None):
    conf = cfg.ConfigOpts()
    conf.register_cli_opt(command_opt)
    cyborg_conf.load(sys.argv[1:] if argv is None else argv, conf=conf)
    url = conf.database.connection
    problem = _unreachable(url)
    if problem:
        print('cyborg-dbsync: %s' % problem, file=sys.stderr)
        return 1
    if conf.command.name != 'version':
        _log_progress()
    try:
        conf.command.run(conf, url)
    except alembic_util.CommandError as e:
        # An unknown revision, for one.
        print('cyborg-dbsync: %s' % e, file=sys.stderr)
        return 1
    return 0
