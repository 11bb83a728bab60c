"""The API behind a real Keystone, on each database engine.

A session's Keystone (``tests.keystone_service``) issues real tokens; the
API, served on a real port, checks them with keystonemiddleware's
``auth_token`` (``auth_strategy = keystone``, service tokens need the
``service`` role). Binds go to a real conductor on oslo.messaging's
in-process transport; the fake driver's TEST_PCI handles need no agent.
"""

import threading
import time
import uuid

import pytest
import requests
import sqlalchemy as sa

from cyborg import rpc
from cyborg.api import app as api_app
from cyborg.cmd import api as api_cmd
from cyborg.conductor import binding
from cyborg.conductor import host_sync
from cyborg.conductor import manager
from cyborg.db import models
from cyborg.db.api import device_profiles
from tests import conductor_rpc
from tests import inventory_rows
from tests import keystone_service as keystone_module
from tests.conftest import ServedAPI

# The session's Keystone, for every test below this directory.
keystone_service = keystone_module.keystone_service

ARQS = '/v2/accelerator_requests'
HOST = 'host1'
PROFILE = 'fpga-dp'
# Three ARQs: two of group 0, one of group 1.
GROUPS = [{'resources:FPGA': '2', 'trait:CUSTOM_FAKE_DEVICE': 'required'},
          {'resources:FPGA': '1'}]


class NoAgent:
    """The fake device needs no agent; a call here is a bug."""

    def __getattr__(self, name):
        raise AssertionError('the agent was asked to %s' % name)


@pytest.fixture
def transport(conf):
    conductor_rpc.use_fake_transport(conf)
    transport = rpc.get_transport(conf)
    yield transport
    transport.cleanup()


@pytest.fixture
def conductor(conf, db, transport):
    binder = binding.Binder(conf, NoAgent(), owner='conductor-1')
    endpoint = manager.ConductorManager(host_sync.HostSync(None), binder)
    with conductor_rpc.serving(transport, db, [endpoint]):
        yield binder


@pytest.fixture
def fpga_rp(db):
    """The resource provider of the fake FPGA deployable of ``HOST``."""
    stored, = inventory_rows.add_host(db.engine, HOST,
                                      inventory_rows.fake_devices())
    with db.engine.connect() as conn:
        return conn.execute(sa.select(models.Deployable.rp_uuid).where(
            models.Deployable.uuid == stored.deployables['FakeDevice'].uuid)
        ).scalar_one()


@pytest.fixture
def profile(admin_context):
    device_profiles.create_profiles(admin_context, [
        {'uuid': str(uuid.uuid4()), 'name': PROFILE, 'description': None,
         'groups': GROUPS}])
    return PROFILE


class KeystoneServedAPI(ServedAPI):
    """``tests.conftest.ServedAPI``, the app given the conductor's
    transport (the in-process transport is not shared by a second one)."""

    def __init__(self, conf, db, transport):
        conf.set_override('port', 0, group='api')
        self.server = api_cmd.make_server(
            conf, api_app.build_app(conf, db, transport=transport))
        self.server.prepare()
        host, port = self.server.bind_addr[:2]
        self.url = 'http://%s:%d' % (host, port)
        self._thread = threading.Thread(target=self.server.serve,
                                        daemon=True)
        self._thread.start()


class Caller:
    """Requests to the served API with real tokens of named users.

    ``as_user`` names the user whose project-scoped token goes in
    ``X-Auth-Token`` (or ``token=`` gives one); ``service`` names the user
    whose token goes in ``X-Service-Token`` (Nova sends its service
    user's).
    """

    def __init__(self, url, keystone):
        self.url = url
        self.keystone = keystone
        self.http = requests.Session()

    def __call__(self, method, path, as_user=None, service=None,
                 token=None, **kwargs):
        headers = dict(kwargs.pop('headers', {}))
        if as_user is not None:
            token = self.keystone.token(as_user)
        if token is not None:
            headers['X-Auth-Token'] = token
        if service is not None:
            headers['X-Service-Token'] = self.keystone.token(service)
        return self.http.request(method, self.url + path, headers=headers,
                                 timeout=60, **kwargs)

    # -- ARQs ---------------------------------------------------------------

    def create(self, as_user, name=PROFILE, **kwargs):
        created = self('POST', ARQS, as_user,
                       json={'device_profile_name': name}, **kwargs)
        assert created.status_code == 201, created.text
        return created.json()['arqs']

    def list(self, as_user, **params):
        listed = self('GET', ARQS, as_user, params=params)
        assert listed.status_code == 200, listed.text
        return listed.json()['arqs']

    def wait_resolved(self, as_user, instance, timeout=20):
        deadline = time.monotonic() + timeout
        while True:
            got = self('GET', ARQS, as_user, params={
                'instance': instance, 'bind_state': 'resolved'})
            if got.status_code != 423:
                assert got.status_code == 200, got.text
                return got.json()['arqs']
            assert time.monotonic() < deadline, 'still unresolved'
            time.sleep(0.05)


def bind_body(arqs, rp, instance, hostname=HOST):
    return {a['uuid']: [
        {'op': 'add', 'path': '/hostname', 'value': hostname},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
        {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
        for a in arqs}


def unbind_body(arqs):
    return {a['uuid']: [{'op': 'remove', 'path': p} for p in
                        ('/hostname', '/device_rp_uuid', '/instance_uuid')]
            for a in arqs}


def _serve(conf, db, transport, keystone, **authtoken):
    keystone.configure_authtoken(conf, **authtoken)
    return KeystoneServedAPI(conf, db, transport)


@pytest.fixture
def served_keystone_api(conf, db, transport, keystone_service):
    """The API with ``auth_token`` (service tokens need the ``service``
    role, ``service_token_roles_required = True``)."""
    served = _serve(conf, db, transport, keystone_service)
    yield served
    served.stop()


@pytest.fixture
def api(served_keystone_api, keystone_service):
    """A ``Caller`` of the served API."""
    return Caller(served_keystone_api.url, keystone_service)


@pytest.fixture
def lenient_api(conf, db, transport, keystone_service):
    """As ``api``, but ``service_token_roles_required = False``: any valid
    token passes as X-Service-Token, the API alone judges its roles."""
    served = _serve(conf, db, transport, keystone_service,
                    service_token_roles_required=False)
    yield Caller(served.url, keystone_service)
    served.stop()
