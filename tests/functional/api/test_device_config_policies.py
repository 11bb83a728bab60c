"""/v2/device_config_policies (microversion 2.6) on each database engine:
admins make, change and delete policies; every check is made before
anything is stored; the devices a policy wins get pending status rows,
and each change is notified."""

import pytest
import sqlalchemy as sa
import webtest

from cyborg.api import app as api_app
from cyborg.db import models
from cyborg.notifications import emit
from cyborg.objects import inventory
from tests import inventory_rows
from tests import notification_sink

POLICIES = '/v2/device_config_policies'
V26 = {'OpenStack-API-Version': 'accelerator 2.6'}
V25 = {'OpenStack-API-Version': 'accelerator 2.5'}
ADMIN = {'X-Roles': 'admin,manager,member,reader',
         'X-Project-Id': 'admin-project', **V26}
MANAGER = {'X-Roles': 'manager,member,reader', 'X-Project-Id': 'demo', **V26}
NIC_ADDRESS = '0000:3b:00.0'


def _device(device_type, vendor, product, address, driver, **board):
    return inventory.Device(
        type=device_type, vendor=vendor, model=product,
        controlpath_type='PCI',
        controlpath_info=inventory.PCIAddress.parse(address).as_info(),
        std_board_info={'vendor_id': vendor, 'product_id': product,
                        **board},
        deployables=[inventory.Deployable(
            name='%s_%s' % (device_type.lower(), address),
            num_accelerators=1, resource_class='CUSTOM_' + device_type,
            driver_name=driver)])


class Recorder:
    """A notifier that keeps what it is given to send."""

    enabled = True

    def __init__(self):
        self.sent = []

    def send(self, context, event_type, payload, priority):
        primitive = payload.to_primitive()
        notification_sink.check_payload(primitive)
        self.sent.append((event_type, primitive['cyborg_object.data']))

    def of(self, event_type):
        return [data for event, data in self.sent if event == event_type]


@pytest.fixture
def notifier():
    return Recorder()


@pytest.fixture
def api(conf, db, notifier):
    return webtest.TestApp(api_app.build_app(conf, db, notifier=notifier))


@pytest.fixture
def devices(db):
    """compute-1: a NIC PF of 63 VFs at most, an H100 and a vGPU card;
    compute-2: a NIC PF of 128 VFs at most. {name: device uuid}."""
    nic = ('NIC', '8086', '1572', NIC_ADDRESS, 'intel_nic_driver')
    first = inventory_rows.add_host(db.engine, 'compute-1', [
        _device(*nic, sriov_totalvfs='63'),
        _device('GPU', '10de', '2330', '0000:17:00.0', 'nvidia_gpu_driver'),
        _device('GPU', '10de', '1eb8', '0000:65:00.0', 'nvidia_gpu_driver',
                mdev_types=['nvidia-222', 'nvidia-223'])])
    second = inventory_rows.add_host(db.engine, 'compute-2', [
        _device(*nic, sriov_totalvfs='128')])
    return {'nic-1': first[0].uuid, 'h100': first[1].uuid,
            'vgpu': first[2].uuid, 'nic-2': second[0].uuid}


def policy(name='vfs', kind='sriov_vfs', settings=None, **fields):
    body = {'name': name, 'kind': kind,
            'devices': {'vendor_id': '8086', 'product_id': '1572'},
            'settings': {'num_vfs': 8} if settings is None else settings}
    body.update(fields)
    return body


def stored(db):
    """(policies, status rows) in the database."""
    with db.engine.connect() as connection:
        count = sa.select(sa.func.count())
        return (connection.scalar(count.select_from(
                    models.DeviceConfigPolicy)),
                connection.scalar(count.select_from(
                    models.DeviceConfigStatus)))


def status_of(api, uuid):
    answer = api.get('%s/%s/status' % (POLICIES, uuid), headers=ADMIN)
    return {s['device_uuid']: s for s in answer.json['status']}


# --- microversion and policy ----------------------------------------------

