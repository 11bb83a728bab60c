"""openstacksdk's accelerator proxy against the served API.

The SDK finds the API from whatever endpoint it is given by following the
``self`` links of the version documents, so each test runs with the root
URL, the /v2 URL and a devstack-style mount point.
"""

import datetime
import json

from openstack import connection
from openstack import exceptions
import pytest

from tests.functional.clients.conftest import MOUNT

GROUPS = [
    {'resources:FPGA': '1', 'trait:CUSTOM_FPGA_XILINX': 'required'},
    {'trait:CUSTOM_HBM': 'forbidden', 'resources:PGPU': '2'},
    {'resources:CUSTOM_QAT': '1'},
]
ENDPOINTS = {'root': '', 'v2': '/v2', 'mounted': MOUNT + '/v2'}


@pytest.fixture
def connect(service):
    """Connections to the service reached at a path below its root URL."""
    opened = []

    def _connect(path):
        # Without a cloud name the SDK reads no clouds.yaml and no OS_*
        # variables: only what is passed here counts.
        conn = connection.Connection(auth_type='none',
                                     auth={'endpoint': service.url + path})
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()


@pytest.fixture
def sdk(connect):
    return connect('/v2')


@pytest.mark.parametrize('endpoint_path', list(ENDPOINTS.values()),
                         ids=list(ENDPOINTS))
def test_device_profile_round_trip(service, connect, endpoint_path):
    sdk = connect(endpoint_path)
    created = sdk.accelerator.create_device_profile(name='sdk-mixed',
                                                    groups=GROUPS)

    assert created.name == 'sdk-mixed'
    assert created.groups == GROUPS
    assert created.description is None
    assert created.updated_at is None
    assert datetime.datetime.fromisoformat(created.created_at).tzinfo
    assert service.profiles()['sdk-mixed'].uuid == created.id

    listed = list(sdk.accelerator.device_profiles())
    assert [(p.id, p.name, p.groups, p.description) for p in listed] == [
        (created.id, 'sdk-mixed', GROUPS, None)]
    fetched = sdk.accelerator.get_device_profile(created.id)
    assert fetched.to_dict(computed=False) == created.to_dict(computed=False)

    sdk.accelerator.delete_device_profile(created, ignore_missing=False)
    assert service.profiles() == {}
    with pytest.raises(exceptions.NotFoundException):
        sdk.accelerator.get_device_profile(created.id)
    assert sdk.accelerator.delete_device_profile(created.id) is None

    # Every call went where the self links pointed, mount point included.
    prefix = MOUNT if endpoint_path.startswith(MOUNT) else ''
    calls = service.recorder.api_calls()
    assert [(c['method'], c['path'], c['status']) for c in calls] == [
        ('POST', prefix + '/v2/device_profiles', 201),
        ('GET', prefix + '/v2/device_profiles', 200),
        ('GET', prefix + '/v2/device_profiles/' + created.id, 200),
        ('DELETE', prefix + '/v2/device_profiles/' + created.id, 204),
        ('GET', prefix + '/v2/device_profiles/' + created.id, 404),
        ('DELETE', prefix + '/v2/device_profiles/' + created.id, 404),
    ]
    # The SDK asks for no microversion: the service must serve 2.0.
    assert {c['version'] for c in calls} == {None}
    assert json.loads(calls[0]['body']) == [
        {'name': 'sdk-mixed', 'groups': GROUPS}]


def test_description_and_uuid_are_kept(service, sdk):
    wanted = '5f0c1c52-8f0e-4d4e-a7e4-6f7f4fdc0c3e'
    created = sdk.accelerator.create_device_profile(
        name='sdk-described', uuid=wanted, description='two GPUs',
        groups=[{'resources:PGPU': '2'}])

    assert (created.id, created.description) == (wanted, 'two GPUs')
    fetched = sdk.accelerator.get_device_profile(wanted)
    assert (fetched.name, fetched.description, fetched.groups) == (
        'sdk-described', 'two GPUs', [{'resources:PGPU': '2'}])
    assert service.profiles()['sdk-described'].uuid == wanted


def test_errors_map_to_sdk_exceptions(service, sdk):
    sdk.accelerator.create_device_profile(name='sdk-taken', groups=GROUPS)

    with pytest.raises(exceptions.ConflictException):
        sdk.accelerator.create_device_profile(name='sdk-taken',
                                              groups=GROUPS)
    with pytest.raises(exceptions.BadRequestException):
        sdk.accelerator.create_device_profile(
            name='sdk-bad', groups=[{'resources:FPGA': '0'}])
    with pytest.raises(exceptions.NotFoundException):
        sdk.accelerator.delete_device_profile('sdk-missing',
                                              ignore_missing=False)

    assert list(service.profiles()) == ['sdk-taken']
