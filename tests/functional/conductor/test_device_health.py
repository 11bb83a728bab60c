"""Device health end to end in one process: the agent observes the H100
of a recorded sysfs tree (with its NVML recording) and heartbeats over
oslo.messaging to the real conductor endpoint, which writes the database
(three engines) and quarantines through the real Placement.

Faults are what the kernel shows in sysfs: a fatal AER counter that
grows, the kernel driver unbound, the device gone from the bus, the link
retrained narrower.
"""

import contextlib
import datetime
import os
import queue
import shutil
import time

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import manager as agent_manager
from cyborg.conductor import health as health_module
from cyborg.conductor import host_sync as host_sync_module
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import placement_sync
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.db.api import health_override as override_db
from tests import conductor_rpc
from tests.functional.conductor.conftest import HOST
from tests.placement_service import create_compute_node
from tests.unit.drivers.conftest import h100_tree  # noqa: F401
from tests.unit.drivers.conftest import recorded_nvml  # noqa: F401

H100 = '0000:00:06.0'
DEPLOYABLE = 'pgpu_' + H100
HOLD_DOWN = 60


class Conductor(conductor_manager.ConductorManager):
    """The conductor's endpoints; says when it has handled a heartbeat."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handled = queue.Queue()

    def agent_heartbeat(self, context, host, **kwargs):
        try:
            return super().agent_heartbeat(context, host, **kwargs)
        finally:
            self.handled.put(kwargs)


class Rig:
    """The agent of HOST and a conductor, each on a transport of its own."""

    def __init__(self, conf, db, placement, tree, stack):
        self.conf = conf
        self.db = db
        self.placement = placement
        self.stack = stack
        self.context = cyborg_context.admin_context(db)
        self.device_dir = os.path.join(tree, 'sys/bus/pci/devices', H100)
        agent_transport = rpc.get_transport(conf)
        stack.callback(agent_transport.cleanup)
        self.agent = agent_manager.AgentManager(
            conf, [nvidia.NvidiaGPUDriver(conf, pci.PCIReader(tree))],
            conductor_rpcapi.ConductorAPI(agent_transport, timeout=20),
            candidates=[(HOST, 'the configured host')], glance=None)
        self.conductor = None
        self._serving = None
        self.start_conductor()
        self.rp_uuid = placement_sync.provider_uuid(
            placement_sync.provider_name(HOST, DEPLOYABLE))

    def start_conductor(self):
        """A conductor process as it starts: nothing kept in memory."""
        if self._serving is not None:
            self._serving.close()
        self._serving = contextlib.ExitStack()
        self.stack.callback(self._serving.close)
        transport = rpc.get_transport(self.conf)
        self._serving.callback(transport.cleanup)
        self.sync = host_sync_module.HostSync(self.placement.client())
        self.health = health_module.DeviceHealth(self.sync,
                                                 hold_down=HOLD_DOWN)
        self.conductor = Conductor(self.sync, health=self.health)
        self._serving.enter_context(conductor_rpc.serving(
            transport, self.db, [self.conductor]))

    def report(self):
        answer = self.agent.report_inventory()
        assert answer is not None
        return answer

    def heartbeat(self):
        assert self.agent.heartbeat()
        return self.conductor.handled.get(timeout=30)

    def device(self):
        devices = models.Device.__table__
        with self.db.engine.connect() as connection:
            return connection.execute(sa.select(devices)).one()

    def reserved(self):
        """{resource class: (reserved, total)} of the H100's provider."""
        _, inventories = self.placement.client().get_inventories(
            self.rp_uuid)
        return {rc: (i['reserved'], i['total'])
                for rc, i in inventories.items()}

    def release(self):
        return self.health.release_quarantines(self.context)

    def age_health(self, seconds):
        devices = models.Device.__table__
        with self.db.engine.begin() as connection:
            connection.execute(devices.update().values(
                health_updated_at=models.utcnow()
                - datetime.timedelta(seconds=seconds)))

    # What a fault does to sysfs.

    def write(self, name, text):
        with open(os.path.join(self.device_dir, name), 'w') as f:
            f.write(text)


FREE, RESERVED = {'PGPU': (0, 1)}, {'PGPU': (1, 1)}
# An admin reading devices at the microversion that shows health.
API_ADMIN = {'X-Roles': 'admin,reader', 'X-Project-Id': 'admin-project',
             'OpenStack-API-Version': 'accelerator 2.5'}