@pytest.mark.parametrize('method, path', [
    ('get', POLICIES), ('post', POLICIES),
    ('get', POLICIES + '/0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e'),
    ('get', POLICIES + '/0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e/status'),
])
def test_below_2_6_the_path_does_not_exist(api, db, method, path):
    headers = dict(ADMIN, **V25)
    if method == 'post':
        api.post_json(path, policy(), headers=headers, status=404)
    else:
        api.get(path, headers=headers, status=404)
    api.get(POLICIES, headers={k: v for k, v in ADMIN.items()
                               if k != 'OpenStack-API-Version'}, status=404)
    assert stored(db) == (0, 0)


def test_latest_sees_the_collection(api):
    answer = api.get(POLICIES, headers=dict(
        ADMIN, **{'OpenStack-API-Version': 'accelerator latest'}))
    assert answer.json == {'device_config_policies': []}


def test_non_admins_are_refused_and_nothing_is_stored(api, db, devices,
                                                      notifier):
    made = api.post_json(POLICIES, policy(), headers=ADMIN).json
    item = '%s/%s' % (POLICIES, made['uuid'])
    before = stored(db)
    notifier.sent.clear()

    for answer in (
            api.get(POLICIES, headers=MANAGER, expect_errors=True),
            api.get(item, headers=MANAGER, expect_errors=True),
            api.get(item + '/status', headers=MANAGER, expect_errors=True),
            api.post_json(POLICIES, policy('other'), headers=MANAGER,
                          expect_errors=True),
            api.patch_json(item, {'priority': 5}, headers=MANAGER,
                           expect_errors=True),
            api.delete(item, headers=MANAGER, expect_errors=True)):
        assert answer.status_int == 403
        assert answer.json['code'] == 'cyborg.policy.forbidden'

    assert stored(db) == before
    assert api.get(item, headers=ADMIN).json['priority'] == 0
    assert notifier.sent == []


# --- create, status, notifications -----------------------------------------

def test_create_makes_the_selected_devices_pending(api, devices, notifier):
    answer = api.post_json(POLICIES, policy(priority=10), headers=ADMIN,
                           status=201)
    made = answer.json

    assert {k: made[k] for k in ('name', 'priority', 'hosts', 'devices',
                                 'kind', 'settings', 'restore_on_delete')
            } == {'name': 'vfs', 'priority': 10, 'hosts': ['*'],
                  'devices': {'vendor_id': '8086', 'product_id': '1572'},
                  'kind': 'sriov_vfs', 'settings': {'num_vfs': 8},
                  'restore_on_delete': False}
    assert made['links'][0]['href'].endswith(POLICIES + '/' + made['uuid'])
    assert api.get(POLICIES + '/' + made['uuid'],
                   headers=ADMIN).json == made
    status = status_of(api, made['uuid'])
    assert set(status) == {devices['nic-1'], devices['nic-2']}
    assert {(s['hostname'], s['state'], s['applied_settings'])
            for s in status.values()} == {
        ('compute-1', 'pending', None), ('compute-2', 'pending', None)}
    assert all(s['wanted_settings'] == {'num_vfs': 8}
               for s in status.values())

    [created] = notifier.of(emit.CONFIG_POLICY_CREATE)
    assert (created['uuid'], created['hosts']) == (made['uuid'], ['*'])
    changes = notifier.of(emit.CONFIG_STATUS_CHANGE)
    assert {(c['device_uuid'], c['old_state'], c['state'])
            for c in changes} == {(devices['nic-1'], None, 'pending'),
                                  (devices['nic-2'], None, 'pending')}


def test_hosts_and_addresses_narrow_the_selection(api, devices):
    by_pattern = api.post_json(POLICIES, policy(
        'second', hosts=['compute-[2-9]']), headers=ADMIN).json
    by_address = api.post_json(POLICIES, policy(
        'first', priority=1, hosts=['compute-1'],
        devices={'pci_addresses': [NIC_ADDRESS.upper()]}),
        headers=ADMIN).json

    assert set(status_of(api, by_pattern['uuid'])) == {devices['nic-2']}
    assert set(status_of(api, by_address['uuid'])) == {devices['nic-1']}
    assert by_address['devices'] == {'pci_addresses': [NIC_ADDRESS]}


