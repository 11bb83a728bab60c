"""One writer per host: each host's reports, heartbeats and Placement syncs
are written by its owner on the conductors' ring alone; a sync that meets a
newer state re-reads the database instead of writing its own over it.

Real databases (three engines), a real Placement, real ``services`` rows
for the ring; conductors are in-process ``ConductorManager``s whose RPC
between each other is a direct call (casts wait on a queue, as on a bus).
"""

import datetime
import time

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.clients import placement as placement_client
from cyborg.conductor import health as health_module
from cyborg.conductor import host_sync as host_sync_module
from cyborg.conductor import manager as manager_module
from cyborg.conductor import membership as membership_module
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.db.api import devices as devices_db
from cyborg.db.api import health_override as override_db
from cyborg.db.api import host_sync_states as states_db
from cyborg.db.api import services as services_db
from tests.functional.conductor.conftest import HOST
from tests.functional.conductor.inventories import copy
from tests.functional.conductor.inventories import fake_devices
from tests.functional.conductor.inventories import host
from tests.functional.conductor.inventories import rows

NAMES = [HOST]
FPGA_ADDRESS = 'ffff:0c:00.0'
FPGA_RP = placement_sync.provider_uuid(
    placement_sync.provider_name(HOST, 'FakeDevice'))
UNHEALTHY = {FPGA_ADDRESS: {'state': 'unhealthy', 'reason': 'fatal AER'}}
DOWN_AFTER = 60


class HookedClient(placement_client.PlacementClient):
    """Runs ``hook`` once, before its first inventory write to ``target``:
    what other conductors do while this one is in the middle of a sync."""

    def __init__(self, adapter, target, hook=None):
        super().__init__(adapter)
        self.target = target
        self.hook = hook

    def put_inventories(self, uuid, generation, inventories):
        hook, self.hook = self.hook, None
        if uuid == self.target and hook is not None:
            hook()
        return super().put_inventories(uuid, generation, inventories)


def fpga_reserved(observer):
    """(reserved, total) of the fake FPGA's provider."""
    inventory = observer.get_inventories(FPGA_RP)[1]['FPGA']
    return inventory['reserved'], inventory['total']


def fpga_uuid(db):
    return rows(db, models.Device, model='FakeFPGA')[0].uuid


def sync_state(db):
    with db.engine.connect() as connection:
        return states_db.read(connection, HOST)


def set_device(db, **values):
    devices = models.Device.__table__
    with db.engine.begin() as connection:
        connection.execute(devices.update().values(**values))


# -- a sync that meets a newer state -------------------------------------

@pytest.mark.parametrize('conflict', [False, True],
                         ids=['overtaken', 'generation-conflict'])
def test_a_sync_overtaken_by_a_newer_one_reads_the_database_again(
        admin_context, db, placement, observer, compute_node, conflict):
    """Conductor A syncs "the FPGA enabled"; before its write lands the
    device is quarantined and conductor B syncs that. A must not leave
    its older target in Placement while the database says in sync."""
    other = host_sync_module.HostSync(placement.client())
    other.report(admin_context, copy(host(*fake_devices())), NAMES)
    device = fpga_uuid(db)
    other.set_device_status(admin_context, device, 'maintaining')
    assert fpga_reserved(observer) == (16, 16)

    def quarantined_and_synced_elsewhere():
        override_db.set_override(admin_context, device, 'quarantine')
        assert other.sync_host(admin_context, HOST)['status'] == 'synced'
        if conflict:
            # A third writer touches the provider too: A's write meets a
            # generation it did not read.
            observer.ensure_trait('CUSTOM_SOMEONE_ELSE')
            generation, traits = observer.get_traits(FPGA_RP)
            observer.put_traits(FPGA_RP, generation,
                                traits | {'CUSTOM_SOMEONE_ELSE'})

    client = HookedClient(placement.adapter(), FPGA_RP,
                          quarantined_and_synced_elsewhere)
    slow = host_sync_module.HostSync(client)
    devices_db.set_status(admin_context, device, 'enabled')
    outcome = slow.sync_host(admin_context, HOST)

    assert outcome['status'] == 'synced', (outcome['failed'],
                                           outcome['kept'])
    assert fpga_reserved(observer) == (16, 16)
    state = sync_state(db)
    assert state.synced_generation == state.desired_generation


