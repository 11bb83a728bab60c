"""Every statement through oslo.db's enginefacade: one pool made of all of
``[database]``, its transactions, its error translation, and no write
sent twice."""

import os
import sqlite3
import threading
import time
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg.db import migration
from cyborg.db import models
from cyborg.db import session
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from tests import conftest
from tests import db_servers

Profile = models.DeviceProfile.__table__
ARQ = models.ExtendedAcceleratorRequest.__table__

# For the tests of a server's connections: SQLite has none.
on_servers = pytest.mark.parametrize(
    'database_url', [e for e in db_servers.ENGINES if e != 'sqlite'],
    indirect=True)


@pytest.fixture(autouse=True)
def no_known_profiles(monkeypatch):
    # Databases of other tests have had profiles of the same names.
    monkeypatch.setattr(arqs, '_KNOWN_PROFILES', {})


def _add(connection, name):
    connection.execute(sa.insert(Profile).values(
        uuid=name, name=name, profile_json={'groups': []},
        created_at=models.utcnow()))


def _names(db, context):
    return [r.name for r in db.read_rows(
        context, sa.select(Profile.c.name).order_by(Profile.c.id))]


def _profile(context, name, groups=None):
    device_profiles.create_profiles(context, [{
        'uuid': str(uuidlib.uuid4()), 'name': name, 'description': None,
        'groups': groups or [{'resources:FPGA': '1'}]}])


def _arq_uuids(db, context):
    return sorted(r.uuid for r in db.read_rows(context, sa.select(ARQ.c.uuid)))


def _server_connection_id(connection):
    if connection.dialect.name == 'mysql':
        return connection.exec_driver_sql('SELECT CONNECTION_ID()').scalar()
    return connection.exec_driver_sql('SELECT pg_backend_pid()').scalar()


def _kill(db_url, server_id):
    """End a connection from the server's side, as a restart would."""
    admin = sa.create_engine(db_url)
    try:
        with admin.connect() as connection:
            if connection.dialect.name == 'mysql':
                connection.exec_driver_sql('KILL %d' % server_id)
            else:
                connection.exec_driver_sql(
                    'SELECT pg_terminate_backend(%d)' % server_id)
    finally:
        admin.dispose()


# -- transactions --

def test_a_write_commits_and_a_read_sees_it(db, admin_context):
    with db.write_connection(admin_context) as connection:
        _add(connection, 'one')
    assert _names(db, admin_context) == ['one']


def test_a_write_that_raises_is_rolled_back(db, admin_context):
    with pytest.raises(ZeroDivisionError), db.write_connection(
            admin_context) as connection:
        _add(connection, 'gone')
        raise ZeroDivisionError()
    assert _names(db, admin_context) == []


def test_inside_a_transaction_they_are_its_statements(db, admin_context):
    class Undo(Exception):
        pass

    with pytest.raises(Undo), db.writer(admin_context):
        with db.write_connection(admin_context) as connection:
            _add(connection, 'inner')
        # Not committed yet, and seen within the transaction.
        assert _names(db, admin_context) == ['inner']
        raise Undo()
    assert _names(db, admin_context) == []


def test_writers_that_read_first_take_turns_instead_of_failing(
        db, admin_context):
    """Two writers that each read a row, then write it back changed: the
    second waits for the first (on SQLite, for its write lock; on the
    servers, for the row) and neither loses the other's change. On
    SQLite, a writer that held only a read lock when it came to write
    would be refused at once ("database is locked")."""
    with db.write_connection(admin_context) as connection:
        _add(connection, 'counter')
    first_read = threading.Event()

    def bump(context, hold):
        with db.write_connection(context) as connection:
            description = connection.execute(
                sa.select(Profile.c.description).where(
                    Profile.c.name == 'counter')
                .with_for_update()).scalar_one()
            if hold:
                first_read.set()
                time.sleep(0.3)  # the other writer comes meanwhile
            connection.execute(sa.update(Profile).where(
                Profile.c.name == 'counter').values(
                description=(description or '') + 'x'))

    contexts = [cyborg_context.admin_context(db) for _ in range(2)]
    first = threading.Thread(target=bump, args=(contexts[0], True))
    first.start()
    assert first_read.wait(10)
    bump(contexts[1], False)
    first.join(10)

    assert db.read_rows(admin_context, sa.select(Profile.c.description)
                        ) == [('xx',)]


