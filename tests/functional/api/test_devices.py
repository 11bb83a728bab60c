"""The device API on each database engine, with rows as the conductor
stores them, and enable/disable through a real conductor over RPC.
"""

import datetime
import pathlib
import socket
import subprocess
import sys
import time
import uuid

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
import webtest

from cyborg.api import app as api_app
from cyborg.clients import placement as placement_client
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.objects import inventory
from tests import arq_stack
from tests import conductor_rpc
from tests import inventory_rows
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

DEVICES = '/v2/devices'
V23 = {'OpenStack-API-Version': 'accelerator 2.3'}
V25 = {'OpenStack-API-Version': 'accelerator 2.5'}
FIELDS = {'uuid', 'type', 'vendor', 'model', 'std_board_info',
          'vendor_board_info', 'hostname', 'created_at', 'updated_at',
          'links'}


def as_role(*roles, project='p1'):
    return {'X-Roles': ','.join(roles), 'X-Project-Id': project,
            'X-User-Id': 'u-' + roles[0]}


READER = as_role('reader')
MEMBER = as_role('member', 'reader')
MANAGER = as_role('manager', 'member', 'reader')
ADMIN = as_role('admin', 'manager', 'member', 'reader')


def gpu(vendor='10de', model='A100', address='0000:3b:00.0'):
    return inventory_rows.fake_devices(
        type='GPU', vendor=vendor, model=model,
        controlpath_info=inventory.PCIAddress.parse(address).as_info())[0]


@pytest.fixture
def hosts(db):
    """host1: the fake FPGA and a GPU; host2: another vendor's GPU."""
    fpga, nvidia = inventory_rows.add_host(
        db.engine, 'host1', inventory_rows.fake_devices() + [gpu()])
    amd, = inventory_rows.add_host(
        db.engine, 'host2', [gpu(vendor='1002', model='MI100')])
    return {'fpga': fpga.uuid, 'nvidia': nvidia.uuid, 'amd': amd.uuid}


def listed(api, query='', headers=None):
    return [d['uuid'] for d in api.get(DEVICES + query,
                                       headers=headers).json['devices']]


def test_list_shows_every_device_with_the_contract_fields(api, hosts):
    response = api.get(DEVICES)

    assert list(response.json) == ['devices']
    devices = response.json['devices']
    assert [d['uuid'] for d in devices] == [
        hosts['fpga'], hosts['nvidia'], hosts['amd']]
    fpga = devices[0]
    assert set(fpga) == FIELDS
    assert fpga['type'] == 'FPGA'
    assert fpga['vendor'] == 'abcd'
    assert fpga['model'] == 'FakeFPGA'
    assert fpga['hostname'] == 'host1'
    assert fpga['std_board_info'] == {'vendor_id': 'abcd',
                                      'product_id': 'abcd'}
    assert fpga['vendor_board_info'] == {}
    assert fpga['updated_at'] is None
    assert datetime.datetime.fromisoformat(fpga['created_at']).tzinfo
    assert fpga['links'] == [{
        'href': 'http://localhost/v2/devices/' + hosts['fpga'],
        'rel': 'self'}]


def test_status_is_shown_from_2_3_only(api, hosts):
    old = api.get(DEVICES + '/' + hosts['fpga']).json
    new = api.get(DEVICES + '/' + hosts['fpga'], headers=V23).json
    newest = api.get(DEVICES, headers={
        'OpenStack-API-Version': 'accelerator latest'}).json['devices']

    assert 'status' not in old
    assert set(new) == FIELDS | {'status'}
    assert new['status'] == 'enabled'
    assert {d['status'] for d in newest} == {'enabled'}
    assert all('status' not in d for d in api.get(DEVICES, headers={
        'OpenStack-API-Version': 'accelerator 2.2'}).json['devices'])


def test_get_one_answers_the_bare_device(api, hosts):
    one = api.get(DEVICES + '/' + hosts['amd'])

    assert one.json['uuid'] == hosts['amd']
    assert one.json['vendor'] == '1002'
    assert one.json['hostname'] == 'host2'
    assert one.json == [d for d in api.get(DEVICES).json['devices']
                        if d['uuid'] == hosts['amd']][0]


