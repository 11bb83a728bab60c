"""The deployable API on each database engine, with rows as the conductor
stores them.
"""

import dataclasses
import datetime
import uuid

import pytest

from cyborg.conductor import binding
from cyborg.objects import inventory
from tests import arq_stack
from tests import inventory_rows

DEPLOYABLES = '/v2/deployables'
FIELDS = {'uuid', 'parent_id', 'root_id', 'name', 'num_accelerators',
          'device_id', 'attributes_list', 'rp_uuid', 'driver_name',
          'bitstream_id', 'created_at', 'updated_at', 'links'}
V24 = {'OpenStack-API-Version': 'accelerator 2.4'}
V25 = {'OpenStack-API-Version': 'accelerator 2.5'}
HEALTH_FIELDS = {'health', 'health_reason', 'health_updated_at',
                 'health_override', 'quarantined', 'usage'}
IMAGE = '5b7d2b0a-1e4c-4a7e-9d0c-2a8c0b7f3e11'
PROGRAM = [{'path': '/program', 'op': 'replace',
            'value': [{'image_uuid': IMAGE}]}]


def as_role(*roles, project='p1'):
    return {'X-Roles': ','.join(roles), 'X-Project-Id': project,
            'X-User-Id': 'u-' + roles[0]}


READER = as_role('reader')
MEMBER = as_role('member', 'reader')
MANAGER = as_role('manager', 'member', 'reader')
ADMIN = as_role('admin', 'manager', 'member', 'reader')


def pci_info(address):
    return inventory.PCIAddress.parse(address).as_info()


def fpga_board():
    """An FPGA board whose region holds one function: a three-level tree."""
    def deployable(name, parent, count):
        return inventory.Deployable(
            name=name, num_accelerators=count, resource_class='FPGA',
            driver_name='intel_fpga_driver', parent=parent,
            attributes={'level': name.lower()})
    return inventory.Device(
        type='FPGA', vendor='8086', model='PAC', controlpath_type='PCI',
        controlpath_info=pci_info('0000:5e:00.0'),
        deployables=[deployable('Board', None, 1),
                     deployable('Region', 'Board', 1),
                     deployable('Function', 'Region', 2)])


@pytest.fixture
def stored(db):
    fake_device, board = inventory_rows.add_host(
        db.engine, 'host1', inventory_rows.fake_devices() + [fpga_board()])
    return {'fake': fake_device, 'board': board}


def uuids(api, query=''):
    return [d['uuid'] for d in
            api.get(DEPLOYABLES + query).json['deployables']]


def test_list_shows_each_deployable_with_the_contract_fields(api, stored):
    response = api.get(DEPLOYABLES)

    assert list(response.json) == ['deployables']
    fake = response.json['deployables'][0]
    stored_fake = stored['fake'].deployables['FakeDevice']
    assert set(fake) == FIELDS
    assert fake['uuid'] == stored_fake.uuid
    assert fake['name'] == 'FakeDevice'
    assert fake['num_accelerators'] == 16
    assert fake['driver_name'] == 'fake_driver'
    assert fake['device_id'] == stored['fake'].uuid
    assert fake['parent_id'] is None and fake['root_id'] is None
    assert fake['bitstream_id'] is None
    assert str(uuid.UUID(fake['rp_uuid'])) == fake['rp_uuid']
    assert fake['attributes_list'] == [
        {'key': 'rc', 'value': 'FPGA'},
        {'key': 'trait0', 'value': 'CUSTOM_FAKE_DEVICE'}]
    assert fake['updated_at'] is None
    assert fake['links'] == [{
        'href': 'http://localhost/v2/deployables/' + stored_fake.uuid,
        'rel': 'self'}]


def test_the_tree_is_told_by_uuids(api, stored):
    by_name = {d['name']: d for d in
               api.get(DEPLOYABLES).json['deployables']}
    board = stored['board'].deployables

    assert by_name['Board']['parent_id'] is None
    assert by_name['Region']['parent_id'] == board['Board'].uuid
    assert by_name['Region']['root_id'] == board['Board'].uuid
    assert by_name['Function']['parent_id'] == board['Region'].uuid
    assert by_name['Function']['root_id'] == board['Board'].uuid
    assert by_name['Function']['device_id'] == stored['board'].uuid
    assert by_name['Function']['attributes_list'] == [
        {'key': 'level', 'value': 'function'}]


def test_get_one_answers_the_bare_deployable(api, stored):
    region = stored['board'].deployables['Region'].uuid

    one = api.get(DEPLOYABLES + '/' + region).json

    assert one['uuid'] == region
    assert one == [d for d in api.get(DEPLOYABLES).json['deployables']
                   if d['uuid'] == region][0]


@pytest.mark.parametrize('key', [
    '3f1d2c6e-8a4b-4e0f-9c7d-5b2a1e0f9d84', 'FakeDevice'])
def test_unknown_deployable_is_404(api, stored, key):
    response = api.get(DEPLOYABLES + '/' + key, expect_errors=True)

    assert response.status_int == 404
    assert key in response.json['error_message']


def test_list_filters_by_name_device_and_provider_in_sql(
        api, stored, sql_counter):
    board = stored['board']
    fake = stored['fake'].deployables['FakeDevice']
    rp_uuid = api.get(DEPLOYABLES + '/' + fake.uuid).json['rp_uuid']
    sql_counter.reset()

    assert uuids(api, '?name=Region') == [board.deployables['Region'].uuid]
    assert uuids(api, '?device_id=' + board.uuid) == [
        d.uuid for d in board.deployables.values()]
    assert uuids(api, '?rp_uuid=' + rp_uuid) == [fake.uuid]
    assert uuids(api, '?name=Region&device_id=' + stored['fake'].uuid) == []
    assert uuids(api, '?device_id=' + str(uuid.uuid4())) == []
    statements = [s for s in sql_counter.statements
                  if 'FROM deployables' in s]
    assert 'deployables.name =' in statements[0]
    assert 'devices.uuid =' in statements[1]
    assert 'deployables.rp_uuid =' in statements[2]


