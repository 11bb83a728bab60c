"""``Database.read_prepared``: SELECTs built once, sent on the driver's
cursor where SQLAlchemy would add nothing, with the rows SQLAlchemy would
give, on each engine."""

import datetime

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db import prepared
from tests import db_servers
from tests.functional.db import test_lone_statements as lone

Profile = models.DeviceProfile.__table__

on_servers = pytest.mark.parametrize(
    'database_url', [e for e in db_servers.ENGINES if e != 'sqlite'],
    indirect=True)


@pytest.fixture
def three(db, admin_context):
    with db.write_connection(admin_context) as connection:
        for name in ('p1', 'p2', 'p3'):
            lone._add(connection, name)


def _through_sqlalchemy(db, statement, params=None):
    with db.engine.connect() as connection:
        return [tuple(r) for r in connection.execute(statement,
                                                     params or {})]


def _listing():
    # A literal '%' (escaped by the compiler for the MySQL drivers) and
    # a bound LIMIT.
    return (sa.select(Profile.c.uuid, Profile.c.name, Profile.c.created_at,
                      sa.literal_column("'100%'").label('percent'))
            .order_by(Profile.c.id.desc()).limit(2))


def test_rows_are_those_sqlalchemy_gives(db, admin_context, three):
    statement = prepared.Prepared(_listing())

    rows = db.read_prepared(admin_context, statement)

    assert rows == _through_sqlalchemy(db, _listing())
    assert [r[1] for r in rows] == ['p3', 'p2']
    assert rows[0][3] == '100%'
    assert isinstance(rows[0][2], datetime.datetime)


def test_parameters_are_sent(db, admin_context, three):
    statement = prepared.Prepared(
        sa.select(Profile.c.name).where(Profile.c.name == sa.bindparam('n')))

    assert db.read_prepared(admin_context, statement, {'n': 'p2'}) == [
        ('p2',)]
    assert db.read_prepared(admin_context, statement, {'n': 'none'}) == []


def test_a_column_the_dialect_converts_is_converted(db, admin_context,
                                                    three):
    # JSON is decoded by SQLAlchemy on some drivers: read through it there.
    statement = prepared.Prepared(
        sa.select(Profile.c.profile_json).where(Profile.c.name == 'p1'))

    assert db.read_prepared(admin_context, statement) == [
        ({'groups': []},)]


@on_servers
def test_the_driver_cursor_serves_it_on_servers(db, admin_context, three):
    engine = db._autocommit_engine()
    connections = []

    def connected(connection):
        connections.append(connection)

    sa.event.listen(engine, 'engine_connect', connected)
    try:
        assert prepared.Prepared(_listing()).form(engine.dialect) is not None
        rows = db.read_prepared(admin_context, prepared.Prepared(_listing()))
    finally:
        sa.event.remove(engine, 'engine_connect', connected)
    # No SQLAlchemy Connection was made for it.
    assert connections == []
    assert len(rows) == 2


def test_a_watched_engine_sees_every_statement(db, admin_context, three,
                                               sql_counter):
    db.read_prepared(admin_context, prepared.Prepared(_listing()))

    assert len(sql_counter) == 1
    assert 'FROM device_profiles' in sql_counter.statements[0]


@on_servers
def test_a_connection_the_server_closed_is_replaced(db, admin_context, three,
                                                    database_url):
    engine = db._autocommit_engine()
    statement = prepared.Prepared(_listing())
    db.read_prepared(admin_context, statement)
    with engine.connect() as connection:
        server_id = lone._server_connection_id(connection)
    lone._kill(database_url, server_id)

    # Within the pool's no-ping second: the SELECT finds it broken.
    assert len(db.read_prepared(admin_context, statement)) == 2
    with engine.connect() as connection:
        assert lone._server_connection_id(connection) != server_id


def test_inside_a_transaction_it_reads_what_the_transaction_wrote(
        db, admin_context):
    with db.writer(admin_context) as session:
        lone._add(session.connection(), 'uncommitted')
        rows = db.read_prepared(admin_context, prepared.Prepared(
            sa.select(Profile.c.name)))
    assert rows == [('uncommitted',)]


def _deleting():
    return prepared.Prepared(
        sa.delete(Profile).where(Profile.c.name == sa.bindparam('n')))


def test_a_write_counts_its_rows_and_commits(db, admin_context, three):
    assert db.write_prepared(admin_context, _deleting(), {'n': 'p2'}) == 1
    assert db.write_prepared(admin_context, _deleting(), {'n': 'p2'}) == 0

    assert [r[1] for r in _through_sqlalchemy(db, sa.select(
        Profile.c.id, Profile.c.name).order_by(Profile.c.id))] == ['p1', 'p3']


def test_a_write_the_database_refuses_raises_what_oslo_db_says(
        db, admin_context):
    arqs = models.ExtendedAcceleratorRequest.__table__
    orphan = prepared.Prepared(sa.insert(arqs).values(
        uuid='u-1', state='Initial', device_profile_id=sa.bindparam('p'),
        device_profile_group_id=0, created_at=models.utcnow()))

    with pytest.raises(db_exc.DBReferenceError):
        db.write_prepared(admin_context, orphan, {'p': 12345})
    assert _through_sqlalchemy(db, sa.select(arqs.c.uuid)) == []


def test_a_watched_engine_sees_every_write(db, admin_context, three,
                                           sql_counter):
    assert db.write_prepared(admin_context, _deleting(), {'n': 'p1'}) == 1

    [statement] = sql_counter.statements
    assert statement.lstrip().upper().startswith('DELETE')
