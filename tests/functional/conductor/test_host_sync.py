"""HostSync: reports through the database into a real Placement."""

import json
import os
import socket
import uuid

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
from oslo_config import cfg
import pytest

from cyborg import conf as cyborg_conf
from cyborg import exception
from cyborg.accelerator.drivers import loader
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.fpga import xilinx
from cyborg.agent import manager as agent_manager
from cyborg.clients import placement as placement_client
from cyborg.conductor import host_sync as host_sync_module
from cyborg.conductor import placement_sync
from cyborg.db import models
from tests.functional.conductor import inventories
from tests.functional.conductor.conftest import HOST
from tests.functional.conductor.inventories import copy
from tests.functional.conductor.inventories import fake_devices
from tests.functional.conductor.inventories import gpu
from tests.functional.conductor.inventories import host
from tests.functional.conductor.inventories import rows
from tests.placement_service import ADMIN_HEADERS
from tests.placement_service import allocate
from tests.placement_service import create_compute_node
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import recorded
from tests.unit.drivers.trees import sysfs

NAMES = [HOST]
OWNER = 'OWNER_CYBORG'


def rp_uuid(deployable_name):
    return placement_sync.provider_uuid(
        placement_sync.provider_name(HOST, deployable_name))


def children(observer, compute_node):
    return {rp['name'][len(HOST) + 1:]: rp
            for rp in observer.providers_in_tree(compute_node['uuid'])
            if rp['parent_provider_uuid'] == compute_node['uuid']}


def inventory_of(observer, deployable_name):
    return observer.get_inventories(rp_uuid(deployable_name))[1]


def report(host_sync, context, inventory, names=NAMES):
    return host_sync.report(context, copy(inventory).to_dict(), names)


def test_first_report_creates_rows_and_providers(
        host_sync, admin_context, db, observer, compute_node):
    summary = report(host_sync, admin_context,
                     host(*fake_devices(), gpu('81')))

    assert summary['changed'] and summary['placement_synced']
    assert summary['placement']['status'] == 'synced'
    assert summary['placement']['compute_node'] == HOST
    assert sorted(summary['placement']['created']) == [
        HOST + '_FakeDevice', HOST + '_gpu_81']
    tree = children(observer, compute_node)
    assert set(tree) == {'FakeDevice', 'gpu_81'}
    assert inventory_of(observer, 'FakeDevice') == {'FPGA': {
        'total': 16, 'reserved': 0, 'min_unit': 1, 'max_unit': 16,
        'step_size': 1, 'allocation_ratio': 1.0}}
    assert observer.get_traits(rp_uuid('FakeDevice'))[1] == {
        'CUSTOM_FAKE_DEVICE', OWNER}
    assert observer.get_traits(rp_uuid('gpu_81'))[1] == {
        'CUSTOM_GPU_NVIDIA', 'CUSTOM_GPU_PRODUCT_ID_20B0', OWNER}
    # Each deployable records the provider that stands for it.
    for name in ('FakeDevice', 'gpu_81'):
        assert inventories.deployable_row(db, name).rp_uuid == rp_uuid(name)
        assert tree[name]['uuid'] == rp_uuid(name)


def test_unchanged_report_costs_four_selects_and_no_placement_call(
        host_sync, client, admin_context, compute_node, sql_counter,
        db_writes):
    inventory = host(*fake_devices(), gpu('81'), gpu('82'))
    report(host_sync, admin_context, inventory)
    sql_counter.reset()
    db_writes.reset()
    client.calls.reset()

    summary = report(host_sync, admin_context, inventory)

    assert not summary['changed']
    assert summary['placement'] == {'status': 'skipped'}
    assert summary['placement_synced']
    assert db_writes.writes == []
    # The three of the diff, one of the host's sync state.
    assert len(sql_counter) <= 4, sql_counter.statements
    assert (client.calls.reads, client.calls.writes) == (0, 0)


