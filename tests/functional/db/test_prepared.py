"""``Database.read_prepared``, the one fast path: each SELECT run both
ways, on the driver's cursor and through SQLAlchemy, on every engine,
gives the same rows and the same oslo.db error."""

import datetime

import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db import prepared
from cyborg.db.api import device_profiles
from tests.functional.db import test_one_path as one_path

Profile = models.DeviceProfile.__table__


@pytest.fixture
def three(db, admin_context):
    with db.write_connection(admin_context) as connection:
        for name in ('p1', 'p2', 'p3'):
            one_path._add(connection, name)


def _through_sqlalchemy(db, context, statement, params=None):
    with db.read_connection(context) as connection:
        return [tuple(r) for r in connection.execute(statement,
                                                     params or {})]


def _on_cursor(db, statement):
    """Whether ``read_prepared`` sends ``statement`` on the cursor here."""
    return statement.form(db.engine.dialect) is not None


def _percent_listing():
    # A literal '%' (escaped by the compiler for the MySQL drivers) and
    # a bound LIMIT.
    return (sa.select(Profile.c.uuid, Profile.c.name, Profile.c.created_at,
                      sa.literal_column("'100%'").label('percent'))
            .order_by(Profile.c.id.desc()).limit(2))


# Every shape of the API's list that goes through read_prepared.
LISTINGS = [(None, 'id', 'asc'), (2, 'id', 'desc'), (1, 'name', 'asc'),
            (5, 'created_at', 'desc')]


@pytest.mark.parametrize('shape', LISTINGS)
def test_the_device_profile_list_gives_sqlalchemys_rows(db, admin_context,
                                                         three, shape):
    listing = device_profiles._unfiltered_listing(*shape)

    rows = db.read_prepared(admin_context, listing)

    assert rows == _through_sqlalchemy(db, admin_context, listing.statement)
    assert len(rows) == min(shape[0] or 3, 3)
    # On the servers it is served on the cursor; SQLite's datetimes are
    # converted by SQLAlchemy, so it is not there.
    assert _on_cursor(db, listing) == (db.engine.dialect.name != 'sqlite')


@pytest.mark.parametrize('shape', LISTINGS)
def test_a_projects_device_profile_list_gives_sqlalchemys_rows(
        db, admin_context, three, shape):
    """The list a project sees (enabled, public or shared with it), its
    project bound per call: p2 disabled, p3 private and shared with p1
    alone."""
    with db.write_connection(admin_context) as connection:
        connection.execute(sa.update(Profile).where(
            Profile.c.name == 'p2').values(enabled=False))
        connection.execute(sa.update(Profile).where(
            Profile.c.name == 'p3').values(is_public=False))
        p3 = connection.execute(sa.select(Profile.c.id).where(
            Profile.c.name == 'p3')).scalar_one()
        connection.execute(sa.insert(
            models.DeviceProfileProject.__table__).values(
                device_profile_id=p3, project_id='p1'))
    listing = device_profiles._visible_listing(*shape)

    for project, names in (('p1', {'p1', 'p3'}), ('p2', {'p1'})):
        rows = db.read_prepared(admin_context, listing,
                                {'visible_to': project})
        assert rows == _through_sqlalchemy(db, admin_context,
                                           listing.statement,
                                           {'visible_to': project})
        assert {r[1] for r in rows} <= names
        assert len(rows) == min(shape[0] or len(names), len(names))
    assert _on_cursor(db, listing) == (db.engine.dialect.name != 'sqlite')


def test_a_literal_percent_and_a_bound_limit(db, admin_context, three):
    statement = prepared.Prepared(_percent_listing())

    rows = db.read_prepared(admin_context, statement)

    assert rows == _through_sqlalchemy(db, admin_context, _percent_listing())
    assert [r[1] for r in rows] == ['p3', 'p2']
    assert rows[0][3] == '100%'
    assert isinstance(rows[0][2], datetime.datetime)


def test_parameters_are_sent(db, admin_context, three):
    statement = prepared.Prepared(
        sa.select(Profile.c.name).where(Profile.c.name == sa.bindparam('n')))

    assert db.read_prepared(admin_context, statement, {'n': 'p2'}) == [
        ('p2',)]
    assert db.read_prepared(admin_context, statement, {'n': 'none'}) == []


def test_a_column_the_dialect_converts_goes_through_sqlalchemy(
        db, admin_context, three):
    statement = prepared.Prepared(
        sa.select(Profile.c.profile_json).where(Profile.c.name == 'p1'))

    assert not _on_cursor(db, statement)
    assert db.read_prepared(admin_context, statement) == [({'groups': []},)]


def test_an_error_is_the_one_oslo_db_gives(db, admin_context):
    missing = sa.table('no_such_table', sa.column('name'))
    statement = prepared.Prepared(sa.select(missing.c.name))

    with pytest.raises(Exception) as through_sqlalchemy:
        _through_sqlalchemy(db, admin_context, statement.statement)
    with pytest.raises(Exception) as fast:
        db.read_prepared(admin_context, statement)

    # Not the driver's own error: SQLAlchemy's, as oslo.db's filters
    # left or translated it.
    assert type(fast.value) is type(through_sqlalchemy.value)
    assert type(fast.value).__module__ in ('oslo_db.exception',
                                           'sqlalchemy.exc')


@one_path.on_servers
def test_no_sqlalchemy_connection_is_made_on_servers(db, admin_context,
                                                     three):
    made = []

    def connected(connection):
        made.append(connection)

    sa.event.listen(db.engine, 'engine_connect', connected)
    try:
        rows = db.read_prepared(admin_context,
                                prepared.Prepared(_percent_listing()))
    finally:
        sa.event.remove(db.engine, 'engine_connect', connected)
    assert made == []
    assert len(rows) == 2


def test_a_watched_engine_sees_every_statement(db, admin_context, three,
                                               sql_counter):
    db.read_prepared(admin_context, prepared.Prepared(_percent_listing()))

    assert len(sql_counter) == 1
    assert 'FROM device_profiles' in sql_counter.statements[0]


@one_path.on_servers
def test_a_connection_the_server_ended_is_replaced(db, db_url, admin_context,
                                                   three):
    statement = prepared.Prepared(_percent_listing())
    db.read_prepared(admin_context, statement)
    with db.engine.connect() as connection:
        server_id = one_path._server_connection_id(connection)
    one_path._kill(db_url, server_id)

    assert len(db.read_prepared(admin_context, statement)) == 2


def test_it_runs_in_a_transaction_of_its_own(db, admin_context):
    # Not inside the caller's: what that wrote is not seen until committed.
    statement = prepared.Prepared(sa.select(Profile.c.name))
    with db.write_connection(admin_context) as connection:
        one_path._add(connection, 'uncommitted')
        if db.engine.dialect.name != 'sqlite':
            assert db.read_prepared(admin_context, statement) == []
    assert db.read_prepared(admin_context, statement) == [('uncommitted',)]
