"""What the API's request path does once instead of on every request: the
MySQL driver, pecan's signature lookups, the conductor's RPC client, the
decoded profile groups; and the services' imports."""

import datetime
import os
import subprocess
import sys

import pecan
import pecan.core
import pecan.rest
import pecan.routing
import pecan.util
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.api import app as api_app
from cyborg.api import argspec
from cyborg.api import views
from cyborg.db import session
from cyborg.db.api import device_profiles
from tests import conductor_rpc
from tests import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


# -- the MySQL driver ------------------------------------------------------

@pytest.fixture
def with_mysqlclient(monkeypatch):
    monkeypatch.setitem(sys.modules, 'MySQLdb', object())


@pytest.fixture
def without_mysqlclient(monkeypatch):
    # None in sys.modules: the import fails, as when it is not installed.
    monkeypatch.setitem(sys.modules, 'MySQLdb', None)


@pytest.mark.parametrize('url', [
    'mysql+pymysql://root:p%40ss@db.example:3306/cyborg?charset=utf8mb4',
    'mysql+mysqldb://root:p%40ss@db.example:3306/cyborg?charset=utf8mb4',
    'mysql://root:p%40ss@db.example:3306/cyborg?charset=utf8mb4',
])
def test_mysql_urls_get_mysqlclient_where_installed(with_mysqlclient, url):
    chosen = session.with_mysql_driver(url)
    assert chosen == ('mysql+mysqldb://root:p%40ss@db.example:3306/cyborg'
                      '?charset=utf8mb4')
    assert sa.engine.make_url(chosen).password == 'p@ss'


@pytest.mark.parametrize('url', [
    'mysql+pymysql://root@127.0.0.1/cyborg',
    'mysql+mysqldb://root@127.0.0.1/cyborg',
    'mysql://root@127.0.0.1/cyborg',
])
def test_mysql_urls_fall_back_to_pymysql(without_mysqlclient, url):
    assert session.mysql_driver() == 'pymysql'
    assert session.with_mysql_driver(url) == (
        'mysql+pymysql://root@127.0.0.1/cyborg')


@pytest.mark.parametrize('url', [
    'sqlite:////tmp/cyborg.sqlite',
    'postgresql+psycopg2://postgres@127.0.0.1/cyborg',
    'mysql+mysqlconnector://root@127.0.0.1/cyborg',
])
def test_other_urls_are_left_alone(with_mysqlclient, url):
    assert session.with_mysql_driver(url) == url


def test_the_database_uses_the_chosen_driver(without_mysqlclient, caplog,
                                             monkeypatch):
    configured = {}

    class Facade:
        def configure(self, **options):
            configured.update(options)

    monkeypatch.setattr(session.enginefacade, 'transaction_context', Facade)
    conf = conftest.make_conf('mysql+mysqldb://root@127.0.0.1/cyborg')
    caplog.set_level('INFO', logger='cyborg.db.session')
    session.Database(conf)
    assert configured['connection'] == 'mysql+pymysql://root@127.0.0.1/cyborg'
    assert 'MySQL driver: PyMySQL (mysqlclient is not installed)' in (
        caplog.text)


# -- pecan's signature lookups ---------------------------------------------

class Controller:

    @pecan.expose()
    def exposed(self, key, *parts, limit=None, **params):
        pass

    def plain(self, a, b=1):
        pass

    @staticmethod
    def static(x, y=2):
        pass

    @pecan.expose()
    def _route(self, args, request=None):
        pass


def _wrapped(function):
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper


@pytest.mark.parametrize('name', ['exposed', 'plain', 'static', '_route'])
def test_argspec_cache_answers_as_pecan(name):
    controller = Controller()
    for method in (getattr(controller, name), getattr(Controller, name),
                   _wrapped(getattr(Controller, name))):
        assert argspec.getargspec(method) == argspec._ORIGINAL(method)
        # Asked again (a bound method is a new object each time).
        assert argspec.getargspec(method) == argspec._ORIGINAL(method)


def test_argspec_cache_keeps_one_answer_per_function():
    controller = Controller()
    first = argspec.getargspec(controller.exposed)
    assert argspec.getargspec(Controller().exposed) is first
    assert argspec.getargspec(Controller.exposed) is first


def test_argspec_cache_takes_unhashable_callables():
    class Unhashable:
        __hash__ = None

        def __call__(self, a):
            pass

    callable_object = Unhashable()
    assert argspec.getargspec(callable_object) == argspec._ORIGINAL(
        callable_object)