@pytest.mark.parametrize('key', [
    '3f1d2c6e-8a4b-4e0f-9c7d-5b2a1e0f9d84', 'not-a-uuid'])
def test_unknown_device_is_404(api, hosts, key):
    response = api.get(DEVICES + '/' + key, expect_errors=True)

    assert response.status_int == 404
    assert key in response.json['error_message']


@pytest.mark.parametrize('query,expected', [
    ('?type=GPU', ['nvidia', 'amd']),
    ('?type=FPGA', ['fpga']),
    ('?type=fake_type', []),
    ('?vendor=10de', ['nvidia']),
    ('?vendor=fake_vendor', []),
    ('?hostname=host1', ['fpga', 'nvidia']),
    ('?hostname=fake_hostname', []),
    ('?type=GPU&vendor=1002&hostname=host2', ['amd']),
    ('?type=GPU&hostname=host1&vendor=1002', []),
])
def test_list_filters_in_sql(api, hosts, sql_counter, query, expected):
    sql_counter.reset()

    assert listed(api, query) == [hosts[name] for name in expected]
    filtered = [s for s in sql_counter.statements if 'FROM devices' in s]
    assert len(filtered) == 1
    for name in ('type', 'vendor', 'hostname'):
        if name + '=' in query:
            assert 'devices.%s =' % name in filtered[0]


def test_list_pages_with_limit_marker_and_sorting(api, hosts):
    first = listed(api, '?limit=2')
    rest = listed(api, '?limit=2&marker=' + first[-1])
    by_vendor = api.get(DEVICES + '?sort_key=vendor&sort_dir=desc').json[
        'devices']

    assert first + rest == [hosts['fpga'], hosts['nvidia'], hosts['amd']]
    assert [d['vendor'] for d in by_vendor] == ['abcd', '10de', '1002']
    assert listed(api, '?type=GPU&limit=1&marker=' + hosts['nvidia']) == [
        hosts['amd']]


def test_a_device_gone_missing_is_still_listed(api, db, hosts):
    # Its host stopped reporting it while it is in use: the rows stay.
    with db.engine.begin() as conn:
        conn.execute(sa.update(models.Device).where(
            models.Device.uuid == hosts['nvidia']).values(
            missing_since=models.utcnow()))

    assert hosts['nvidia'] in listed(api)
    assert api.get(DEVICES + '/' + hosts['nvidia']).json['uuid'] == (
        hosts['nvidia'])


@pytest.mark.parametrize('headers,queries', [
    (V23, 1),
    # From 2.5 the page's control paths and its hosts' agent rows too.
    (V25, 3)])
def test_list_makes_the_same_number_of_queries_for_any_number_of_rows(
        api, db, sql_counter, headers, queries):
    def queries_to_list(query=''):
        sql_counter.reset()
        found = api.get(DEVICES + query, headers=headers).json['devices']
        return len(found), len(sql_counter)

    inventory_rows.add_host(db.engine, 'h0', [gpu()])
    inventory_rows.record_usage(db.engine, 'h0', {'0000:3b:00.0': {}})
    one = queries_to_list()
    addresses = ['0000:%02x:00.0' % i for i in range(40)]
    inventory_rows.add_host(db.engine, 'many', [
        gpu(address=a) for a in addresses])
    inventory_rows.record_usage(db.engine, 'many', {
        a: {'temperature_c': i} for i, a in enumerate(addresses)})
    for i in range(3):
        inventory_rows.add_host(db.engine, 'other%d' % i, [gpu()])
        inventory_rows.record_usage(db.engine, 'other%d' % i, {})
    many = queries_to_list()
    paged = queries_to_list('?type=GPU&limit=30&marker=' + listed(api)[0])

    assert one == (1, queries)
    assert many == (44, queries)
    # The marker costs one lookup.
    assert paged == (30, queries + 1)
    if headers is V25:
        shown = api.get(DEVICES + '?hostname=many', headers=V25).json
        assert [d['usage']['values'] for d in shown['devices']] == [
            {'temperature_c': i} for i in range(40)]