# -- heartbeats ordered by the server's clock ----------------------------

def usage_at(stamp):
    return {FPGA_ADDRESS: {'utilization': 1, 'observed_at': stamp}}


def agent_row(db):
    with db.engine.connect() as connection:
        return connection.execute(sa.select(models.Service.__table__).where(
            models.Service.binary == services_db.AGENT)).one()


def test_a_heartbeat_stamped_in_the_future_does_not_silence_later_ones(
        admin_context, db):
    monitor = health_module.DeviceHealth(None)
    now = time.time()
    # An agent whose clock ran an hour ahead at boot, then was corrected.
    monitor.heartbeat(admin_context, HOST, usage=usage_at(now + 3600))
    ahead = agent_row(db)
    assert ahead.usage_at <= models.utcnow()

    monitor.heartbeat(admin_context, HOST, usage=usage_at(now + 1))
    assert agent_row(db).usage[FPGA_ADDRESS]['observed_at'] == now + 1

    # A heartbeat that waited behind that one still writes nothing.
    monitor.heartbeat(admin_context, HOST, usage=usage_at(now - 30))
    assert agent_row(db).usage[FPGA_ADDRESS]['observed_at'] == now + 1


def test_a_row_stamped_in_the_future_is_written_over(admin_context, db):
    """A row written while the clock ran ahead (before stamps were bounded)
    orders nothing either."""
    monitor = health_module.DeviceHealth(None)
    now = time.time()
    monitor.heartbeat(admin_context, HOST, usage=usage_at(now))
    services = models.Service.__table__
    with db.engine.begin() as connection:
        connection.execute(services.update().values(
            usage_at=models.utcnow() + datetime.timedelta(hours=1)))

    monitor.heartbeat(admin_context, HOST, usage=usage_at(now + 1))

    row = agent_row(db)
    assert row.usage[FPGA_ADDRESS]['observed_at'] == now + 1
    assert row.usage_at <= models.utcnow()


# -- the operator's override given back to health ------------------------

def test_clearing_ignore_quarantines_an_unhealthy_device(
        admin_context, db, observer, host_sync, compute_node):
    host_sync.report(admin_context, copy(host(*fake_devices())), NAMES)
    device = fpga_uuid(db)
    override_db.set_override(admin_context, device, 'ignore')
    set_device(db, health='unhealthy', health_reason='fatal AER',
               quarantined=False)
    before = sync_state(db).desired_generation

    outcome = override_db.set_override(admin_context, device, None)

    assert outcome.quarantine_changed
    [row] = rows(db, models.Device)
    assert (row.health_override, row.quarantined) == (None, True)
    assert sync_state(db).desired_generation == before + 1
    assert host_sync.sync_host(admin_context, HOST)['status'] == 'synced'
    assert fpga_reserved(observer) == (16, 16)


def test_clearing_ignore_of_a_healthy_device_quarantines_nothing(
        admin_context, db, host_sync, compute_node):
    host_sync.report(admin_context, copy(host(*fake_devices())), NAMES)
    device = fpga_uuid(db)
    override_db.set_override(admin_context, device, 'ignore')

    outcome = override_db.set_override(admin_context, device, None)

    assert not outcome.quarantine_changed
    [row] = rows(db, models.Device)
    assert (row.health_override, row.quarantined) == (None, False)


# -- a fleet of three conductors -----------------------------------------

