"""Fixtures shared by every test: configuration, databases, the API."""

import contextlib
import threading

from oslo_policy import opts as oslo_policy_opts
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
import webtest

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg.api import app as api_app
from cyborg.cmd import api as api_cmd
from cyborg.db import session
from tests import db_servers
from tests import privsep_rig
from tests import schema_template


def pytest_terminal_summary(terminalreporter):
    """The boots through Nova (``tests/functional/nova``), one line each
    with its time and the service's share, after the run."""
    lines = [value for reports in terminalreporter.stats.values()
             for report in reports
             for name, value in getattr(report, 'user_properties', ())
             if name == 'nova_boot']
    if lines:
        terminalreporter.section('boots through Nova')
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope='session', autouse=True)
def prompt_rabbit_listener_stop():
    """An idle RabbitMQ listener of oslo.messaging waits up to this many
    seconds in one consume, and stopping its server waits for that
    consume to end: up to 5 s per server stopped in a test's process.
    Tests stop many; a short wait changes nothing else."""
    from oslo_messaging._drivers import amqpdriver
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(amqpdriver, 'ACK_REQUEUE_EVERY_SECONDS_MAX', 0.25)
        yield


def make_conf(connection, **overrides):
    """A fresh configuration: noauth, the given database, any overrides.

    ``overrides`` are ``(group, name): value`` or ``name: value`` pairs.
    """
    conf = cyborg_conf.load(default_config_files=[])
    oslo_policy_opts.set_defaults(conf)
    # A policy file left on the machine must not change what tests see.
    conf.set_override('policy_file', '/nonexistent/cyborg-policy.yaml',
                      group='oslo_policy')
    conf.set_override('connection', connection, group='database')
    conf.set_override('auth_strategy', 'noauth')
    for key, value in overrides.items():
        group, name = key if isinstance(key, tuple) else (None, key)
        conf.set_override(name, value, group=group)
    return conf


def create_schema(url):
    """The empty database at ``url`` at the head revision
    (``tests.schema_template``: migrated once per engine, then copied)."""
    schema_template.create_schema(url)


@pytest.fixture(params=db_servers.ENGINES)
def database_url(request, tmp_path):
    """An empty database on each engine in turn."""
    url = db_servers.create_database(request.param, tmp_path)
    yield url
    db_servers.drop_database(url)


def database_url_on(engine):
    """A ``database_url`` fixture of ``engine`` alone, for a module whose
    subject is not the SQL: ``database_url = database_url_on('mysql')``."""
    @pytest.fixture
    def database_url(tmp_path):
        url = db_servers.create_database(engine, tmp_path)
        yield url
        db_servers.drop_database(url)
    return database_url


@pytest.fixture(scope='module', params=db_servers.ENGINES)
def module_db_url(request, tmp_path_factory):
    """A migrated database on each engine, shared by a module's tests."""
    url = db_servers.create_database(request.param,
                                     tmp_path_factory.mktemp('db'))
    create_schema(url)
    yield url
    db_servers.drop_database(url)


@pytest.fixture
def sqlite_url(tmp_path):
    url = db_servers.create_database('sqlite', tmp_path)
    yield url
    db_servers.drop_database(url)


@pytest.fixture
def db_url(database_url):
    """A database on each engine, with the schema migrated to head."""
    create_schema(database_url)
    return database_url


@pytest.fixture
def conf(db_url):
    return make_conf(db_url)


@pytest.fixture
def db(conf):
    database = session.Database(conf)
    yield database
    database.dispose()


@pytest.fixture
def admin_context(db):
    return cyborg_context.admin_context(db, project_id='admin-project')


@pytest.fixture
def api(conf, db):
    """The WSGI app under WebTest, sharing ``db`` with the test."""
    return webtest.TestApp(api_app.build_app(conf, db))


def record_app_states(monkeypatch):
    """The list the ``AppState`` of each app built from now on is added
    to (``cyborg.api.hooks``)."""
    from cyborg.api import hooks
    states = []

    class Recorded(hooks.AppState):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            states.append(self)

    monkeypatch.setattr(hooks, 'AppState', Recorded)
    return states


class StatementCounter:
    """Counts the SQL queries engines run (not BEGIN and friends, nor the
    write lock a SQLite writer begins with): those of a ``Database`` are
    its ``engines``."""

    TRANSACTION_CONTROL = ('BEGIN', 'COMMIT', 'ROLLBACK', 'SAVEPOINT',
                           'RELEASE')
    SQLITE_WRITE_LOCK = str(session.SQLITE_WRITE_LOCK.compile(
        dialect=sqlite.dialect()))

    def __init__(self, *engines):
        self.engines = engines
        self.statements = []
        self.threads = []  # the thread that ran each statement
        for engine in engines:
            sa.event.listen(engine, 'before_cursor_execute', self._seen)

    def _seen(self, conn, cursor, statement, parameters, context, many):
        if not (statement.lstrip().upper().startswith(
                self.TRANSACTION_CONTROL)
                or statement == self.SQLITE_WRITE_LOCK):
            self.statements.append(statement)
            self.threads.append(threading.get_ident())

    def of_this_thread(self):
        """The statements this thread ran (not an in-process conductor's
        or agent's)."""
        me = threading.get_ident()
        return [s for s, t in zip(self.statements, self.threads,
                                  strict=True) if t == me]

    def __len__(self):
        return len(self.statements)

    def reset(self):
        self.statements.clear()
        self.threads.clear()

    def close(self):
        for engine in self.engines:
            sa.event.remove(engine, 'before_cursor_execute', self._seen)


@pytest.fixture
def sql_counter(db):
    counter = StatementCounter(*db.engines)
    yield counter
    counter.close()


class ServedAPI:
    """The API on a real HTTP port of 127.0.0.1, served from a thread
    (its RPC on ``transport`` when given, else from the configuration)."""

    def __init__(self, conf, db, transport=None):
        conf.set_override('port', 0, group='api')
        self.server = api_cmd.make_server(
            conf, api_app.build_app(conf, db, transport=transport))
        self.server.prepare()
        host, port = self.server.bind_addr[:2]
        self.url = 'http://%s:%d' % (host, port)
        self._thread = threading.Thread(target=self.server.serve,
                                        daemon=True)
        self._thread.start()

    def stop(self):
        self.server.stop()
        self._thread.join(timeout=10)


@pytest.fixture
def served_api(conf, db):
    served = ServedAPI(conf, db)
    yield served
    served.stop()


@pytest.fixture
def privileged_on():
    """privileged_on(root): the agent's privileged calls (cyborg.privsep)
    run in the test process against the sysfs tree at ``root``, their
    checks included, until the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda root: stack.enter_context(privsep_rig.in_process(root))