@on_servers
def test_a_connection_the_server_ended_is_replaced(db, db_url,
                                                   admin_context):
    with db.engine.connect() as connection:
        server_id = _server_connection_id(connection)
    _kill(db_url, server_id)
    assert _names(db, admin_context) == []
    with db.engine.connect() as connection:
        server_id = _server_connection_id(connection)
    _kill(db_url, server_id)
    with db.write_connection(admin_context) as connection:
        _add(connection, 'after')
    assert _names(db, admin_context) == ['after']


@on_servers
def test_a_forked_process_opens_its_own_connections(db, admin_context,
                                                    monkeypatch):
    with db.engine.connect() as connection:
        parents = _server_connection_id(connection)
    pid = os.getpid()
    monkeypatch.setattr(os, 'getpid', lambda: pid + 1)
    with db.read_connection(admin_context) as connection:
        assert _server_connection_id(connection) != parents


# -- one pool, all of [database] --

_CONNECTION_PARAMETERS = {
    'mysql': "init_command=SET+%40cyborg_pool%3D'one'",
    'postgresql': 'application_name=one',
}
_SQL_MODE = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'


def _session_settings(dbapi_connection, dialect):
    cursor = dbapi_connection.cursor()
    try:
        if dialect == 'mysql':
            cursor.execute('SELECT @cyborg_pool, @@SESSION.sql_mode')
        else:
            cursor.execute("SELECT current_setting('application_name'), "
                           "''")
        return tuple(cursor.fetchone())
    finally:
        cursor.close()


@on_servers
def test_every_connection_is_of_one_pool_made_of_the_options(
        db_url, monkeypatch):
    dialect = sa.engine.make_url(db_url).get_backend_name()
    conf = conftest.make_conf(db_url)
    for name, value in (('max_pool_size', 1), ('max_overflow', 0),
                        ('pool_timeout', 5), ('mysql_sql_mode', _SQL_MODE),
                        ('connection_parameters',
                         _CONNECTION_PARAMETERS[dialect])):
        conf.set_override(name, value, group='database')
    used = {}

    def checked_out(dbapi_connection, record, proxy):
        if id(record) not in used:
            used[id(record)] = _session_settings(dbapi_connection, dialect)

    # Every pool of the process, whoever made it.
    sa.event.listen(sa.pool.Pool, 'checkout', checked_out)
    db = session.Database(conf)
    try:
        context = cyborg_context.admin_context(db, project_id='p')
        db.warm_up()
        _profile(context, 'options')
        device_profiles.listed_profiles(context)
        made = arqs.create_arqs(context, 'options', 'p')
        arqs.create_arqs(context, 'options', 'p')  # from the known profile
        arqs.list_arqs(context)
        arqs.delete_arqs(context, uuids=[made[0]['uuid']], project_id='p')
    finally:
        sa.event.remove(sa.pool.Pool, 'checkout', checked_out)
        db.dispose()
    # max_pool_size 1, no overflow: one connection in all, so one pool.
    assert len(used) == 1
    [(marker, sql_mode)] = used.values()
    if dialect == 'mysql':
        assert marker == 'one'
        assert set(sql_mode.split(',')) == set(_SQL_MODE.split(','))
    else:
        assert marker == 'one'


# -- ids are never given again --

def test_a_deleted_arq_id_is_never_given_again(db, admin_context):
    _profile(admin_context, 'ids')
    [first] = arqs.create_arqs(admin_context, 'ids', 'admin-project')
    [newest] = arqs.create_arqs(admin_context, 'ids', 'admin-project')
    ids = dict(db.read_rows(admin_context, sa.select(ARQ.c.uuid, ARQ.c.id)))
    # The newest, deleted while (say) a bind still holds its id.
    arqs.delete_arqs(admin_context, uuids=[newest['uuid']])
    [made] = arqs.create_arqs(admin_context, 'ids', 'admin-project')
    new_id = db.read_rows(admin_context, sa.select(ARQ.c.id).where(
        ARQ.c.uuid == made['uuid']))[0].id
    assert new_id > ids[newest['uuid']] > ids[first['uuid']]