@pytest.fixture
def rig(conf, db, placement, h100_tree, recorded_nvml):  # noqa: F811
    recorded_nvml()
    conductor_rpc.use_fake_transport(conf, timeout=20)
    conf.set_override('host', HOST)
    create_compute_node(placement.adapter(), HOST)
    with contextlib.ExitStack() as stack:
        rig = Rig(conf, db, placement, h100_tree, stack)
        # No AER counter in the recording (a VM); as a host shows them.
        for name in ('aer_dev_fatal', 'aer_dev_nonfatal'):
            rig.write(name, 'DLP 0\nTOTAL_ERR 0\n')
        rig.report()
        yield rig


def fatal_aer(rig):
    rig.write('aer_dev_fatal', 'DLP 1\nTOTAL_ERR 1\n')


def unbind_driver(rig):
    os.unlink(os.path.join(rig.device_dir, 'driver'))


def remove_device(rig):
    shutil.rmtree(rig.device_dir)


def retrain_narrower(rig):
    rig.write('current_link_width', '8\n')


@pytest.mark.parametrize('fault, state, reason', [
    (fatal_aer, 'unhealthy', 'PCIe AER fatal errors on 0000:00:06.0: '
                             'DLP +1'),
    (unbind_driver, 'unhealthy', 'kernel driver nvidia was unbound from '
                                 '0000:00:06.0'),
    (remove_device, 'unhealthy', '0000:00:06.0 is gone from the PCI bus'),
    (retrain_narrower, 'degraded', 'PCIe link of 0000:00:06.0 trained at '
                                   'x8, below its maximum x16'),
], ids=['fatal-aer', 'driver-unbound', 'gone', 'link-narrower'])
def test_a_fault_reaches_the_database_and_placement(
        rig, api, tmp_path, fault, state, reason):
    rig.heartbeat()  # the baseline of the AER counters
    before = rig.device()
    assert (before.health, before.health_reason) == ('healthy',
                                                     'no problem seen')
    assert rig.reserved() == FREE
    shutil.copytree(rig.device_dir, tmp_path / 'saved', symlinks=True)

    fault(rig)
    seen = rig.heartbeat()

    assert seen['health'] == {H100: {'state': state, 'reason': reason}}
    row = rig.device()
    assert (row.health, row.health_reason) == (state, reason)
    shown = api.get('/v2/devices/%s' % row.uuid, headers=API_ADMIN).json
    assert (shown['health'], shown['health_reason']) == (state, reason)
    assert row.health_updated_at >= before.health_updated_at
    unhealthy = state == 'unhealthy'
    assert row.quarantined is unhealthy
    assert rig.reserved() == (RESERVED if unhealthy else FREE)

    # Repaired: healthy again, still quarantined for the hold-down.
    shutil.rmtree(rig.device_dir, ignore_errors=True)
    shutil.copytree(tmp_path / 'saved', rig.device_dir, symlinks=True)
    rig.heartbeat()
    rig.report()
    row = rig.device()
    assert (row.health, row.quarantined) == ('healthy', unhealthy)
    assert rig.reserved() == (RESERVED if unhealthy else FREE)
    assert rig.release() == {}

    rig.age_health(HOLD_DOWN + 1)
    assert rig.release() == ({HOST: 1} if unhealthy else {})
    assert not rig.device().quarantined
    assert rig.reserved() == FREE


def test_unchanged_heartbeats_write_one_statement(rig, sql_counter,
                                                  db_writes):
    rig.heartbeat()
    sql_counter.reset()
    db_writes.reset()
    seen = rig.heartbeat()
    assert len(sql_counter) == 1, sql_counter.statements
    assert db_writes.tables() == [('UPDATE', 'services')]
    usage = seen['usage'][H100]
    assert usage['observed_at'] == rig.agent.last_observations[
        H100].observed_at
    with rig.db.engine.connect() as connection:
        agent_row = connection.execute(
            sa.select(models.Service.__table__)).one()
    assert agent_row.usage == {H100: usage}
    assert agent_row.usage_at == datetime.datetime.fromtimestamp(
        int(usage['observed_at']), datetime.timezone.utc).replace(
        tzinfo=None)

    # A restarted conductor reads the host's health once.
    rig.start_conductor()
    sql_counter.reset()
    rig.heartbeat()
    assert len(sql_counter) == 2, sql_counter.statements
    sql_counter.reset()
    rig.heartbeat()
    assert len(sql_counter) == 1, sql_counter.statements

    # A change: the device and, with its quarantine, the news for
    # Placement in one transaction; then the sync records itself.
    db_writes.reset()
    fatal_aer(rig)
    rig.heartbeat()
    assert db_writes.writes == [('UPDATE', 'services'),
                                ('UPDATE', 'devices'),
                                ('UPDATE', 'host_sync_states'),
                                ('UPDATE', 'host_sync_states')]


