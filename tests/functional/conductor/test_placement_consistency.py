"""Placement follows the database: sync state in the database, the retry
and reconciliation passes, on three engines and a real Placement reached
over HTTP through a gate that can cut it."""

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
import pytest
import sqlalchemy as sa

from cyborg.clients import placement as placement_client
from cyborg.conductor import host_sync as host_sync_module
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.db.api import devices as devices_db
from cyborg.db.api import host_sync_states as states_db
from tests.functional.conductor.conftest import HOST
from tests.functional.conductor.inventories import copy
from tests.functional.conductor.inventories import fake_devices
from tests.functional.conductor.inventories import gpu
from tests.functional.conductor.inventories import host
from tests.functional.conductor.inventories import rows
from tests.placement_service import ADMIN_HEADERS
from tests.tcp_gate import TCPGate

NAMES = [HOST]
OWNER = 'OWNER_CYBORG'


def rp_uuid(deployable_name):
    return placement_sync.provider_uuid(
        placement_sync.provider_name(HOST, deployable_name))


class OwnerIs:
    """Membership as the fleet's ring answers it: one owner for all."""

    def __init__(self, owner, me):
        self.owner = owner
        self.me = me

    def owns(self, hostname):
        return self.owner == self.me


@pytest.fixture
def gate(placement):
    url = placement.serve()
    gate = TCPGate('127.0.0.1', int(url.rsplit(':', 1)[1]))
    yield gate
    gate.close()


def gated_client(gate):
    session = ks_session.Session(additional_headers=ADMIN_HEADERS,
                                 timeout=5)
    return placement_client.PlacementClient(ks_adapter.Adapter(
        session, service_type='placement',
        endpoint_override='http://%s' % gate.address))


def state(db):
    with db.engine.connect() as connection:
        return states_db.read(connection, HOST)


def fpga_inventory(observer):
    return observer.get_inventories(rp_uuid('FakeDevice'))[1]['FPGA']


def report(sync, context, inventory):
    return sync.report(context, copy(inventory).to_dict(), NAMES)


def fpga_uuid(db):
    return rows(db, models.Device, model='FakeFPGA')[0].uuid


def test_generations_follow_changes_and_syncs(
        admin_context, db, gate, compute_node):
    sync = host_sync_module.HostSync(gated_client(gate))
    inventory = host(*fake_devices(), gpu('81'))

    report(sync, admin_context, inventory)
    first = state(db)
    assert first.desired_generation == first.synced_generation == 1
    assert first.compute_node_uuid == compute_node['uuid']

    report(sync, admin_context, inventory)  # unchanged: no bump
    assert state(db).desired_generation == 1

    gate.close()
    changed = copy(inventory)
    changed.devices[0].deployables[0].num_accelerators = 8
    summary = report(sync, admin_context, changed)
    behind = state(db)
    assert summary['placement']['status'] == 'unreachable'
    assert (behind.desired_generation, behind.synced_generation) == (2, 1)
    assert behind.last_error
    # Behind: an unchanged report tries Placement again.
    assert report(sync, admin_context, changed)['placement'][
        'status'] == 'unreachable'

    gate.open()
    assert report(sync, admin_context, changed)['placement'][
        'status'] == 'synced'
    after = state(db)
    assert (after.desired_generation, after.synced_generation) == (2, 2)
    assert after.last_error is None


def test_synced_generation_is_never_lowered_and_bumps_race_safely(db):
    with db.engine.begin() as connection:
        states_db.bump_desired(connection, HOST)
        states_db.bump_desired(connection, HOST)
        assert states_db.record_synced(connection, HOST, 2, None)
        # A slower sync of an older state records nothing.
        assert not states_db.record_synced(connection, HOST, 1, None)
        row = states_db.read(connection, HOST)
    assert (row.desired_generation, row.synced_generation) == (2, 2)
    assert states_db.in_sync(row)


def test_disabled_while_placement_is_down_is_reserved_once_it_is_back(
        admin_context, db, gate, observer, compute_node):
    first = host_sync_module.HostSync(gated_client(gate))
    report(first, admin_context, host(*fake_devices(), gpu('81')))
    device = fpga_uuid(db)

    gate.close()
    summary = first.set_device_status(admin_context, device, 'maintaining')
    assert summary['changed']
    assert summary['placement']['status'] == 'unreachable'
    assert not summary['placement_updated']
    assert rows(db, models.Device, uuid=device)[0].status == 'maintaining'
    assert fpga_inventory(observer)['reserved'] == 0
    gate.open()

    # Another conductor, which never synced this host, owns it now: the
    # state it acts on is in the database.
    second = host_sync_module.HostSync(gated_client(gate))
    assert first.retry_pending(admin_context,
                               OwnerIs('second', 'first')) == {}
    outcomes = second.retry_pending(admin_context,
                                    OwnerIs('second', 'second'))
    assert outcomes[HOST]['status'] == 'synced'
    inventory = fpga_inventory(observer)
    assert inventory['reserved'] == inventory['total'] == 16
    assert states_db.in_sync(state(db))

    # Enabled while no conductor looked (as the API stores it), then a
    # reconciliation pass of the owner.
    devices_db.set_status(admin_context, device, 'enabled')
    second.reconcile(admin_context, OwnerIs('second', 'second'))
    assert fpga_inventory(observer)['reserved'] == 0
    # The report path of the first conductor agrees: nothing to do.
    again = report(first, admin_context, host(*fake_devices(), gpu('81')))
    assert again['placement'] == {'status': 'skipped'}


