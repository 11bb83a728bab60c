"""``Database.read_rows`` and ``write_connection``: statements outside a
context's transaction on a pool of their own, in autocommit, with no ping
and no ROLLBACK around them; inside one, that transaction's."""

import os

import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db import session
from tests import db_servers

Profile = models.DeviceProfile.__table__

# For the tests of a server's connections: SQLite has none.
on_servers = pytest.mark.parametrize(
    'database_url', [e for e in db_servers.ENGINES if e != 'sqlite'],
    indirect=True)


def _add(connection, name):
    connection.execute(sa.insert(Profile).values(
        uuid=name, name=name, profile_json={'groups': []},
        created_at=models.utcnow()))


def _names(db, context):
    return [r.name for r in db.read_rows(
        context, sa.select(Profile.c.name).order_by(Profile.c.id))]


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


def test_a_write_commits_and_a_read_sees_it(db, admin_context, sql_counter):
    with db.write_connection(admin_context) as connection:
        _add(connection, 'one')
    sql_counter.reset()
    assert _names(db, admin_context) == ['one']
    # The SELECT alone: no ping, no ROLLBACK (nor BEGIN) around it.
    assert len(sql_counter) == 1
    executed = [s.strip().upper() for s in sql_counter.statements]
    assert executed[0].startswith('SELECT')


def test_a_write_that_raises_is_rolled_back(db, admin_context):
    with pytest.raises(ZeroDivisionError), db.write_connection(
            admin_context) as connection:
        _add(connection, 'gone')
        raise ZeroDivisionError()
    assert _names(db, admin_context) == []


def test_autocommit_statements_stand_alone(db, admin_context, sql_counter):
    with pytest.raises(ZeroDivisionError), db.autocommit_connection(
            admin_context) as connection:
        _add(connection, 'kept')
        raise ZeroDivisionError()
    # Committed on its own, the row stays; on SQLite they run in a
    # transaction, rolled back.
    sqlite = db.engine.dialect.name == 'sqlite'
    assert _names(db, admin_context) == ([] if sqlite else ['kept'])


@on_servers
def test_a_rested_connection_is_pinged_first(db, db_url, admin_context,
                                            monkeypatch):
    engine = db.engines[-1]
    with engine.connect() as connection:
        server_id = _server_connection_id(connection)
    _kill(db_url, server_id)
    monkeypatch.setattr(session, 'PING_AFTER_IDLE', -1.0)
    with db.autocommit_connection(admin_context) as connection:
        _add(connection, 'pinged')
    assert _names(db, admin_context) == ['pinged']


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


@on_servers
def test_a_connection_the_server_ended_is_replaced(db, db_url,
                                                   admin_context):
    engine = db.engines[-1]
    with engine.connect() as connection:
        server_id = _server_connection_id(connection)
    _kill(db_url, server_id)
    assert _names(db, admin_context) == []
    with engine.connect() as connection:
        server_id = _server_connection_id(connection)
    _kill(db_url, server_id)
    with db.write_connection(admin_context) as connection:
        _add(connection, 'after')
    assert _names(db, admin_context) == ['after']


# Not SQLite: its reads go through the transactions' pool.
@on_servers
def test_a_forked_process_opens_its_own_connections(db, admin_context,
                                                    monkeypatch):
    engine = db.engines[-1]
    with engine.connect() as connection:
        parents = _server_connection_id(connection)
    pid = os.getpid()
    monkeypatch.setattr(os, 'getpid', lambda: pid + 1)
    with engine.connect() as connection:
        assert _server_connection_id(connection) != parents