def test_a_deleted_profile_id_is_never_given_again(db, admin_context):
    _profile(admin_context, 'old')
    old = db.read_rows(admin_context, sa.select(Profile.c.id))[0].id
    device_profiles.delete_profiles(admin_context, names=['old'])
    _profile(admin_context, 'new')
    assert db.read_rows(admin_context, sa.select(Profile.c.id))[0].id > old


# The two tables as revision a4b8c2d6e0f1 has them (the columns written).
_OLD_PROFILE = sa.table('device_profiles', sa.column('id'), sa.column('uuid'),
                        sa.column('name'), sa.column('profile_json'),
                        sa.column('created_at'))
_OLD_ARQ = sa.table('extended_accelerator_requests', sa.column('uuid'),
                    sa.column('state'), sa.column('device_profile_id'),
                    sa.column('device_profile_group_id'),
                    sa.column('created_at'))


def test_the_migration_keeps_rows_and_counts_on(database_url):
    migration.upgrade(database_url, 'a4b8c2d6e0f1')
    engine = sa.create_engine(database_url)
    now = models.utcnow()
    try:
        with engine.begin() as connection:
            for name in ('p1', 'p2'):
                connection.execute(sa.insert(_OLD_PROFILE).values(
                    uuid=name, name=name, profile_json='{"groups": []}',
                    created_at=now))
            profile_id = connection.execute(sa.select(sa.func.max(
                _OLD_PROFILE.c.id))).scalar_one()
            connection.execute(sa.insert(_OLD_ARQ), [
                {'uuid': 'a%d' % i, 'state': 'Initial',
                 'device_profile_id': profile_id,
                 'device_profile_group_id': 0, 'created_at': now}
                for i in range(3)])
        migration.upgrade(database_url)
        with engine.begin() as connection:
            before = connection.execute(sa.select(ARQ.c.id, ARQ.c.uuid)
                                        .order_by(ARQ.c.id)).all()
            assert [r.uuid for r in before] == ['a0', 'a1', 'a2']
            connection.execute(sa.delete(ARQ).where(ARQ.c.uuid == 'a2'))
            connection.execute(sa.insert(ARQ).values(
                uuid='a3', state='Initial', device_profile_id=profile_id,
                device_profile_group_id=0, created_at=now))
            new_id = connection.execute(sa.select(ARQ.c.id).where(
                ARQ.c.uuid == 'a3')).scalar_one()
        assert new_id > before[-1].id
    finally:
        engine.dispose()


# -- what create_arqs knows of profiles --

def test_deleting_a_profile_drops_what_creation_knew_of_it(db,
                                                           admin_context):
    _profile(admin_context, 'known')
    [made] = arqs.create_arqs(admin_context, 'known', 'admin-project')
    assert 'known' in arqs._KNOWN_PROFILES
    arqs.delete_arqs(admin_context, uuids=[made['uuid']])
    device_profiles.delete_profiles(admin_context, names=['known'])
    assert 'known' not in arqs._KNOWN_PROFILES
    # Made again with other groups: creation follows the new one.
    _profile(admin_context, 'known', [{'resources:FPGA': '2'}])
    assert len(arqs.create_arqs(admin_context, 'known', 'p')) == 2


def test_a_profile_another_worker_remade_is_read_again(db, admin_context):
    _profile(admin_context, 'remade')
    [made] = arqs.create_arqs(admin_context, 'remade', 'p')
    known = arqs._KNOWN_PROFILES['remade']
    arqs.delete_arqs(admin_context, uuids=[made['uuid']])
    device_profiles.delete_profiles(admin_context, names=['remade'])
    _profile(admin_context, 'remade', [{'resources:FPGA': '3'}])
    # As if another worker had deleted and re-made it: still known here.
    arqs._KNOWN_PROFILES['remade'] = known
    assert len(arqs.create_arqs(admin_context, 'remade', 'p')) == 3


# -- a reply lost after the commit --