def test_a_bitstream_uuid_in_any_form_is_stored_in_one(api):
    made = api.post_json(POLICIES, policy(
        'base', kind='fpga_base_image', devices={'vendor_id': '8086'},
        settings={'bitstream_uuid':
                  'urn:uuid:0B2C5E1F3A4D4B6C8D0E1F2A3B4C5D6E',
                  'clear_bitstream_uuid':
                  '{7D3C2B1A-0F9E-4D8C-B7A6-958473625140}'}),
        headers=ADMIN, status=201).json
    assert made['settings'] == {
        'bitstream_uuid': '0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e',
        'clear_bitstream_uuid': '7d3c2b1a-0f9e-4d8c-b7a6-958473625140'}


def test_list_is_by_priority(api, devices):
    for name, priority in (('low', 1), ('high', 9), ('mid', 5)):
        api.post_json(POLICIES, policy(name, priority=priority,
                                       hosts=['host-%s' % name]),
                      headers=ADMIN)
    listed = api.get(POLICIES, headers=ADMIN).json['device_config_policies']
    assert [p['name'] for p in listed] == ['high', 'mid', 'low']


# --- checks of the body -----------------------------------------------------

@pytest.mark.parametrize('body, sentence', [
    (policy(settings={'num_vfs': -1}),
     'num_vfs must be a whole number from 0 to 2048, not -1.'),
    (policy(settings={'num_vfs': 'eight'}), "not 'eight'."),
    (policy(settings={'num_vfs': True}), 'not true.'),
    (policy(settings={'num_vfs': 8, 'mtu': 9000}),
     'have no field mtu'),
    (policy(settings={}), 'need the field num_vfs.'),
    (policy(kind='driver_binding', settings={'driver': 'nouveau'}),
     "driver must be vfio-pci or own (the device's own driver), not "
     "'nouveau'."),
    (policy(kind='vgpu_type', settings={'mdev_type': 'GRID T4-2Q'}),
     "mdev_type must name a mediated device type as sysfs does"),
    (policy(kind='fpga_base_image', settings={'bitstream_uuid': 'latest'}),
     'bitstream_uuid must be the uuid of a bitstream image'),
    (policy(kind='fpga_base_image', settings={
        'bitstream_uuid': '0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e',
        'clear_bitstream_uuid': 7}),
     'clear_bitstream_uuid must be the uuid of a bitstream image, not 7.'),
    (policy(kind='fpga_base_image', settings={
        'clear_bitstream_uuid': '0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e'}),
     'need the field bitstream_uuid.'),
    (policy(kind='mig_layout', settings={'mig_enabled': True,
                                         'mig_devices': {'big': 1}}),
     "'big' is not a MIG profile name such as 1g.10gb"),
    (policy(kind='mig_layout', settings={'mig_enabled': True,
                                         'mig_devices': {'1g.10gb': -1}}),
     'The count of MIG profile 1g.10gb must be a whole number'),
    (policy(kind='mig_layout', settings={'mig_enabled': False,
                                         'mig_devices': {'1g.10gb': 1}}),
     'mig_devices needs mig_enabled true'),
    (policy(kind='mig_layout', settings={'mig_enabled': 'yes'}),
     'mig_enabled must be true or false'),
    (policy(kind='playbook', settings={'playbook': 'qat; rm -rf /'}),
     'playbook must name a playbook pair'),
    (policy(kind='playbook', settings={'playbook': 'qat',
                                       'variables': {'1x': 1}}),
     "'1x' is not a variable name"),
    (policy(kind='playbook', settings={'playbook': 'qat',
                                       'variables': {'x': [1]}}),
     'The variable x must be a string, number, boolean or null'),
    (policy(kind='firmware'), 'kind must be one of sriov_vfs'),
    (policy(devices={}), 'devices must select by at least one of'),
    (policy(devices={'vendor_id': 'intel'}),
     'devices.vendor_id must be a PCI id of four hex digits'),
    (policy(devices={'pci_addresses': ['3b:00.0']}),
     'devices.pci_addresses must be an array of 1 to 256 PCI addresses'),
    (policy(devices={'serial': 'x'}), 'devices has no field serial'),
    (policy(hosts=[]), 'hosts must be an array of 1 to 256'),
    (policy(hosts=['compute 1']), "'compute 1' is not a host name"),
    (policy(priority=-1),
     'priority must be a whole number from 0 to 1000, not -1.'),
    (policy(priority='high'), "priority must be a whole number from 0 to "
     "1000, not 'high'."),
    (policy(priority=1.5), 'not 1.5.'),
    (policy(name='a/b'), "name must be 1 to 255 letters"),
    (policy(restore_on_delete='yes'), 'restore_on_delete must be true or '
     'false'),
    (policy(colour='red'), 'has no field colour.'),
    ({'name': 'x', 'kind': 'sriov_vfs', 'settings': {'num_vfs': 1}},
     'needs the field devices.'),
    ([policy()], 'must be a JSON object, not an array.'),
])
def test_a_bad_body_is_400_and_nothing_is_stored(api, db, devices, body,
                                                 sentence):
    answer = api.post_json(POLICIES, body, headers=ADMIN, status=400)

    assert sentence in answer.json['message']
    assert stored(db) == (0, 0)