def test_the_app_makes_pecan_use_the_cache(sqlite_url):
    conf = conftest.make_conf(sqlite_url)
    conductor_rpc.use_fake_transport(conf)
    db = session.Database(conf)
    try:
        api_app.build_app(conf, db)
    finally:
        db.dispose()
    for module in (pecan.core, pecan.rest, pecan.routing):
        assert module.getargspec is argspec.getargspec
    # pecan's own function stays as it was, for anyone who asks it.
    assert pecan.util.getargspec is argspec._ORIGINAL


# -- the conductor's RPC client --------------------------------------------

@pytest.fixture
def fake_rpc_conf(sqlite_url):
    conf = conftest.make_conf(sqlite_url)
    conductor_rpc.use_fake_transport(conf)
    return conf


def _built(monkeypatch, conf, db, **kwargs):
    """The AppState of a new app."""
    states = conftest.record_app_states(monkeypatch)
    api_app.build_app(conf, db, **kwargs)
    return states[0]


@pytest.fixture
def made_transports(monkeypatch):
    """Every transport ``rpc.get_transport`` makes, cleaned up after."""
    from cyborg import rpc
    made = []
    real = rpc.get_transport
    monkeypatch.setattr(rpc, 'get_transport',
                        lambda conf: made.append(real(conf)) or made[-1])
    yield made
    for transport in made:
        transport.cleanup()


@pytest.fixture
def fork_hooks(monkeypatch):
    """What is registered to run in a child after a fork."""
    hooks = []
    monkeypatch.setattr(os, 'register_at_fork',
                        lambda after_in_child: hooks.append(after_in_child))
    return hooks


@pytest.fixture
def rpc_db(fake_rpc_conf):
    db = session.Database(fake_rpc_conf)
    yield db
    db.dispose()


def test_the_transport_is_made_with_the_app(fake_rpc_conf, monkeypatch,
                                            made_transports, rpc_db):
    made = made_transports
    state = _built(monkeypatch, fake_rpc_conf, rpc_db)
    # Before any request: nothing is left for the first bind to load.
    assert len(made) == 1
    assert state._conductor is not None
    assert state._membership is not None
    assert state.conductor is state._conductor
    assert len(made) == 1


def test_a_forked_worker_makes_its_own_transport(fake_rpc_conf, monkeypatch,
                                                 made_transports, fork_hooks,
                                                 rpc_db):
    state = _built(monkeypatch, fake_rpc_conf, rpc_db)
    parents = state.conductor
    hook, = fork_hooks
    hook()  # as in the child, right after a fork
    assert len(made_transports) == 2
    assert state.conductor is not parents


def test_a_given_transport_is_kept_across_a_fork(fake_rpc_conf, monkeypatch,
                                                 fork_hooks, rpc_db):
    from cyborg import rpc
    transport = rpc.get_transport(fake_rpc_conf)
    try:
        state = _built(monkeypatch, fake_rpc_conf, rpc_db,
                       transport=transport)
        conductor = state.conductor
        fork_hooks[0]()
        # The caller's transport: the caller owns it and its processes.
        assert state.conductor is conductor
    finally:
        transport.cleanup()


# -- reads and views ---------------------------------------------------------

def test_reads_outside_a_transaction_use_a_connection_of_their_own(
        sqlite_url):
    conftest.create_schema(sqlite_url)
    conf = conftest.make_conf(sqlite_url)
    db = session.Database(conf)
    context = cyborg_context.admin_context(db)
    try:
        with db.read_connection(context) as connection:
            assert isinstance(connection, sa.engine.Connection)
            assert connection.execute(sa.text('SELECT 1')).scalar() == 1
        assert connection.closed
        with db.writer(context) as writing, db.read_connection(
                context) as connection:
            # Inside a transaction: that transaction's connection.
            assert connection is writing.connection()
    finally:
        db.dispose()


def test_profile_groups_are_decoded_once_per_text():
    text = '{"groups": [{"resources:FPGA": "1"}]}'
    first = device_profiles.groups_of(text)
    assert first == [{'resources:FPGA': '1'}]
    assert device_profiles.groups_of(text[:1] + text[1:]) is first


@pytest.mark.parametrize('value', [
    datetime.datetime(2026, 1, 2, 3, 4, 5),
    datetime.datetime(2026, 1, 2, 3, 4, 5, 678),
    datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
])
def test_timestamps_read_as_before(value):
    assert views.timestamp(value) == value.replace(
        tzinfo=datetime.timezone.utc).isoformat()