@pytest.mark.parametrize('headers,allowed', [
    (READER, False), (MEMBER, False), (MANAGER, False), (ADMIN, True)])
def test_reading_needs_an_admin(api, hosts, headers, allowed):
    listing = api.get(DEVICES, headers=headers, expect_errors=True)
    one = api.get(DEVICES + '/' + hosts['fpga'], headers=headers,
                  expect_errors=True)

    if allowed:
        assert listing.status_int == one.status_int == 200
    else:
        assert listing.status_int == one.status_int == 403
        assert 'cyborg:device:get_all' in listing.json['error_message']
        assert 'cyborg:device:get_one' in one.json['error_message']


# Enable and disable go to a real conductor over oslo.messaging's
# in-process transport; the conductor syncs a real Placement.


# The in-process transport, with no conductor listening.
transport = arq_stack.transport


@pytest.fixture
def conductor(transport, db, placement):  # noqa: F811
    """The conductor's RPC endpoints, serving on the fake transport."""
    with arq_stack.serving_conductor(transport, db,
                                     placement_client=placement.client()):
        yield placement


@pytest.fixture
def rpc_api(conf, db, transport):
    return arq_stack.webtest_app(conf, db, transport)


def fpga_inventory(placement):  # noqa: F811
    name = placement_sync.provider_name('host1', 'FakeDevice')
    response = placement.adapter().get(
        '/resource_providers/%s/inventories' % placement_sync.provider_uuid(
            name))
    assert response.status_code == 200, response.text
    return response.json()['inventories']['FPGA']


def status_in_db(db, device_uuid):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(models.Device.status).where(
            models.Device.uuid == device_uuid)).scalar_one()


def test_disable_and_enable_go_through_the_conductor(
        rpc_api, db, hosts, conductor):
    create_compute_node(conductor.adapter(), 'host1')
    fpga = DEVICES + '/' + hosts['fpga']

    disabled = rpc_api.post(fpga + '/disable', headers=V23)

    assert disabled.status_int == 200
    assert disabled.json['uuid'] == hosts['fpga']
    assert disabled.json['status'] == 'maintaining'
    assert status_in_db(db, hosts['fpga']) == 'maintaining'
    assert status_in_db(db, hosts['nvidia']) == 'enabled'
    inventory = fpga_inventory(conductor)
    assert inventory['total'] == 16 and inventory['reserved'] == 16
    assert rpc_api.get(fpga, headers=V23).json['status'] == 'maintaining'

    enabled = rpc_api.post(fpga + '/enable')

    assert enabled.status_int == 200
    assert 'status' not in enabled.json
    assert status_in_db(db, hosts['fpga']) == 'enabled'
    assert fpga_inventory(conductor)['reserved'] == 0


def test_disable_twice_is_harmless(rpc_api, db, hosts, conductor):
    fpga = DEVICES + '/' + hosts['fpga']

    rpc_api.post(fpga + '/disable')
    again = rpc_api.post(fpga + '/disable', headers=V23)

    assert again.status_int == 200
    assert again.json['status'] == 'maintaining'


@pytest.mark.parametrize('action', ['disable', 'enable'])
@pytest.mark.parametrize('headers,allowed', [
    (READER, False), (MEMBER, False), (MANAGER, False), (ADMIN, True)])
def test_only_admins_disable_and_enable(rpc_api, db, hosts, conductor,
                                        action, headers, allowed):
    if action == 'enable':
        with db.engine.begin() as conn:
            conn.execute(sa.update(models.Device).values(
                status='maintaining'))
    before = status_in_db(db, hosts['amd'])

    response = rpc_api.post(DEVICES + '/%s/%s' % (hosts['amd'], action),
                            headers=headers, expect_errors=True)

    if allowed:
        assert response.status_int == 200
        assert status_in_db(db, hosts['amd']) != before
    else:
        assert response.status_int == 403
        assert 'cyborg:device:' + action in response.json['error_message']
        assert status_in_db(db, hosts['amd']) == before


def test_disabling_an_unknown_device_is_404_without_a_call(
        rpc_api, hosts, transport):
    # No conductor listens: a call would time out, a 404 does not.
    missing = str(uuid.uuid4())

    response = rpc_api.post(DEVICES + '/%s/disable' % missing,
                            expect_errors=True)

    assert response.status_int == 404
    assert missing in response.json['error_message']