def test_changed_report_writes_only_the_change_to_placement(
        host_sync, client, admin_context, observer, compute_node,
        db_writes):
    inventory = host(*fake_devices(), gpu('81'))
    report(host_sync, admin_context, inventory)
    gpu_generation = children(observer, compute_node)['gpu_81'][
        'generation']
    client.calls.reset()
    db_writes.reset()
    changed = copy(inventory)
    changed.devices[0].deployables[0].num_accelerators = 8

    summary = report(host_sync, admin_context, changed)

    assert summary['counts'] == {'deployables_updated': 1}
    # The change, and in its transaction the news that Placement must
    # follow; then the sync records that it did.
    assert db_writes.tables() == [('UPDATE', 'deployables'),
                                  ('UPDATE', 'host_sync_states')]
    assert summary['placement']['updated'] == [HOST + '_FakeDevice']
    # One listing, one inventory PUT: the GPU's provider is not touched.
    assert (client.calls.reads, client.calls.writes) == (1, 1)
    assert inventory_of(observer, 'FakeDevice')['FPGA']['total'] == 8
    assert children(observer, compute_node)['gpu_81'][
        'generation'] == gpu_generation


def test_removed_device_leaves_database_and_placement(
        host_sync, admin_context, db, observer, compute_node):
    report(host_sync, admin_context, host(*fake_devices(), gpu('81')))

    summary = report(host_sync, admin_context, host(*fake_devices()))

    assert summary['counts']['devices_removed'] == 1
    assert summary['placement']['deleted'] == [HOST + '_gpu_81']
    assert [d.model for d in rows(db, models.Device)] == ['FakeFPGA']
    assert set(children(observer, compute_node)) == {'FakeDevice'}


def test_removed_device_in_use_is_kept_until_free(
        host_sync, admin_context, db, observer, compute_node, db_writes,
        client):
    report(host_sync, admin_context, host(*fake_devices(), gpu('81')))
    arq = inventories.bind_handle(db, 'gpu_81')

    summary = report(host_sync, admin_context, host(*fake_devices()))

    assert summary['counts'] == {'devices_missing': 1}
    [gpu_row] = rows(db, models.Device, model='A100')
    assert gpu_row.missing_since is not None
    # Its provider stays, but nothing new may be scheduled there.
    assert inventory_of(observer, 'gpu_81')['PGPU']['reserved'] == 1
    assert summary['placement_synced']

    # Still used: the next report writes nothing anywhere.
    db_writes.reset()
    client.calls.reset()
    again = report(host_sync, admin_context, host(*fake_devices()))
    assert again['placement'] == {'status': 'skipped'}
    assert db_writes.writes == []

    inventories.unbind(db, arq)
    freed = report(host_sync, admin_context, host(*fake_devices()))

    assert freed['counts'] == {'devices_removed': 1,
                               'deployables_removed': 1,
                               'attach_handles_removed': 1}
    assert rows(db, models.Device, model='A100') == []
    assert freed['placement']['deleted'] == [HOST + '_gpu_81']
    assert set(children(observer, compute_node)) == {'FakeDevice'}


def test_provider_kept_by_allocations_is_retried_on_later_reports(
        placement, host_sync, admin_context, observer, compute_node, db):
    report(host_sync, admin_context, host(*fake_devices(), gpu('81')))
    consumer = str(uuid.uuid4())
    allocate(placement.adapter(), consumer, rp_uuid('gpu_81'), {'PGPU': 1})

    # The database has no user of the GPU, Placement has one.
    summary = report(host_sync, admin_context, host(*fake_devices()))

    assert rows(db, models.Device, model='A100') == []
    assert summary['placement']['status'] == 'partial'
    assert not summary['placement_synced']
    assert HOST + '_gpu_81' in summary['placement']['kept']
    assert inventory_of(observer, 'gpu_81')['PGPU']['reserved'] == 1

    # Unchanged for the database, yet Placement is tried again.
    still = report(host_sync, admin_context, host(*fake_devices()))
    assert still['placement']['status'] == 'partial'

    placement.adapter().delete('/allocations/%s' % consumer,
                               microversion=placement_client.MICROVERSION)
    done = report(host_sync, admin_context, host(*fake_devices()))

    assert done['placement']['status'] == 'synced'
    assert done['placement']['deleted'] == [HOST + '_gpu_81']
    assert set(children(observer, compute_node)) == {'FakeDevice'}
    after = report(host_sync, admin_context, host(*fake_devices()))
    assert after['placement'] == {'status': 'skipped'}


