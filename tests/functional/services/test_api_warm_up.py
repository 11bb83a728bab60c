"""A serving API worker opens its database pool and its connection to
RabbitMQ when it starts, not on its first bind (``AppState.warm_up``),
and writes nothing while it does."""

import logging

import pytest

from cyborg import rpc
from cyborg.api import app as api_app
from cyborg.api import hooks
from cyborg.db import session
from tests import conftest
from tests import db_servers

# SQLite's file engine pools nothing to open ahead.
on_servers = pytest.mark.parametrize(
    'database_url', [e for e in db_servers.ENGINES if e != 'sqlite'],
    indirect=True)


@pytest.fixture
def built(monkeypatch):
    return conftest.record_app_states(monkeypatch)


def _send_connections(transport):
    # The driver's pool of send connections (oslo.messaging's own).
    return transport._driver._connection_pool._current_size


@on_servers
@pytest.mark.parametrize('warm', [True, False])
def test_a_warm_app_opens_its_connections_before_any_request(
        db_url, vhost_url, built, warm):
    conf = conftest.make_conf(db_url)
    db = session.Database(conf)
    transport = rpc.get_transport(conf, url=vhost_url)
    try:
        api_app.build_app(conf, db, transport=transport, warm=warm)
        state, = built
        if warm:
            state.warming.join(60)
            assert not state.warming.is_alive()
        else:
            assert state.warming is None
        # No request was served: only the warm-up can have opened them.
        assert _send_connections(transport) == (1 if warm else 0)
        assert (state._membership._read_at is not None) == warm
        if warm:
            # (Asking for the engine starts it, so only when warm.)
            [engine] = db.engines
            assert engine.pool.checkedin() >= 1
        with db.engine.connect() as connection:
            # Nothing rehearsed in live tables, not even rolled back.
            assert connection.exec_driver_sql(
                'SELECT COUNT(*) FROM device_profiles').scalar() == 0
    finally:
        transport.cleanup()
        db.dispose()


@pytest.mark.parametrize('database_url', ['mysql'], indirect=True)
def test_a_bus_that_is_down_delays_nothing(db_url, built, caplog):
    caplog.set_level(logging.INFO, logger=hooks.__name__)
    # Nothing listens on port 1: the warm-up gives up and says so.
    conf = conftest.make_conf(db_url)
    db = session.Database(conf)
    transport = rpc.get_transport(
        conf, url='rabbit://guest:guest@127.0.0.1:1/')
    try:
        app = api_app.build_app(conf, db, transport=transport, warm=True)
        state, = built
        state.warming.join(60)
        assert not state.warming.is_alive()
        assert 'Warming up the API worker' in caplog.text
        assert _send_connections(transport) == 0
        # The database was warmed before the bus failed.
        assert db.engine.pool.checkedin() == 1
        assert app is not None
    finally:
        transport.cleanup()
        db.dispose()
