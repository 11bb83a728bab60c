"""Online data migrations and ``cyborg-dbsync online_data_migrations``,
on SQLite, MariaDB and PostgreSQL.

The rows that need migrating are made as they were made: in a database
at the revision before the one that added the column, which is then
upgraded to head.
"""

import datetime
import os
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import states
from cyborg.cmd import dbsync
from cyborg.db import migration
from cyborg.db import models
from cyborg.db import online_migrations
from cyborg.db import session
from cyborg.db.api import arqs as arq_api
from tests.conftest import make_conf

DBSYNC = os.path.join(os.path.dirname(sys.executable), 'cyborg-dbsync')

# The revision before e8f1a2b3c4d5 added bind_started_at.
BEFORE_BIND_BOOKKEEPING = 'd5e2b7c4a1f0'

# The two tables as they were at BEFORE_BIND_BOOKKEEPING, as far as an
# insert needs them (the models have columns that did not exist then).
_OLD_PROFILES = sa.table(
    'device_profiles', sa.column('id'), sa.column('uuid'), sa.column('name'),
    sa.column('profile_json'), sa.column('created_at'))
_OLD_ARQS = sa.table(
    'extended_accelerator_requests', sa.column('uuid'), sa.column('state'),
    sa.column('device_profile_id'), sa.column('device_profile_group_id'),
    sa.column('created_at'), sa.column('updated_at'))


def _ago(seconds):
    return models.utcnow() - datetime.timedelta(seconds=seconds)


def insert_old_arqs(url, arqs):
    """Insert ARQs into a database at BEFORE_BIND_BOOKKEEPING; ``arqs``
    are column values (``state``, ``created_at``, ``updated_at``).
    Returns their uuids, in order."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    uuids = []
    try:
        with engine.begin() as connection:
            profile_uuid = str(uuid.uuid4())
            connection.execute(sa.insert(_OLD_PROFILES).values(
                uuid=profile_uuid, name='fpga-%s' % profile_uuid,
                profile_json='{"groups": [{"resources:FPGA": "1"}]}',
                created_at=_ago(86400)))
            profile = connection.scalar(sa.select(_OLD_PROFILES.c.id).where(
                _OLD_PROFILES.c.uuid == profile_uuid))
            for values in arqs:
                uuids.append(str(uuid.uuid4()))
                values = dict(values)
                values.setdefault('created_at', _ago(86400))
                connection.execute(sa.insert(_OLD_ARQS).values(
                    uuid=uuids[-1], device_profile_id=profile,
                    device_profile_group_id=0, **values))
    finally:
        engine.dispose()
    return uuids


def _arq_rows(url):
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    arq = models.ExtendedAcceleratorRequest
    try:
        with engine.connect() as connection:
            return {r.uuid: r for r in connection.execute(sa.select(
                arq.uuid, arq.state, arq.created_at, arq.updated_at,
                arq.bind_started_at))}
    finally:
        engine.dispose()


def _dbsync(config_file, *args):
    return subprocess.run(
        [DBSYNC, '--config-file', str(config_file), 'online_data_migrations',
         *args], capture_output=True, text=True, timeout=120,
        cwd=config_file.parent)


def _config(tmp_path, connection):
    path = tmp_path / 'cyborg.conf'
    path.write_text('[database]\nconnection = %s\n' % connection)
    return path


def _table_row(stdout, name):
    """``(found, migrated, left)`` of migration ``name`` in the table."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        if cells[0] == name:
            return tuple(int(c) for c in cells[1:])
    raise AssertionError('no row %s in:\n%s' % (name, stdout))


@pytest.fixture
def old_binds(database_url):
    """A database upgraded to head from BEFORE_BIND_BOOKKEEPING with ARQs
    made there: seven BindStarted (five since an hour, two since a few
    seconds, one of those never updated), and three others. Returns
    ``(url, uuids of the old binds, uuids of the young binds)``."""
    migration.upgrade(database_url, BEFORE_BIND_BOOKKEEPING)
    old = insert_old_arqs(database_url, [
        {'state': states.BIND_STARTED, 'updated_at': _ago(3600 + i)}
        for i in range(5)])
    young = insert_old_arqs(database_url, [
        {'state': states.BIND_STARTED, 'updated_at': _ago(5)},
        {'state': states.BIND_STARTED, 'created_at': _ago(5),
         'updated_at': None}])
    insert_old_arqs(database_url, [
        {'state': states.BOUND, 'updated_at': _ago(3600)},
        {'state': states.INITIAL, 'updated_at': None},
        {'state': states.BIND_FAILED, 'updated_at': _ago(3600)}])
    migration.upgrade(database_url)
    return database_url, old, young


def test_dbsync_migrates_in_batches_and_exits_as_nova_does(old_binds,
                                                           tmp_path):
    url, old, young = old_binds
    before = _arq_rows(url)
    assert all(r.bind_started_at is None for r in before.values())
    config = _config(tmp_path, url)

    first = _dbsync(config, '--max-count', '3')
    assert first.returncode == 1, first.stdout + first.stderr
    assert _table_row(first.stdout, 'fill_bind_started_at') == (3, 3, 4)
    assert first.stdout.splitlines()[1].split() == [
        '|', 'Migration', '|', 'Found', '|', 'Migrated', '|', 'Left', '|']

    second = _dbsync(config, '--max-count', '3')
    assert second.returncode == 1, second.stdout + second.stderr
    assert _table_row(second.stdout, 'fill_bind_started_at') == (3, 3, 1)

    rest = _dbsync(config)
    assert rest.returncode == 0, rest.stdout + rest.stderr
    assert rest.stdout.startswith('Running batches of 50 until none is '
                                  'left.\n')
    assert _table_row(rest.stdout, 'fill_bind_started_at') == (1, 1, 0)

    again = _dbsync(config, '--max-count', '3')
    assert again.returncode == 0, again.stdout + again.stderr
    assert _table_row(again.stdout, 'fill_bind_started_at') == (0, 0, 0)

    after = _arq_rows(url)
    for arq_uuid, row in after.items():
        was = before[arq_uuid]
        # A data migration is no update of the request.
        assert row.updated_at == was.updated_at
        if row.state == states.BIND_STARTED:
            assert row.bind_started_at == (was.updated_at
                                           or was.created_at)
        else:
            assert row.bind_started_at is None