def test_disabled_device_is_reserved_through_later_reports(
        host_sync, admin_context, db, observer, compute_node):
    inventory = host(*fake_devices(), gpu('81'))
    report(host_sync, admin_context, inventory)
    device_uuid = rows(db, models.Device, model='FakeFPGA')[0].uuid

    summary = host_sync.set_device_status(admin_context, device_uuid,
                                          'maintaining')

    assert summary['changed'] and summary['placement_synced']
    assert rows(db, models.Device, uuid=device_uuid)[0].status == (
        'maintaining')
    assert inventory_of(observer, 'FakeDevice')['FPGA']['reserved'] == 16
    assert inventory_of(observer, 'gpu_81')['PGPU']['reserved'] == 0

    # An unchanged report, then a changed one: still reserved.
    report(host_sync, admin_context, inventory)
    assert inventory_of(observer, 'FakeDevice')['FPGA']['reserved'] == 16
    changed = copy(inventory)
    changed.devices[0].deployables[0].num_accelerators = 8
    summary = report(host_sync, admin_context, changed)
    assert summary['placement']['updated'] == [HOST + '_FakeDevice']
    assert inventory_of(observer, 'FakeDevice')['FPGA'] == {
        'total': 8, 'reserved': 8, 'min_unit': 1, 'max_unit': 8,
        'step_size': 1, 'allocation_ratio': 1.0}

    enabled = host_sync.set_device_status(admin_context, device_uuid,
                                          'enabled')

    assert enabled['placement']['updated'] == [HOST + '_FakeDevice']
    assert inventory_of(observer, 'FakeDevice')['FPGA']['reserved'] == 0
    # Enabling an enabled device changes nothing.
    again = host_sync.set_device_status(admin_context, device_uuid,
                                        'enabled')
    assert not again['changed']
    assert again['placement'] == {'status': 'skipped'}


def test_set_device_status_refuses_unknown_status_and_device(
        host_sync, admin_context, compute_node):
    report(host_sync, admin_context, host(gpu('81')))
    with pytest.raises(exception.Invalid, match='maintaining'):
        host_sync.set_device_status(admin_context, str(uuid.uuid4()),
                                    'disabled')
    with pytest.raises(exception.NotFound):
        host_sync.set_device_status(admin_context, str(uuid.uuid4()),
                                    'maintaining')


def closed_port_url():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return 'http://127.0.0.1:%d' % probe.getsockname()[1]


def test_placement_down_then_back_converges(
        placement, admin_context, db, observer, compute_node):
    adapter = ks_adapter.Adapter(
        ks_session.Session(additional_headers=ADMIN_HEADERS),
        service_type='placement', endpoint_override=closed_port_url())
    client = placement_client.PlacementClient(adapter)
    host_sync = host_sync_module.HostSync(client)
    inventory = host(*fake_devices(), gpu('81'))

    summary = report(host_sync, admin_context, inventory)

    assert summary['changed']
    assert not summary['placement_synced']
    assert summary['placement']['status'] == 'unreachable'
    assert len(rows(db, models.Deployable)) == 2
    assert children(observer, compute_node) == {}

    # Placement answers again (here: at its served address).
    adapter.endpoint_override = placement.serve()
    back = report(host_sync, admin_context, inventory)

    assert not back['changed']
    assert back['placement']['status'] == 'synced'
    assert set(children(observer, compute_node)) == {'FakeDevice', 'gpu_81'}
    assert inventories.deployable_row(db, 'gpu_81').rp_uuid == rp_uuid(
        'gpu_81')
    client.calls.reset()
    after = report(host_sync, admin_context, inventory)
    assert after['placement'] == {'status': 'skipped'}
    assert (client.calls.reads, client.calls.writes) == (0, 0)


def test_compute_node_found_once_by_the_first_name_that_matches(
        host_sync, client, admin_context, compute_node, caplog):
    names = ['compute1', HOST, 'compute1.other']
    caplog.set_level('INFO', logger=host_sync_module.__name__)

    first = report(host_sync, admin_context, host(gpu('81')), names)

    assert first['placement']['compute_node'] == HOST
    assert "found by the name '%s'" % HOST in caplog.text
    client.calls.reset()
    second = report(host_sync, admin_context, host(gpu('81'), gpu('82')),
                    names)
    assert second['placement']['created'] == [HOST + '_gpu_82']
    # No name lookups the second time: one listing is the only read.
    assert client.calls.by_method['GET'] == 1