# --- checks against the devices --------------------------------------------

def test_more_vfs_than_the_pf_offers_is_refused(api, db, devices):
    answer = api.post_json(POLICIES, policy(settings={'num_vfs': 64}),
                           headers=ADMIN, status=400)

    assert answer.json['message'] == (
        'The device %s (%s on compute-1) offers at most 63 VFs '
        '(sriov_totalvfs), not 64.' % (devices['nic-1'], NIC_ADDRESS))
    assert answer.json['code'] == 'cyborg.device_config.unfit'
    assert stored(db) == (0, 0)
    # The PF of compute-2 offers 128: a policy of its host alone is good.
    api.post_json(POLICIES, policy(settings={'num_vfs': 64},
                                   hosts=['compute-2']),
                  headers=ADMIN, status=201)


def test_a_vgpu_type_the_card_does_not_offer_is_refused(api, db, devices):
    selector = {'vendor_id': '10de', 'product_id': '1eb8'}
    answer = api.post_json(POLICIES, policy(
        kind='vgpu_type', settings={'mdev_type': 'nvidia-999'},
        devices=selector), headers=ADMIN, status=400)

    assert answer.json['message'] == (
        'The device %s (0000:65:00.0 on compute-1) does not offer the vGPU '
        'type nvidia-999; it offers nvidia-222, nvidia-223.'
        % devices['vgpu'])
    assert stored(db) == (0, 0)
    api.post_json(POLICIES, policy(
        kind='vgpu_type', settings={'mdev_type': 'nvidia-223'},
        devices=selector), headers=ADMIN, status=201)


def _mig(layout, **fields):
    return policy('mig', kind='mig_layout',
                  settings={'mig_enabled': True, 'mig_devices': layout},
                  **fields)


def test_a_mig_layout_that_does_not_fit_the_card_is_refused(api, db,
                                                            devices):
    h100 = {'pci_addresses': ['0000:17:00.0']}
    answer = api.post_json(POLICIES, _mig({'3g.40gb': 1, '4g.40gb': 1,
                                           '1g.10gb': 1}, devices=h100),
                           headers=ADMIN, status=400)

    assert answer.json['message'].startswith(
        'The MIG layout does not fit the device %s (0000:17:00.0 on '
        'compute-1): NVIDIA H100 80GB cannot place' % devices['h100'])
    unknown = api.post_json(POLICIES, _mig({'1g.5gb': 7}, devices=h100),
                            headers=ADMIN, status=400)
    assert 'has no MIG profile 1g.5gb' in unknown.json['message']
    assert stored(db) == (0, 0)

    made = api.post_json(POLICIES, _mig({'1g.10gb': 7}, devices=h100),
                         headers=ADMIN, status=201).json
    assert set(status_of(api, made['uuid'])) == {devices['h100']}


