"""cyborg-dbsync: migrate the schema and data of the [database] connection.

    cyborg-dbsync [--config-file F] upgrade [--revision R]
    cyborg-dbsync [--config-file F] version
    cyborg-dbsync [--config-file F] stamp REVISION
    cyborg-dbsync [--config-file F] online_data_migrations [--max-count N]

``online_data_migrations`` runs the data migrations of
``cyborg.db.online_migrations`` in batches, with the services running,
and prints a table of what each found, migrated and has left. It exits
0 when nothing is left, 1 when rows are left (``--max-count`` stopped it;
run it again) and 2 when a migration failed or the database cannot be
used. The other commands exit 1 on any error.
"""

import argparse
import logging
import sys

from alembic import util as alembic_util
from oslo_config import cfg
import sqlalchemy as sa

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.db import migration
from cyborg.db import online_migrations
from cyborg.db import session


def _upgrade(conf, url):
    migration.upgrade(url, conf.command.revision)


def _version(conf, url):
    print(migration.version(url))


def _stamp(conf, url):
    migration.stamp(url, conf.command.revision)


def _online_data_migrations(conf, url):
    current, head = migration.version(url), migration.head()
    if current != head:
        print('cyborg-dbsync: the database schema is at revision %s, not '
              'at %s; run "cyborg-dbsync upgrade" first.' % (current, head),
              file=sys.stderr)
        return 2
    max_count = conf.command.max_count
    if max_count is None:
        print('Running batches of %d until none is left.'
              % online_migrations.BATCH_SIZE)
    db = session.Database(conf)
    try:
        context = cyborg_context.admin_context(db)
        outcomes = online_migrations.run(context, max_count)
        with db.read_connection(context) as connection:
            online_migrations.count_left(connection, outcomes)
    finally:
        db.dispose()
    print(online_migrations.table(outcomes))
    if any(o.failed for o in outcomes):
        print('cyborg-dbsync: some online data migrations failed; the '
              'errors are above.', file=sys.stderr)
        return 2
    if any(o.left for o in outcomes):
        return 1
    return 0


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            'must be a whole number above 0, not %r' % text)
    return value


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

    online = subparsers.add_parser(
        'online_data_migrations',
        help='Migrate data in batches while the services run; exit 0 when '
             'nothing is left, 1 when more is left, 2 on errors.')
    online.add_argument('--max-count', type=_positive, default=None,
                        metavar='N',
                        help='Migrate no more than N rows in all (default: '
                             'everything, in batches of %d).'
                             % online_migrations.BATCH_SIZE)
    online.set_defaults(run=_online_data_migrations, error_exit=2)


command_opt = cfg.SubCommandOpt('command', title='Commands',
                                handler=_add_commands,
                                help='What to do with the schema or the data.')


def _log_progress(migrating):
    # Errors, and when migrating the schema the revisions alembic runs (it
    # says so at INFO), go to stderr so that stdout carries only what a
    # command prints.
    logging.basicConfig(stream=sys.stderr, format='%(message)s')
    if migrating:
        logging.getLogger('alembic.runtime.migration').setLevel(
            logging.INFO)


def unreachable(url):
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
    error_exit = getattr(conf.command, 'error_exit', 1)
    problem = unreachable(url)
    if problem:
        print('cyborg-dbsync: %s' % problem, file=sys.stderr)
        return error_exit
    if conf.command.name != 'version':
        _log_progress(conf.command.name in ('upgrade', 'stamp'))
    try:
        return conf.command.run(conf, url) or 0
    except alembic_util.CommandError as e:
        # An unknown revision, for one.
        print('cyborg-dbsync: %s' % e, file=sys.stderr)
        return error_exit