def test_no_compute_node_keeps_the_database_and_says_so(
        host_sync, admin_context, db, placement, observer):
    summary = report(host_sync, admin_context, host(gpu('81')),
                     ['nowhere', 'nowhere.example.com'])

    assert summary['placement']['status'] == 'no_compute_node'
    assert 'nowhere.example.com' in summary['placement']['error']
    assert len(rows(db, models.Device)) == 1

    # Nova makes the compute node: the next (unchanged) report syncs.
    node = create_compute_node(placement.adapter(), 'nowhere.example.com')
    again = report(host_sync, admin_context, host(gpu('81')),
                   ['nowhere', 'nowhere.example.com'])
    assert again['placement']['status'] == 'synced'
    assert [rp['name'] for rp in observer.providers_in_tree(node['uuid'])
            if rp['uuid'] != node['uuid']] == [HOST + '_gpu_81']


def xilinx_devices(root):
    return xilinx.XilinxFPGADriver(cfg.ConfigOpts(),
                                   pci.PCIReader(root)).discover()


def flash_shell(root):
    """What the U50 of the golden tree shows once a shell is flashed: its
    shell's management id and a user function beside it."""
    devices = os.path.join(root, 'sys/bus/pci/devices')
    with open(os.path.join(devices, '0000:3b:00.0', 'device'), 'w') as f:
        f.write('0x5020\n')
    user = os.path.join(devices, '0000:3b:00.1')
    os.mkdir(user)
    for name, value in (('vendor', '0x10ee'), ('device', '0x5021'),
                        ('class', '0x120000')):
        with open(os.path.join(user, name), 'w') as f:
            f.write(value + '\n')


def test_card_without_deployables_is_stored_and_offers_nothing(
        host_sync, admin_context, db, observer, compute_node, tmp_path):
    root = recorded.unpack('u50-golden', tmp_path / 'u50-golden')
    [golden] = xilinx_devices(root)

    summary = report(host_sync, admin_context, host(*fake_devices(), golden))

    assert summary['counts']['devices_added'] == 2
    assert summary['placement_synced']
    card = {d.model: d for d in rows(db, models.Device)}['d020']
    assert card.vendor_board_info == xilinx.GOLDEN_INFO
    assert rows(db, models.Deployable, device_id=card.id) == []
    assert set(children(observer, compute_node)) == {'FakeDevice'}
    again = report(host_sync, admin_context, host(*fake_devices(), golden))
    assert not again['changed'] and again['placement_synced']

    # Alone on its host: stored, and no provider at all.
    alone = report(host_sync, admin_context, host(golden))
    assert alone['placement_synced']
    assert [d.model for d in rows(db, models.Device)] == ['d020']
    assert children(observer, compute_node) == {}

    # A shell flashed: the same device, now offered.
    flash_shell(root)
    [shell] = xilinx_devices(root)
    flashed = report(host_sync, admin_context, host(shell))
    assert flashed['counts'] == {'devices_updated': 1,
                                 'deployables_added': 1,
                                 'attach_handles_added': 1}
    assert flashed['placement']['created'] == [HOST + '_fpga_0000:3b:00.0']
    assert inventory_of(observer, 'fpga_0000:3b:00.0')['FPGA']['total'] == 1


def test_real_card_at_the_old_fake_address_is_reported_beside_the_fake(
        host_sync, admin_context, db, observer, compute_node, tmp_path):
    # An Alveo U250 where the fake FPGA used to be, 0000:0c:00.0.
    port = hosts.root_port('0000:0b:00.0')
    card = [hosts.card('0000:0c:00.0', '10ee', '5004', '120000', port.bdf,
                       driver='xclmgmt'),
            hosts.card('0000:0c:00.1', '10ee', '5005', '120000', port.bdf,
                       driver='xocl')]
    root = sysfs.build(str(tmp_path), hosts.CHIPSET + [port, *card])
    conf = cyborg_conf.load(default_config_files=[])
    conf.set_override('host', HOST)
    drivers = loader.load_drivers(conf, ['fake_driver', 'xilinx_fpga_driver'],
                                  pci.PCIReader(root))
    agent = agent_manager.AgentManager(conf, drivers, conductor=None)

    summary = report(host_sync, admin_context, agent.discover())

    assert summary['counts']['devices_added'] == 2
    assert summary['placement_synced']
    stored = {(d.vendor, d.model) for d in rows(db, models.Device)}
    assert stored == {('abcd', 'FakeFPGA'), ('10ee', '5004')}
    assert sorted(json.loads(c.cpid_info)['domain']
                  for c in rows(db, models.ControlPathID)) == ['0000', 'ffff']
    assert set(children(observer, compute_node)) == {
        'FakeDevice', 'fpga_0000:0c:00.0'}
