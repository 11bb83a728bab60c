"""Applied device configuration given again when the agent starts after a
host reboot.

The rig of ``test_device_config_rollout`` (API, conductor endpoints and
rollout, agents over a real RabbitMQ and a real Placement, the shipped
playbooks run by the privileged side's ``playbook.run`` in the test
process) with one host that holds the recorded X710 and H100 (whose VFs
take a vGPU type themselves), served by the NIC and NVIDIA drivers. The
rollout applies a vGPU type to the H100 and 8 VFs to the X710; the test
then plays the reboot (no VFs on the X710, no type on any H100 VF) and
starts a new agent on the same database. What the host holds when its
first report leaves must be what the policies applied.
"""

import contextlib
import os

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.accelerator.drivers.nic import intel
from cyborg.agent import manager as agent_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.db.api import device_health as health_db
from cyborg.privsep import playbook
from tests.functional.api.test_device_config_policies import ADMIN
from tests.functional.api.test_device_config_policies import POLICIES
from tests.functional.conductor import test_device_config_rollout as rollout
from tests.functional.conductor.test_reboot_restore import Watched
from tests.functional.conductor.test_reboot_restore import wait_for
from tests.functional.services.conftest import vhost_url  # noqa: F401
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

# Read-only SQL of the rollout's own (its query runs on every engine in
# the rollout's tests): one engine is enough here.
pytestmark = pytest.mark.parametrize('database_url', ['sqlite'],
                                     indirect=True)

HOST = 'restart-host'
PF = hosts.X710_P0.bdf
H100 = hosts.H100.bdf
H100_VFS = [vf.bdf for vf in hosts.H100_VFS]
H100_20C = 'nvidia-%d' % hosts.H100_20C[0]
# The X710's VFs: 18:02.0 on, at the PF's routing id + 16.
VF_OFFSET = 16
FUNCTIONS = ([f for f in hosts.IO_HOST
              if f.bdf in (PF, hosts.X710_P0.parent)]
             + hosts.X710_P0_VFS
             + [f for f in hosts.H100_HOST
                if f.bdf in (H100, hosts.H100.parent)]
             + hosts.H100_VFS)


class Kernel:
    """Runs the playbooks against the tree at ``root`` and makes the VFs
    that a write to the X710's ``sriov_numvfs`` asks for; ``runs`` lists
    (pair, action) of each run."""

    def __init__(self, root):
        self.root = root
        self.runs = []

    def path(self, bdf, name):
        return os.path.join(self.root, 'sys/bus/pci/devices', bdf, name)

    def follow(self, pair, action, variables):
        self.runs.append((pair, action))
        result = playbook.run(pair, action, variables, False, self.root,
                              timeout=120)
        written = self.read(PF, 'sriov_numvfs')
        if pair == 'sriov_vfs' and written is not None:
            self.make_vfs(int(written))
        return result

    def numvfs_file(self):
        return self.path(PF, 'sriov_numvfs')

    def read(self, bdf, name):
        """What the file holds; None if it cannot be read."""
        try:
            with open(self.path(bdf, name)) as f:
                return f.read().strip()
        except OSError:
            return None

    def write(self, bdf, name, text):
        with open(self.path(bdf, name), 'w') as f:
            f.write(text + '\n')

    def make_vfs(self, count):
        sysfs.kernel_makes_vfs(self.root, hosts.X710_P0, count, '154c',
                               'iavf', VF_OFFSET)

    def held(self):
        """(the X710's VF count and VFs, the type of each H100 VF)."""
        pf = os.path.realpath(os.path.join(self.root, 'sys/bus/pci/devices',
                                           PF))
        vfs = sorted(e for e in os.listdir(pf) if e.startswith('virtfn'))
        return ((self.read(PF, 'sriov_numvfs'), len(vfs)),
                [self.read(vf, 'nvidia/current_vgpu_type')
                 for vf in H100_VFS])

    def reboot(self, h100_offers=True):
        """The host restarts: no VFs on the X710, no type on the H100's
        VFs, each of which can take the H100's types again (none, with
        ``h100_offers`` False)."""
        self.make_vfs(0)
        self.write(PF, 'sriov_numvfs', '0')
        offered = hosts.H100_10C, hosts.H100_20C
        for vf in H100_VFS:
            self.write(vf, 'nvidia/current_vgpu_type', '0')
            self.write(vf, 'nvidia/creatable_vgpu_types', '\n'.join(
                ['ID : vGPU Name'] + ['%d : %s' % t for t in offered
                                      if h100_offers]))