def test_a_mig_layout_is_held_against_the_product_selected(api, db):
    # No device is known yet: the selector's product id names the card.
    answer = api.post_json(POLICIES, _mig(
        {'4g.40gb': 2}, devices={'product_id': '2331'}), headers=ADMIN,
        status=400)

    assert ('NVIDIA H100 80GB offers at most 1 instance(s) of 4g.40gb, not '
            '2.') in answer.json['message']
    assert stored(db) == (0, 0)
    api.post_json(POLICIES, _mig({'4g.40gb': 1, '3g.40gb': 1},
                                 devices={'product_id': '2331'}),
                  headers=ADMIN, status=201)


# --- priorities --------------------------------------------------------------

def test_equal_priorities_on_one_device_are_refused(api, db, devices):
    first = api.post_json(POLICIES, policy('first', priority=5),
                          headers=ADMIN).json
    answer = api.post_json(POLICIES, policy(
        'second', priority=5, kind='driver_binding',
        settings={'driver': 'vfio-pci'},
        devices={'pci_addresses': [NIC_ADDRESS]}, hosts=['compute-2']),
        headers=ADMIN, status=409)

    assert answer.json['message'] == (
        'The policy first, of the same priority 5, selects device %s on '
        'compute-2 too; give one of them another priority.'
        % devices['nic-2'])
    assert stored(db) == (1, 2)
    # The same priority elsewhere is no conflict.
    api.post_json(POLICIES, policy('elsewhere', priority=5,
                                   hosts=['compute-9']),
                  headers=ADMIN, status=201)
    assert set(status_of(api, first['uuid'])) == {devices['nic-1'],
                                                   devices['nic-2']}


def test_the_higher_priority_wins_and_the_lower_takes_over(api, devices,
                                                           notifier):
    low = api.post_json(POLICIES, policy('low', priority=1),
                        headers=ADMIN).json
    high = api.post_json(POLICIES, policy(
        'high', priority=2, hosts=['compute-2'],
        settings={'num_vfs': 16}), headers=ADMIN).json

    assert set(status_of(api, low['uuid'])) == {devices['nic-1']}
    won = status_of(api, high['uuid'])
    assert won[devices['nic-2']]['wanted_settings'] == {'num_vfs': 16}

    notifier.sent.clear()
    api.delete('%s/%s' % (POLICIES, high['uuid']), headers=ADMIN,
               status=204)

    back = status_of(api, low['uuid'])
    assert set(back) == {devices['nic-1'], devices['nic-2']}
    assert back[devices['nic-2']]['wanted_settings'] == {'num_vfs': 8}
    [deleted] = notifier.of(emit.CONFIG_POLICY_DELETE)
    assert deleted['uuid'] == high['uuid']
    assert [(c['policy_name'], c['old_state'], c['state'])
            for c in notifier.of(emit.CONFIG_STATUS_CHANGE)] == [
        ('high', 'pending', None), ('low', None, 'pending')]
    api.get('%s/%s' % (POLICIES, high['uuid']), headers=ADMIN, status=404)