def test_migrated_binds_are_timed_out_by_recovery(old_binds):
    url, old, young = old_binds
    db = session.Database(make_conf(url))
    context = cyborg_context.admin_context(db)
    try:
        # Before the migration the conductor cannot tell how old they are.
        assert arq_api.fail_stale_binds(context, 300) == []

        outcomes = online_migrations.run(context)

        assert [(o.name, o.found, o.done, o.failed) for o in outcomes] == [
            ('fill_bind_started_at', 7, 7, False),
            # No device publishes a standard name its profile could take.
            ('standard_profile_names', 0, 0, False)]
        failed = arq_api.fail_stale_binds(context, 300)
        assert sorted(a['uuid'] for a in failed) == sorted(old)
        states_now = {u: r.state for u, r in _arq_rows(url).items()}
        assert {u: states_now[u] for u in young} == dict.fromkeys(
            young, states.BIND_STARTED)
    finally:
        db.dispose()


class _Recording:
    """A migration that records each call and its answer."""

    def __init__(self, migration):
        self.migration = migration
        self.calls = []

    def __call__(self, context, max_count):
        answer = self.migration(context, max_count)
        self.calls.append((max_count, *answer))
        return answer


def test_run_goes_batch_by_batch_within_max_count(old_binds):
    url = old_binds[0]
    recording = _Recording(online_migrations.fill_bind_started_at)
    migrations = (online_migrations.OnlineMigration(
        'fill_bind_started_at', recording,
        online_migrations.bind_started_at_unknown),)
    db = session.Database(make_conf(url))
    context = cyborg_context.admin_context(db)
    try:
        [limited] = online_migrations.run(context, max_count=5,
                                          migrations=migrations,
                                          batch_size=2)
        assert recording.calls == [(2, 2, 2), (2, 2, 2), (1, 1, 1)]
        assert (limited.found, limited.done) == (5, 5)

        recording.calls.clear()
        [rest] = online_migrations.run(context, migrations=migrations,
                                       batch_size=2)
        # Batches until one finds nothing.
        assert recording.calls == [(2, 2, 2), (2, 0, 0)]
        assert (rest.found, rest.done) == (2, 2)
        with db.read_connection(context) as connection:
            assert online_migrations.pending(connection,
                                             migrations) == {}
    finally:
        db.dispose()


def _broken(context, max_count):
    raise RuntimeError('this migration is broken')


def test_a_failing_migration_exits_2_and_the_others_run(
        sqlite_url, tmp_path, monkeypatch, capsys, caplog):
    migration.upgrade(sqlite_url, BEFORE_BIND_BOOKKEEPING)
    insert_old_arqs(sqlite_url, [{'state': states.BIND_STARTED,
                                  'updated_at': _ago(60)}])
    migration.upgrade(sqlite_url)
    monkeypatch.setattr(online_migrations, 'MIGRATIONS', (
        online_migrations.OnlineMigration('broken', _broken,
                                          lambda connection: 1),
        *online_migrations.MIGRATIONS))
    config = _config(tmp_path, sqlite_url)

    code = dbsync.main(['--config-file', str(config),
                        'online_data_migrations'])

    out, err = capsys.readouterr()
    assert code == 2
    assert _table_row(out, 'fill_bind_started_at') == (1, 1, 0)
    assert '| broken ' in out and '| error |' in out
    assert 'some online data migrations failed' in err
    assert 'Online data migration broken failed' in caplog.text
    assert 'this migration is broken' in caplog.text


def test_a_schema_behind_head_exits_2(sqlite_url, tmp_path):
    migration.upgrade(sqlite_url, BEFORE_BIND_BOOKKEEPING)

    result = _dbsync(_config(tmp_path, sqlite_url))

    assert result.returncode == 2
    assert result.stdout == ''
    assert result.stderr.splitlines()[-1] == (
        'cyborg-dbsync: the database schema is at revision %s, not at %s; '
        'run "cyborg-dbsync upgrade" first.'
        % (BEFORE_BIND_BOOKKEEPING, migration.head()))


def test_an_unreachable_database_exits_2(tmp_path):
    result = _dbsync(_config(
        tmp_path, 'mysql+pymysql://root:secret@127.0.0.1:1/cyborg'))

    assert result.returncode == 2
    assert result.stderr.startswith(
        'cyborg-dbsync: cannot reach the database '
        'mysql+pymysql://root:***@127.0.0.1:1/cyborg: ')


@pytest.mark.parametrize('count', ['0', '-3', 'many'])
def test_max_count_must_be_a_positive_number(sqlite_url, tmp_path, count):
    migration.upgrade(sqlite_url)

    result = _dbsync(_config(tmp_path, sqlite_url), '--max-count', count)

    assert result.returncode == 2
    assert 'must be a whole number above 0' in result.stderr
