"""The API behind a real Keystone, on each database engine.

A session's Keystone (``tests.keystone_service``) issues real tokens; the
API, served on a real port, checks them with keystonemiddleware's
``auth_token`` (``auth_strategy = keystone``, service tokens need the
``service`` role). Binds go to a real conductor on oslo.messaging's
in-process transport; the fake driver's TEST_PCI handles need no agent.
"""

import time

import pytest
import requests

from tests import arq_stack
from tests import keystone_service as keystone_module
from tests.arq_stack import ARQS
from tests.arq_stack import PROFILE
from tests.conftest import ServedAPI


@pytest.fixture(scope='session')
def keystone_service(tmp_path_factory):
    """The session's Keystone, for every test below this directory
    (installed on demand)."""
    service = keystone_module.KeystoneService(
        tmp_path_factory.mktemp('keystone')).start()
    yield service
    service.stop()

# The in-process conductor, the fake FPGA and its profile
# (``tests.arq_stack``).
conductor = arq_stack.conductor
fpga_rp = arq_stack.fpga_rp
profile = arq_stack.profile
transport = arq_stack.transport


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


def _serve(conf, db, transport, keystone, **authtoken):
    keystone.configure_authtoken(conf, **authtoken)
    return ServedAPI(conf, db, transport)


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