def test_a_conductor_that_does_not_answer_is_503_within_the_bound(
        conf, db, rpc_api, hosts):
    conf.set_override('rpc_response_timeout', 60)
    conf.set_override('conductor_timeout', 1, group='api')

    started = time.monotonic()
    response = rpc_api.post(DEVICES + '/%s/disable' % hosts['fpga'],
                            expect_errors=True)

    # [api] conductor_timeout bounds the wait, not the RPC timeout.
    assert time.monotonic() - started < 10
    assert response.status_int == 503
    assert response.json['error_message'] == (
        'Device %s is disabled in Cyborg, but no conductor updated '
        'Placement within 1 seconds; Placement will be updated when it is '
        'reachable again.' % hosts['fpga'])
    # Stored: the conductors' next pass makes Placement follow.
    assert status_in_db(db, hosts['fpga']) == 'maintaining'


def test_placement_unreachable_is_503_and_the_status_is_stored(
        rpc_api, db, hosts, transport):
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        closed = 'http://127.0.0.1:%d' % probe.getsockname()[1]
    unreachable = placement_client.PlacementClient(ks_adapter.Adapter(
        ks_session.Session(), service_type='placement',
        endpoint_override=closed))
    with arq_stack.serving_conductor(transport, db,
                                     placement_client=unreachable):
        response = rpc_api.post(DEVICES + '/%s/disable' % hosts['fpga'],
                                expect_errors=True)

    assert response.status_int == 503
    assert response.json['error_message'] == (
        'Device %s is disabled in Cyborg, but Placement is unreachable; '
        'Placement will be updated when it is reachable again.'
        % hosts['fpga'])
    assert status_in_db(db, hosts['fpga']) == 'maintaining'


def test_a_conductor_refusal_keeps_its_status_and_sentence(
        rpc_api, db, hosts, transport):
    class DeviceGoneConductor:
        """Answers as the conductor does when the row went meanwhile."""

        target = messaging.Target(version='1.0')

        def set_device_status(self, context, device_uuid, status):
            from cyborg import exception
            raise exception.NotFound('No device with uuid %s exists.'
                                     % device_uuid)

    with conductor_rpc.serving(transport, db, [DeviceGoneConductor()]):
        response = rpc_api.post(DEVICES + '/%s/enable' % hosts['fpga'],
                                expect_errors=True)

    assert response.status_int == 404
    assert response.json['error_message'] == (
        'No device with uuid %s exists.' % hosts['fpga'])


def test_reads_need_no_message_bus(conf, db, hosts):
    # No transport given, none configured: listing still works.
    api = webtest.TestApp(api_app.build_app(conf, db))

    assert len(api.get(DEVICES).json['devices']) == 3


def test_the_transport_comes_from_the_configuration_when_not_given(
        conf, db, hosts, transport, conductor):
    api = webtest.TestApp(api_app.build_app(conf, db))

    response = api.post(DEVICES + '/%s/disable' % hosts['fpga'],
                        headers=V23)

    assert response.json['status'] == 'maintaining'



def test_the_messaging_library_is_loaded_with_the_app(sqlite_url):
    # Loaded on the first bind, it made that bind a third of a second
    # slower than the worker's later ones: it comes with the app instead,
    # before any request.
    script = '''
import sys, webtest
from tests import conftest, inventory_rows
from cyborg.api import app
from cyborg.db import session
conftest.create_schema(sys.argv[1])
conf = conftest.make_conf(sys.argv[1])
db = session.Database(conf)
inventory_rows.add_host(db.engine, 'h', inventory_rows.fake_devices())
api = webtest.TestApp(app.build_app(conf, db))
print('oslo_messaging.transport' in sys.modules)
assert len(api.get('/v2/devices').json['devices']) == 1
'''
    done = subprocess.run([sys.executable, '-W', 'ignore', '-c', script,
                           sqlite_url], capture_output=True, text=True,
                          cwd=pathlib.Path(__file__).parents[3],
                          timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == 'True'