def test_list_pages_with_limit_marker_and_sorting(api, stored):
    everything = uuids(api)
    first = uuids(api, '?limit=3')
    rest = uuids(api, '?limit=3&marker=' + first[-1])
    by_name = api.get(DEPLOYABLES + '?sort_key=name').json['deployables']

    assert len(everything) == 4
    assert first + rest == everything
    assert [d['name'] for d in by_name] == [
        'Board', 'FakeDevice', 'Function', 'Region']


@pytest.mark.parametrize('headers,queries', [
    # The deployables with their relatives, then their attributes.
    (V24, 2),
    # From 2.5 their devices' control paths and agent rows too.
    (V25, 4)])
def test_list_makes_the_same_number_of_queries_for_any_number_of_rows(
        api, db, sql_counter, headers, queries):
    def queries_to_list(query=''):
        sql_counter.reset()
        found = api.get(DEPLOYABLES + query,
                        headers=headers).json['deployables']
        return len(found), len(sql_counter)

    inventory_rows.add_host(db.engine, 'h0', inventory_rows.fake_devices())
    inventory_rows.record_usage(db.engine, 'h0', {'0000:0c:00.0': {}})
    one = queries_to_list()
    addresses = ['0000:%02x:00.0' % i for i in range(15)]
    inventory_rows.add_host(db.engine, 'many', [
        dataclasses.replace(fpga_board(), controlpath_info=pci_info(a))
        for a in addresses])
    inventory_rows.record_usage(db.engine, 'many', {
        a: {'power_w': i} for i, a in enumerate(addresses)})
    many = queries_to_list()
    paged = queries_to_list('?limit=20&marker=' + uuids(api)[0])

    assert one == (1, queries)
    assert many == (46, queries)
    assert paged == (20, queries + 1)


def test_health_of_the_device_is_shown_from_2_5_only(api, db, stored):
    inventory_rows.set_health(
        db.engine, stored['board'].uuid, health='unhealthy',
        health_reason='the function left the bus', quarantined=True,
        health_updated_at=datetime.datetime(2026, 1, 1, 0, 0, 0))
    inventory_rows.record_usage(db.engine, 'host1', {
        '0000:5e:00.0': {'power_w': 31.5, 'observed_at': 1767225600.0}})
    old = api.get(DEPLOYABLES, headers=V24).json['deployables']
    new = api.get(DEPLOYABLES, headers=V25).json['deployables']
    region = stored['board'].deployables['Region'].uuid

    assert all(set(d) == FIELDS for d in old)
    assert all(set(d) == FIELDS | HEALTH_FIELDS for d in new)
    assert [{k: v for k, v in d.items() if k not in HEALTH_FIELDS}
            for d in new] == old
    by_device = {d['device_id']: {k: d[k] for k in HEALTH_FIELDS}
                 for d in new}
    assert by_device == {
        stored['fake'].uuid: {
            'health': 'unknown', 'health_reason': None,
            'health_updated_at': None, 'health_override': None,
            'quarantined': False, 'usage': None},
        stored['board'].uuid: {
            'health': 'unhealthy',
            'health_reason': 'the function left the bus',
            'health_updated_at': '2026-01-01T00:00:00+00:00',
            'health_override': None, 'quarantined': True,
            'usage': {'observed_at': '2026-01-01T00:00:00+00:00',
                      'values': {'power_w': 31.5}}}}
    assert api.get(DEPLOYABLES + '/' + region, headers=V25).json == [
        d for d in new if d['uuid'] == region][0]


@pytest.mark.parametrize('headers,allowed', [
    (READER, False), (MEMBER, False), (MANAGER, False), (ADMIN, True)])
def test_reading_needs_an_admin(api, stored, headers, allowed):
    fake = stored['fake'].deployables['FakeDevice'].uuid
    listing = api.get(DEPLOYABLES, headers=headers, expect_errors=True)
    one = api.get(DEPLOYABLES + '/' + fake, headers=headers,
                  expect_errors=True)

    assert listing.status_int == one.status_int == (200 if allowed else 403)


def test_program_of_an_unknown_deployable_is_404(api, stored):
    missing = str(uuid.uuid4())

    response = api.patch_json(DEPLOYABLES + '/%s/program' % missing,
                              PROGRAM, expect_errors=True)

    assert response.status_int == 404
    assert missing in response.json['error_message']


@pytest.fixture
def conductor_api(conf, db):
    """The app with a conductor on the in-process transport; it has no
    image service, so it refuses to program with a sentence."""
    with arq_stack.fake_transport(conf) as transport, \
            arq_stack.serving_conductor(transport, db,
                                        binding.Binder(conf, agent=None)):
        yield arq_stack.webtest_app(conf, db, transport)


@pytest.mark.parametrize('headers,allowed', [
    (READER, False), (MEMBER, False), (MANAGER, False), (ADMIN, True)])
def test_only_admins_may_program(conductor_api, stored, headers, allowed):
    fake = stored['fake'].deployables['FakeDevice'].uuid

    response = conductor_api.patch_json(
        DEPLOYABLES + '/%s/program' % fake, PROGRAM, headers=headers,
        expect_errors=True)

    # Allowed reaches the conductor, which has no Glance to ask.
    assert response.status_int == (409 if allowed else 403)
    if allowed:
        assert '[glance]' in response.json['error_message']
    else:
        assert 'cyborg:deployable:program' in response.json['error_message']