# -- the services' imports ---------------------------------------------------

@pytest.mark.parametrize('module', ['cyborg.cmd.conductor',
                                    'cyborg.cmd.agent', 'cyborg.cmd.api'])
def test_services_import_no_eventlet(module):
    found = subprocess.run(
        [sys.executable, '-c', 'import sys, %s; print(sys.modules.get('
         '"eventlet"))' % module], capture_output=True, text=True,
        cwd=ROOT, timeout=120, check=True)
    assert found.stdout.strip() == 'None', found.stderr


# -- the request class and the request id ------------------------------------

def _form_post(body):
    import webob
    environ = webob.Request.blank('/v2/device_profiles').environ
    request = webob.Request(environ)
    request.method = 'POST'
    request.content_type = 'application/x-www-form-urlencoded'
    request.body = body
    return environ


@pytest.mark.parametrize('name', ['text', 'POST', 'params'])
def test_an_undecodable_body_is_a_400_as_with_pecans_request(name):
    from webob import exc as webob_exc

    from cyborg.api import request as api_request
    answers = []
    for cls in (pecan.core.Request, api_request.Request):
        request = cls(_form_post(b'k=\xff\xfe'))
        request.charset = 'UTF-8'
        try:
            getattr(request, name)
        except webob_exc.HTTPBadRequest:
            answers.append(400)
        except Exception as e:  # compared below
            answers.append(type(e).__name__)
        else:
            answers.append('read')
    assert answers[0] == answers[1]
    if name == 'text':
        assert answers[0] == 400


@pytest.mark.parametrize('name', ['json', 'json_body'])
def test_pecan_is_given_no_json_body(name):
    # Controllers parse their bodies after the policy check; pecan takes
    # the ValueError as "not JSON" and reads no arguments from the body.
    from cyborg.api import request as api_request
    request = api_request.Request(_form_post(b'{"a": 1}'))
    request.content_type = 'application/json'
    with pytest.raises(ValueError):
        getattr(request, name)


def test_the_request_class_reads_as_webobs():
    from cyborg.api import request as api_request
    environ = _form_post(b'a=1')
    environ['QUERY_STRING'] = 'b=2'
    ours = api_request.Request(environ)
    theirs = pecan.core.Request(dict(environ))
    for name in api_request.DECODING:
        if name in ('text', 'json', 'json_body'):
            continue
        assert getattr(ours, name) == getattr(theirs, name), name
    ours.path_info = '/v2/x'
    assert ours.path_info == '/v2/x'


def _answer(middleware, headers=()):
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'ok']

    got = []
    body = middleware(app)(
        dict(_form_post(b''), **dict(headers)),
        lambda status, headers, exc_info=None: got.append(headers))
    b''.join(body)
    return seen, dict(got[0])


@pytest.mark.parametrize('given', [
    None, 'req-1b5bd5d4-6a3c-4f7e-8a77-0f8b2f8f3c11', 'not-an-id',
    'req-1b5bd5d4-6a3c-4f7e-8a77-0f8b2f8f3c11\n'])
def test_request_ids_as_oslo_middleware_gives_them(given):
    from oslo_middleware import request_id as oslo_request_id

    from cyborg.api.middleware import request_id
    headers = {} if given is None else {'HTTP_X_OPENSTACK_REQUEST_ID': given}
    answers = []
    for middleware in (oslo_request_id.RequestId, request_id.RequestId):
        environ, sent = _answer(middleware, headers)
        own = environ[oslo_request_id.ENV_REQUEST_ID]
        assert own.startswith('req-')
        assert sent[oslo_request_id.HTTP_RESP_HEADER_REQUEST_ID] == own
        answers.append(environ.get(oslo_request_id.GLOBAL_REQ_ID))
    assert answers[0] == answers[1]


def test_the_client_follows_options_changed_after_the_build(
        fake_rpc_conf, monkeypatch, made_transports, rpc_db):
    made = made_transports
    state = _built(monkeypatch, fake_rpc_conf, rpc_db)
    first = state.conductor
    assert state.conductor is first and len(made) == 1
    fake_rpc_conf.set_override('conductor', '1.1', group='upgrade_levels')
    capped = state.conductor
    assert capped is not first and len(made) == 1
    assert not capped.can_send_version('1.2')
    fake_rpc_conf.set_override('transport_url', 'fake:///other')
    assert state.conductor is not capped and len(made) == 2