class Host:
    """The host's tree, its kernel and the agent that runs now."""

    def __init__(self, rig, root):
        self.rig = rig
        self.root = root
        self.kernel = Kernel(root)
        self.conf = rollout.arq_stack_conf(rig.conf, HOST)
        self.agent = self.conductor = None

    def start_agent(self):
        """A new agent process: its own drivers and client."""
        self.rig.stop_agents()
        self.conductor = Watched(conductor_rpcapi.ConductorAPI(
            self.rig.transport, timeout=30,
            version_cap=self.conf.upgrade_levels.conductor),
            self.kernel.held)
        reader = pci.PCIReader(self.root)
        self.agent = agent_manager.AgentManager(
            self.conf, [intel.IntelNICDriver(self.conf, reader),
                        nvidia.NvidiaGPUDriver(self.conf, reader)],
            conductor=self.conductor,
            candidates=[(HOST, 'the configured host')], glance=None,
            run_playbook=self.kernel.follow)
        self.rig.agents[HOST] = self.agent
        self.rig.start_agent(HOST)
        return self.agent

    def first_report(self):
        """The first report of an agent started again, and the host when
        it left."""
        agent = self.start_agent()
        assert agent.config_restore.pending
        assert agent.report_inventory() is not None, 'the report failed'
        seen, = self.conductor.reports
        assert not agent.config_restore.pending
        return seen

    def health(self):
        """{PCI address: (health, reason, quarantined)} in the database."""
        with self.rig.db.engine.connect() as connection:
            return {address: (row.health, row.health_reason,
                              row.quarantined)
                    for address, row in health_db.read_host(
                        connection, HOST).items()}


def policy(api, name, kind, devices, settings):
    return api.post_json(POLICIES, {
        'name': name, 'kind': kind, 'devices': devices,
        'settings': settings}, headers=ADMIN).json


def states(db):
    with db.engine.connect() as connection:
        return sorted(connection.execute(
            sa.select(models.DeviceConfigStatus.state,
                      models.DeviceConfigStatus.applied_settings)).all(),
            key=str)


APPLIED = sorted([('applied', {'mdev_type': H100_20C}),
                  ('applied', {'num_vfs': 8})], key=str)


@pytest.fixture
def host(conf, db, tmp_path, placement, vhost_url,  # noqa: F811
         admin_context):
    """The host with both policies applied by the rollout."""
    with contextlib.ExitStack() as stack:
        rig = rollout.Rig(conf, db, tmp_path, placement, stack, vhost_url)
        root = str(tmp_path / HOST)
        sysfs.build(root, FUNCTIONS)
        create_compute_node(placement.adapter(), HOST)
        made = Host(rig, root)
        made.start_agent().report_inventory()
        # The vGPU type's row first: the restore orders by kind.
        policy(rig.api, 'h100-20c', 'vgpu_type',
               {'vendor_id': '10de', 'pci_addresses': [H100]},
               {'mdev_type': H100_20C})
        policy(rig.api, 'eight-vfs', 'sriov_vfs',
               {'vendor_id': '8086', 'pci_addresses': [PF]}, {'num_vfs': 8})
        rig.rollout.run_pass(admin_context)
        assert states(db) == APPLIED
        assert made.kernel.held() == (('8', 8), ['1062'] * 3)
        made.kernel.runs.clear()
        yield made


def test_a_reboot_gets_the_applied_settings_back_before_the_first_report(
        host, db, placement):  # noqa: F811
    host.kernel.reboot()
    assert host.kernel.held() == (('0', 0), ['0'] * 3)

    seen = host.first_report()

    # When the report left: 8 VFs again, each H100 VF of the type; the
    # VFs made before the vGPU type was given.
    assert seen == (('8', 8), ['1062'] * 3)
    assert host.kernel.runs == [('sriov_vfs', 'setup'),
                                ('vgpu_type', 'setup')]
    assert states(db) == APPLIED
    # The report carried the VFs: Placement offers the 8 of them.
    assert rollout.nic_inventory(placement.adapter(), HOST) == (8, 0)
    observed = host.agent.observe()
    assert observed[PF].state == health.HEALTHY, observed[PF]


def test_an_agent_restart_without_a_reboot_runs_no_playbook(host, db):
    seen = host.first_report()

    assert seen == (('8', 8), ['1062'] * 3)
    assert host.kernel.runs == []
    assert states(db) == APPLIED


def test_an_agent_pinned_below_the_question_restores_nothing(host, caplog):
    host.conf.set_override('conductor', '1.6', group='upgrade_levels')
    host.kernel.reboot()

    seen = host.first_report()

    assert seen == (('0', 0), ['0'] * 3)
    assert host.kernel.runs == []
    assert ('applied_configs_of_host needs conductor RPC API 1.7, but '
            '[upgrade_levels] conductor = 1.6 pins it lower') in caplog.text


def test_settings_that_cannot_be_applied_again_quarantine_the_device(
        host, db):
    host.kernel.reboot()
    # The kernel no longer shows the X710's count: its file is not
    # readable.
    os.unlink(host.kernel.numvfs_file())
    os.mkdir(host.kernel.numvfs_file())

    seen = host.first_report()

    # The H100 is back all the same.
    assert seen == ((None, 0), ['1062'] * 3)
    why = ("device configuration sriov_vfs {'num_vfs': 8} applied before "
           "the host restarted could not be applied again: Read the VF "
           "count: ")
    observed = host.agent.observe()
    assert observed[PF].state == health.UNHEALTHY
    assert why in observed[PF].reason
    assert observed[H100].state != health.UNHEALTHY

    # The heartbeat's health reaches the conductor: the X710 alone is
    # quarantined, with the reason.
    assert host.agent.heartbeat()
    stored = wait_for(host.health, lambda found: found.get(PF, ('',))[0]
                      == health.UNHEALTHY, timeout=30)
    _, reason, quarantined = stored[PF]
    assert quarantined and why in reason
    assert not stored[H100][2]
    assert states(db) == APPLIED