def test_a_restoring_delete_keeps_the_devices_to_put_back(api, db, devices,
                                                          notifier):
    """nic-1 and nic-2 applied; a lower policy selects nic-2 too: nic-1
    is to be restored, nic-2 goes to the lower policy as without
    restore; the vGPU card, pending, had nothing applied to undo."""
    made = api.post_json(POLICIES, policy(
        'restoring', priority=2, devices={'vendor_id': '8086'},
        restore_on_delete=True), headers=ADMIN).json
    low = api.post_json(POLICIES, policy(
        'low', priority=1, hosts=['compute-2']), headers=ADMIN).json
    with db.engine.begin() as connection:
        connection.execute(sa.update(models.DeviceConfigStatus).values(
            state='applied', applied_settings={'num_vfs': 8}))
    item = '%s/%s' % (POLICIES, made['uuid'])

    notifier.sent.clear()
    api.delete(item, headers=ADMIN, status=202)

    [deleted] = notifier.of(emit.CONFIG_POLICY_DELETE)
    assert (deleted['uuid'], deleted['restore_on_delete']) == (
        made['uuid'], True)
    assert sorted((c['device_uuid'], c['policy_name'], c['old_state'],
                   c['state'], c['wanted_settings'])
                  for c in notifier.of(emit.CONFIG_STATUS_CHANGE)) == sorted([
        (devices['nic-1'], 'restoring', 'applied', 'pending', None),
        (devices['nic-2'], 'restoring', 'applied', None, {'num_vfs': 8}),
        (devices['nic-2'], 'low', None, 'pending', {'num_vfs': 8})])
    # Neither listed nor read; its status shows what is put back.
    assert [p['name'] for p in api.get(POLICIES, headers=ADMIN).json[
        'device_config_policies']] == ['low']
    api.get(item, headers=ADMIN, status=404)
    api.patch_json(item, {'priority': 3}, headers=ADMIN, status=404)
    [row] = status_of(api, made['uuid']).values()
    assert (row['device_uuid'], row['state'], row['wanted_settings'],
            row['applied_settings']) == (devices['nic-1'], 'pending', None,
                                         {'num_vfs': 8})
    assert set(status_of(api, low['uuid'])) == {devices['nic-2']}
    # Its name stays taken until it is gone.
    answer = api.post_json(POLICIES, policy('restoring', priority=9),
                           headers=ADMIN, status=409)
    assert 'being put back as discovered' in answer.json['message']

    # Deleted again: its failed restores are tried again.
    with db.engine.begin() as connection:
        # nic-1's: the row low made for nic-2 has nothing applied.
        connection.execute(sa.update(models.DeviceConfigStatus).where(
            models.DeviceConfigStatus.applied_settings.is_not(None))
            .values(state='failed', failed_task='Remove the VFs'))
    notifier.sent.clear()
    api.delete(item, headers=ADMIN, status=202)
    assert [(c['device_uuid'], c['old_state'], c['state'])
            for c in notifier.of(emit.CONFIG_STATUS_CHANGE)] == [
        (devices['nic-1'], 'failed', 'pending')]
    assert stored(db) == (2, 2)


def test_a_restoring_delete_with_nothing_applied_is_done_at_once(
        api, db, devices):
    made = api.post_json(POLICIES, policy(restore_on_delete=True),
                         headers=ADMIN).json
    api.delete('%s/%s' % (POLICIES, made['uuid']), headers=ADMIN,
               status=204)
    assert stored(db) == (0, 0)


# --- changes -----------------------------------------------------------------

def test_patch_moves_the_status_with_the_policy(api, db, devices, notifier):
    made = api.post_json(POLICIES, policy(), headers=ADMIN).json
    item = '%s/%s' % (POLICIES, made['uuid'])
    with db.engine.begin() as connection:
        connection.execute(sa.update(models.DeviceConfigStatus).values(
            state='failed', failed_task='set numvfs', message='busy',
            applied_settings={'num_vfs': 0}))
    notifier.sent.clear()

    changed = api.patch_json(item, {'settings': {'num_vfs': 4},
                                    'hosts': ['compute-1']},
                             headers=ADMIN, status=200).json

    assert (changed['settings'], changed['hosts']) == ({'num_vfs': 4},
                                                       ['compute-1'])
    assert changed['updated_at'] is not None
    [status] = status_of(api, made['uuid']).values()
    assert (status['device_uuid'], status['state'], status['wanted_settings'],
            status['applied_settings'], status['failed_task'],
            status['message']) == (devices['nic-1'], 'pending',
                                   {'num_vfs': 4}, {'num_vfs': 0}, None,
                                   None)
    assert len(notifier.of(emit.CONFIG_POLICY_UPDATE)) == 1
    assert {(c['device_uuid'], c['old_state'], c['state'])
            for c in notifier.of(emit.CONFIG_STATUS_CHANGE)} == {
        (devices['nic-1'], 'failed', 'pending'),
        (devices['nic-2'], 'failed', None)}

    # The same values again change nothing and notify nothing.
    notifier.sent.clear()
    api.patch_json(item, {'priority': 0}, headers=ADMIN, status=200)
    assert notifier.sent == []