def test_ignore_override_holds_across_reports_heartbeats_and_restarts(
        rig):
    rig.heartbeat()
    assert override_db.set_override(rig.context, rig.device().uuid,
                                  'ignore').hostname == HOST
    fatal_aer(rig)
    rig.heartbeat()
    row = rig.device()
    assert (row.health, row.quarantined) == ('unhealthy', False)
    assert rig.reserved() == FREE

    rig.report()
    rig.heartbeat()
    rig.start_conductor()
    rig.heartbeat()
    fatal_aer_again(rig)
    rig.heartbeat()
    assert rig.sync.reconcile(rig.context)[HOST]['status'] == 'synced'
    row = rig.device()
    assert (row.health, row.quarantined, row.health_override) == (
        'unhealthy', False, 'ignore')
    assert rig.reserved() == FREE


def fatal_aer_again(rig):
    rig.write('aer_dev_fatal', 'DLP 2\nTOTAL_ERR 2\n')


def test_quarantine_override_holds_across_reports_heartbeats_and_restarts(
        rig):
    rig.heartbeat()
    assert override_db.set_override(rig.context, rig.device().uuid,
                                  'quarantine').hostname == HOST
    # The conductor's retry pass syncs the host the override left behind.
    assert rig.sync.retry_pending(rig.context)[HOST]['status'] == 'synced'
    assert rig.reserved() == RESERVED

    rig.heartbeat()
    rig.report()
    rig.age_health(HOLD_DOWN + 1)
    assert rig.release() == {}
    rig.start_conductor()
    rig.heartbeat()
    rig.report()
    assert rig.sync.reconcile(rig.context)[HOST]['status'] == 'synced'
    row = rig.device()
    assert (row.health, row.quarantined, row.health_override) == (
        'healthy', False, 'quarantine')
    assert rig.reserved() == RESERVED

    # Given back to health: the device is healthy, so it is free.
    override_db.set_override(rig.context, row.uuid, None)
    rig.sync.retry_pending(rig.context)
    assert rig.reserved() == FREE


def test_a_heartbeat_handled_after_a_newer_one_changes_nothing(rig):
    seen = rig.heartbeat()
    observed = seen['usage'][H100]['observed_at']
    fault = {H100: {'state': 'unhealthy', 'reason': 'fatal'}}

    # Sent before the one just handled, it waited on the bus: its fault
    # is older news than the newer heartbeat's health.
    late = rig.health.heartbeat(
        rig.context, HOST, health=fault,
        usage={H100: dict(seen['usage'][H100], observed_at=observed - 30)})

    assert late == []
    row = rig.device()
    assert (row.health, row.quarantined) == ('healthy', False)
    [agent] = agent_rows(rig.db)
    assert agent.usage[H100]['observed_at'] == observed

    # The same fault observed later is recorded.
    rig.health.heartbeat(
        rig.context, HOST, health=fault,
        usage={H100: dict(seen['usage'][H100], observed_at=observed + 30)})
    assert rig.device().health == 'unhealthy'


class OwnsNothing:
    """The ring as a conductor sees it that owns none of the hosts."""

    def owns(self, hostname):
        return False


def agent_rows(db):
    with db.engine.connect() as connection:
        return connection.execute(
            sa.select(models.Service.__table__)).all()


def test_stale_malformed_and_foreign_heartbeats(admin_context, db, caplog,
                                                sql_counter):
    monitor = health_module.DeviceHealth(None, down_after=30)
    healthy = {H100: {'state': 'healthy', 'reason': 'ok'}}
    # Queued for a conductor that was down: newer ones went elsewhere.
    monitor.heartbeat(admin_context, HOST, health=healthy,
                      sent_at=time.time() - 31)
    assert agent_rows(db) == []

    monitor.heartbeat(admin_context, HOST, usage='junk',
                      health={H100: {'state': 'on fire'}, '0000:01:00.0': 3})
    [row] = agent_rows(db)
    assert row.usage is None
    assert ("The heartbeat of agent %s has health that is not" % HOST
            in caplog.text)

    # A host this conductor does not own is its owner's to write: not
    # even read here.
    foreign = health_module.DeviceHealth(None, OwnsNothing(), down_after=30)
    sql_counter.reset()
    assert foreign.heartbeat(admin_context, HOST, health=healthy) == []
    assert foreign.record(admin_context, HOST, {H100: ('unhealthy',
                                                       'x')}) == []
    assert len(sql_counter) == 0, sql_counter.statements