class Bus:
    """The conductors' RPC to each other: calls go straight to the named
    conductor; casts wait in a queue until ``deliver``."""

    def __init__(self):
        self.conductors = {}
        self.queued = []

    def report_host_inventory(self, context, inventory, names, server=None,
                              forwarded=False, timeout=None):
        return self.conductors[server].report_host_inventory(
            context, inventory, names, forwarded=forwarded)

    def agent_heartbeat(self, context, host, version, rpc_version,
                        server=None, **extra):
        self.queued.append((server, context, host, version, rpc_version,
                            extra))

    def deliver(self):
        while self.queued:
            server, context, host, version, rpc_version, extra = (
                self.queued.pop(0))
            self.conductors[server].agent_heartbeat(
                context, host, version=version, rpc_version=rpc_version,
                **extra)


@pytest.fixture
def fleet(admin_context, db, placement, compute_node):
    names = ('conductor-1', 'conductor-2', 'conductor-3')
    for name in names:
        services_db.heartbeat(admin_context, name, services_db.CONDUCTOR)
    bus = Bus()
    clients = {}
    for name in names:
        ring = membership_module.Membership(admin_context, name, DOWN_AFTER)
        ring.refresh()
        clients[name] = HookedClient(placement.adapter(), FPGA_RP)
        sync = host_sync_module.HostSync(clients[name])
        bus.conductors[name] = manager_module.ConductorManager(
            sync, membership=ring, peers=bus,
            health=health_module.DeviceHealth(sync, ring))
    owner = bus.conductors[names[0]].membership.owner_of(HOST)
    others = [name for name in names if name != owner]
    return bus, clients, owner, others


def test_fleet_a_quarantine_reaches_placement_within_one_heartbeat(
        admin_context, db, observer, fleet):
    """Heartbeats arrive at every conductor; the device turns unhealthy
    while the owner syncs a report. Placement reserves it once that
    heartbeat is handled, and only the owner wrote the host."""
    bus, clients, owner, (first, second) = fleet
    inventory = host(*fake_devices())
    answer = bus.conductors[first].report_host_inventory(
        admin_context, copy(inventory).to_dict(), NAMES)
    assert (answer['conductor'], answer['owner']) == (owner, owner)
    assert fpga_reserved(observer) == (0, 16)

    def fault_seen_elsewhere():
        bus.conductors[second].agent_heartbeat(
            admin_context, HOST, health=UNHEALTHY)

    # The owner syncs a report that changes the FPGA; the fault reaches
    # another conductor in the middle of it.
    clients[owner].hook = fault_seen_elsewhere
    changed = copy(inventory)
    changed.devices[0].deployables[0].num_accelerators = 8
    bus.conductors[first].report_host_inventory(
        admin_context, changed.to_dict(), NAMES)
    # The same heartbeat at the third conductor, and a later one at the
    # owner itself.
    bus.conductors[first].agent_heartbeat(admin_context, HOST,
                                          health=UNHEALTHY)
    bus.deliver()

    assert fpga_reserved(observer) == (8, 8)
    [row] = rows(db, models.Device)
    assert (row.health, row.quarantined) == ('unhealthy', True)
    assert states_db.in_sync(sync_state(db))
    for name in (first, second):
        assert clients[name].calls.writes == 0, name


def test_fleet_a_non_owner_refuses_a_report_its_owner_did_not_take(
        admin_context, db, observer, fleet):
    bus, clients, owner, (first, _) = fleet

    class Silent(Bus):
        def report_host_inventory(self, *args, **kwargs):
            raise messaging.MessagingTimeout('no answer')

    bus.conductors[first].peers = Silent()
    # What reaches the agent over RPC: the refusal and its sentence.
    with pytest.raises(messaging.ExpectedException) as refused:
        bus.conductors[first].report_host_inventory(
            admin_context, copy(host(*fake_devices())).to_dict(), NAMES)
    assert refused.value.exc_info[0] is manager_module.NotOwner

    assert rows(db, models.Device) == []
    assert clients[first].calls.writes == 0