def test_reconciliation_recreates_a_provider_deleted_out_of_band(
        admin_context, db, gate, placement, observer, compute_node,
        caplog):
    report(host_sync_module.HostSync(gated_client(gate)), admin_context,
           host(*fake_devices(), gpu('81')))
    first = host_sync_module.HostSync(gated_client(gate))
    first.set_device_status(admin_context, fpga_uuid(db), 'maintaining')
    traits = observer.get_traits(rp_uuid('FakeDevice'))[1]
    response = placement.adapter().delete(
        '/resource_providers/%s' % rp_uuid('FakeDevice'),
        microversion=placement_client.MICROVERSION)
    assert response.status_code == 204

    caplog.set_level('WARNING', logger=host_sync_module.__name__)
    reconciler = host_sync_module.HostSync(gated_client(gate))
    outcome = reconciler.reconcile(admin_context)[HOST]

    assert outcome['created'] == [HOST + '_FakeDevice']
    assert observer.get_provider(rp_uuid('FakeDevice'))[
        'parent_provider_uuid'] == compute_node['uuid']
    assert fpga_inventory(observer) == {
        'total': 16, 'reserved': 16, 'min_unit': 1, 'max_unit': 16,
        'step_size': 1, 'allocation_ratio': 1.0}
    assert observer.get_traits(rp_uuid('FakeDevice'))[1] == traits
    assert ('resource provider %s_FakeDevice was missing from Placement; '
            'recreated' % HOST) in caplog.text
    # Nothing else drifted; a second pass repairs nothing.
    caplog.clear()
    client = reconciler.client
    client.calls.reset()
    again = reconciler.reconcile(admin_context)[HOST]
    assert (again['created'], again['updated']) == ([], [])
    assert 'recreated' not in caplog.text
    # The tree at the cached generations: one listing, no writes.
    assert (client.calls.reads, client.calls.writes) == (1, 0)


def test_reconciliation_repairs_traits_and_reserved_changed_out_of_band(
        admin_context, db, placement, observer, compute_node, gate, caplog):
    sync = host_sync_module.HostSync(gated_client(gate))
    report(sync, admin_context, host(*fake_devices(), gpu('81')))
    uuid = rp_uuid('gpu_81')
    generation, traits = observer.get_traits(uuid)
    observer.ensure_trait('CUSTOM_SOMETHING_ELSE')
    generation = observer.put_traits(uuid, generation,
                                     {OWNER, 'CUSTOM_SOMETHING_ELSE'})
    _, inventories = observer.get_inventories(uuid)
    inventories['PGPU']['reserved'] = 1
    observer.put_inventories(uuid, generation, inventories)
    caplog.set_level('WARNING', logger=host_sync_module.__name__)

    # The same process that synced it: its cache sees the new generation.
    outcome = sync.reconcile(admin_context)[HOST]

    assert outcome['updated'] == [HOST + '_gpu_81']
    assert observer.get_traits(uuid)[1] == traits
    assert observer.get_inventories(uuid)[1]['PGPU']['reserved'] == 0
    assert ('resource provider %s_gpu_81 in Placement differed from the '
            'database; repaired' % HOST) in caplog.text


def test_reconciliation_stops_while_placement_is_unreachable(
        admin_context, db, gate, observer, compute_node):
    sync = host_sync_module.HostSync(gated_client(gate))
    report(sync, admin_context, host(*fake_devices()))
    with db.engine.begin() as connection:
        connection.execute(sa.update(models.Device).values(hostname='other'))
        states_db.bump_desired(connection, 'other')
    devices_db.set_status(admin_context, fpga_uuid(db), 'maintaining')
    gate.close()

    outcomes = sync.reconcile(admin_context)

    # The first host found Placement down; the pass went no further.
    assert [o['status'] for o in outcomes.values()] == ['unreachable']
    gate.open()
    assert set(sync.reconcile(admin_context)) == {HOST, 'other'}


def test_the_conductor_serves_rpc_while_placement_is_unreachable(
        conf, db, admin_context, gate):
    from cyborg import rpc
    from cyborg.conductor import manager
    from cyborg.conductor import rpcapi
    from tests import conductor_rpc

    gate.close()
    conductor_rpc.use_fake_transport(conf)
    transport = rpc.get_transport(conf)
    service = manager.ConductorService(conf, transport=transport, db=db,
                                       placement=gated_client(gate))
    try:
        # Returns once it serves: Placement is not waited for.
        service.start()
        summary = rpcapi.ConductorAPI(transport, timeout=10) \
            .report_host_inventory(admin_context,
                                   host(*fake_devices()).to_dict(), NAMES)
    finally:
        service.stop()
        transport.cleanup()

    assert summary['changed']
    assert summary['placement']['status'] == 'unreachable'
    assert not states_db.in_sync(state(db))
    # The calls that got no answer are counted as such.
    assert service.metrics.registry.get_sample_value(
        'cyborg_placement_requests_total',
        {'method': 'GET', 'status': 'error'}) >= 1