class _Fault:
    """Fails the first commit of an ARQ INSERT once the server has it: the
    connection is lost with the reply."""

    def __init__(self):
        self.armed = False
        self.fired = 0

    def after(self, connection, sql):
        """After a statement: a lone (autocommit) INSERT commits there."""
        if sql.lstrip().upper().startswith(
                'INSERT INTO EXTENDED_ACCELERATOR_REQUESTS'):
            if _autocommit(connection):
                self._fire(connection)
            else:
                connection.arq_inserted = True

    def after_commit(self, connection):
        if getattr(connection, 'arq_inserted', False):
            connection.arq_inserted = False
            self._fire(connection)

    def _fire(self, connection):
        if self.armed:
            self.armed = False
            self.fired += 1
            raise _lost(connection)


def _autocommit(connection):
    if isinstance(connection, sqlite3.Connection):
        return False
    if hasattr(connection, 'get_autocommit'):
        return connection.get_autocommit()
    return connection.autocommit


def _lost(connection):
    if isinstance(connection, sqlite3.Connection):
        return sqlite3.OperationalError('disk I/O error')
    if hasattr(connection, 'get_autocommit'):
        import MySQLdb
        return MySQLdb.OperationalError(
            2013, 'Lost connection to server during query')
    import psycopg2
    return psycopg2.OperationalError(
        'server closed the connection unexpectedly')


def _faulty_connections(engine, fault):
    """Connections of ``engine`` made from now on are the driver's own
    class with ``fault`` after each statement and commit."""
    name = engine.dialect.driver

    if name == 'pysqlite':
        class Cursor(sqlite3.Cursor):
            def execute(self, sql, *args):
                result = super().execute(sql, *args)
                fault.after(self.connection, sql)
                return result

        class Connection(sqlite3.Connection):
            def cursor(self, factory=Cursor):
                return super().cursor(factory)

            def commit(self):
                super().commit()
                fault.after_commit(self)

        def connect(dialect, record, cargs, cparams):
            cparams['factory'] = Connection
    elif name == 'mysqldb':
        import MySQLdb
        from MySQLdb import cursors

        class Cursor(cursors.Cursor):
            def execute(self, sql, args=None):
                result = super().execute(sql, args)
                fault.after(self.connection, sql)
                return result

            def executemany(self, sql, args):
                result = super().executemany(sql, args)
                fault.after(self.connection, sql)
                return result

        class Connection(MySQLdb.connections.Connection):
            def commit(self):
                super().commit()
                fault.after_commit(self)

        def connect(dialect, record, cargs, cparams):
            return Connection(*cargs, **dict(cparams, cursorclass=Cursor))
    else:
        import psycopg2.extensions

        class Cursor(psycopg2.extensions.cursor):
            def execute(self, sql, args=None):
                result = super().execute(sql, args)
                fault.after(self.connection, sql)
                return result

        class Connection(psycopg2.extensions.connection):
            def cursor(self, *args, **kw):
                kw.setdefault('cursor_factory', Cursor)
                return super().cursor(*args, **kw)

            def commit(self):
                super().commit()
                fault.after_commit(self)

        def connect(dialect, record, cargs, cparams):
            cparams['connection_factory'] = Connection

    sa.event.listen(engine, 'do_connect', connect)
    engine.dispose()  # what it pooled was made before


@pytest.mark.parametrize('known', [False, True],
                         ids=['profile-read', 'profile-known'])
def test_a_reply_lost_after_the_commit_is_no_failed_creation(
        db, admin_context, known):
    fault = _Fault()
    for engine in db.engines:
        _faulty_connections(engine, fault)
    _profile(admin_context, 'lost')
    if known:
        arqs.delete_arqs(admin_context, uuids=[
            a['uuid'] for a in arqs.create_arqs(admin_context, 'lost', 'p')])
        assert 'lost' in arqs._KNOWN_PROFILES
    fault.armed = True

    made = arqs.create_arqs(admin_context, 'lost', 'p')

    assert fault.fired == 1
    # Made once: what the caller got is what there is.
    assert _arq_uuids(db, admin_context) == sorted(a['uuid'] for a in made)


def test_a_write_that_failed_before_the_commit_is_an_error(db,
                                                          admin_context):
    _profile(admin_context, 'refused')
    device_profiles.delete_profiles(admin_context, names=['refused'])
    with pytest.raises(exception.NotFound):
        arqs.create_arqs(admin_context, 'refused', 'p')
    assert _arq_uuids(db, admin_context) == []