@pytest.mark.parametrize('body, status, sentence', [
    ({'settings': {'num_vfs': 64}}, 400, 'offers at most 63 VFs'),
    ({'settings': {'driver': 'vfio-pci'}}, 400, 'have no field driver'),
    ({'kind': 'driver_binding'}, 400,
     'has no field kind that can be changed.'),
    ({'name': 'renamed'}, 400, 'has no field name that can be changed.'),
    ({}, 400, 'The request body changes nothing'),
    ({'priority': 7}, 409, 'The policy other, of the same priority 7'),
])
def test_a_bad_patch_changes_nothing(api, db, devices, body, status,
                                     sentence):
    made = api.post_json(POLICIES, policy(hosts=['compute-2']),
                         headers=ADMIN).json
    api.post_json(POLICIES, policy('other', priority=7,
                                   hosts=['compute-1']), headers=ADMIN)
    item = '%s/%s' % (POLICIES, made['uuid'])
    grown = api.patch_json(item, {'hosts': ['*'], 'priority': 3},
                           headers=ADMIN).json
    before = (stored(db), status_of(api, made['uuid']))

    answer = api.patch_json(item, body, headers=ADMIN, status=status)

    assert sentence in answer.json['message']
    assert api.get(item, headers=ADMIN).json == grown
    assert (stored(db), status_of(api, made['uuid'])) == before


def test_unknown_policies_are_404(api):
    missing = POLICIES + '/0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e'
    for answer in (
            api.get(missing, headers=ADMIN, expect_errors=True),
            api.get(missing + '/status', headers=ADMIN, expect_errors=True),
            api.patch_json(missing, {'priority': 1}, headers=ADMIN,
                           expect_errors=True),
            api.delete(missing, headers=ADMIN, expect_errors=True),
            api.get(POLICIES + '/not-a-uuid', headers=ADMIN,
                    expect_errors=True)):
        assert answer.status_int == 404
        assert answer.json['code'] == 'cyborg.device_config_policy.not_found'


def test_a_taken_name_is_409(api, db):
    api.post_json(POLICIES, policy(hosts=['a']), headers=ADMIN)
    answer = api.post_json(POLICIES, policy(hosts=['b']), headers=ADMIN,
                           status=409)
    assert answer.json['message'] == (
        'A device configuration policy with name vfs already exists.')
    assert stored(db) == (1, 0)


def test_a_removed_device_takes_its_status_along(api, db, devices):
    made = api.post_json(POLICIES, policy(), headers=ADMIN).json
    with db.engine.begin() as connection:
        device_id = connection.scalar(sa.select(models.Device.id).where(
            models.Device.uuid == devices['nic-2']))
        # As the conductor removes a device that left its host.
        deployables = sa.select(models.Deployable.id).where(
            models.Deployable.device_id == device_id)
        connection.execute(sa.delete(models.AttachHandle).where(
            models.AttachHandle.deployable_id.in_(deployables)))
        for model in (models.Deployable, models.ControlPathID):
            connection.execute(sa.delete(model).where(
                model.device_id == device_id))
        connection.execute(sa.delete(models.Device).where(
            models.Device.id == device_id))

    assert set(status_of(api, made['uuid'])) == {devices['nic-1']}


def test_a_device_found_later_is_selected_when_the_policy_changes(api, db,
                                                                  devices):
    made = api.post_json(POLICIES, policy(), headers=ADMIN).json
    [later] = inventory_rows.add_host(db.engine, 'compute-3', [_device(
        'NIC', '8086', '1572', NIC_ADDRESS, 'intel_nic_driver',
        sriov_totalvfs='8')])
    item = '%s/%s' % (POLICIES, made['uuid'])
    assert later.uuid not in status_of(api, made['uuid'])

    # Held against it too: 8 VFs fit, 9 would not.
    api.patch_json(item, {'settings': {'num_vfs': 9}}, headers=ADMIN,
                   status=400)
    api.patch_json(item, {'priority': 1}, headers=ADMIN, status=200)

    assert set(status_of(api, made['uuid'])) == {
        devices['nic-1'], devices['nic-2'], later.uuid}
