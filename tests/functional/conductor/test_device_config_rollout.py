"""Device configuration from policy to hardware, on each database engine:
the API stores an SR-IOV policy, the conductor's rollout drains the PF
in a real Placement, the agent runs the shipped playbooks with the real
ansible-runner (the privileged side's ``playbook.run``, checks and all,
in the test process, each host against a tree of its own: a copy of the
recorded X710), discovers again and reports.

The kernel is played by ``Kernel``: after each playbook run it makes the
VFs that ``sriov_numvfs`` asks for, as the i40e driver would, and records
what the file held after each run and what Placement offered of the PF
meanwhile. ``BindingKernel`` plays its part in a driver binding instead,
as the playbook runs.
"""

import contextlib
import os
import shutil

import pytest
import sqlalchemy as sa
import webtest

from cyborg import rpc
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.nic import intel
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.api import app as api_app
from cyborg.conductor import device_config
from cyborg.conductor import host_sync
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.privsep import playbook
from tests import arq_stack
from tests.conftest import make_conf
from tests.functional.api.test_device_config_policies import ADMIN
from tests.functional.api.test_device_config_policies import POLICIES
from tests.functional.services.conftest import vhost_url  # noqa: F401
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

HOST = 'io-host'
PF = hosts.X710_P0.bdf
_PORT = [f for f in hosts.IO_HOST if f.bdf == hosts.X710_P0.parent]


def functions(num_vfs):
    """The PF with ``num_vfs`` VFs, as the kernel shows them."""
    vfs = sysfs.virtual_functions(
        hosts.X710_P0, '154c', ['0000:18:02.%d' % n for n in range(num_vfs)],
        driver='iavf')
    return _PORT + [hosts.X710_P0, *vfs]


class Kernel:
    """The tree at ``root`` follows what the playbooks write."""

    def __init__(self, root, placement_client, rig, host):
        self.root = root
        self.placement = placement_client
        self.rig = rig
        self.host = host
        self.numvfs_after = []  # (action, what sriov_numvfs held)
        self.offered_while_applying = []  # (total, reserved) of the PF

    def numvfs_file(self):
        return os.path.join(self.root, 'sys/bus/pci/devices', PF,
                            'sriov_numvfs')

    def build(self, num_vfs):
        shutil.rmtree(os.path.join(self.root, 'sys'), ignore_errors=True)
        sysfs.build(self.root, functions(num_vfs))

    def follow(self, pair, action, variables):
        self.offered_while_applying.append(nic_inventory(self.placement,
                                                         self.host))
        self.rig.timeline.append((self.host, action, self.rig.rolling()))
        result = playbook.run(pair, action, variables, False, self.root,
                              timeout=120)
        try:
            with open(self.numvfs_file()) as f:
                written = f.read().strip()
        except OSError:  # a test broke the file on purpose
            self.numvfs_after.append((action, None))
            return result
        self.numvfs_after.append((action, written))
        self.build(int(written))
        return result


class BindingKernel(Kernel):
    """Binds functions as the playbook writes (``sysfs.Binder``);
    ``writes`` holds (action, what it was asked in order) of each run."""

    def __init__(self, *args):
        super().__init__(*args)
        self.writes = []

    def follow(self, pair, action, variables):
        own = {f.bdf: f.driver for f in functions(4)}
        with sysfs.Binder(self.root, own) as binder:
            result = playbook.run(pair, action, variables, False,
                                  self.root, timeout=120)
        self.writes.append((action, binder.writes))
        return result


def nic_inventory(placement_client, host=HOST):
    """(total, reserved) of the CUSTOM_NIC provider of ``host``'s PF;
    None if there is none."""
    compute = placement_client.get('/resource_providers', params={
        'name': host}).json()['resource_providers'][0]['uuid']
    for rp in placement_client.get(
            '/resource_providers', params={'in_tree': compute},
            microversion='1.14').json()['resource_providers']:
        inventory = placement_client.get(
            '/resource_providers/%s/inventories' % rp['uuid']).json()[
                'inventories']
        if 'CUSTOM_NIC' in inventory:
            nic = inventory['CUSTOM_NIC']
            return nic['total'], nic['reserved']
    return None


class Rig:
    """The API, the conductor's endpoints and rollout, and the agent of
    each host (a tree of its own, with the X710 PF) talking over a real
    RabbitMQ (the virtual host ``transport_url``), over a real
    Placement."""

    def __init__(self, conf, db, tmp_path, placement,  # noqa: F811
                 stack, transport_url):
        self.conf = conf
        self.db = db
        self.tmp_path = tmp_path
        self.placement = placement
        self.stack = stack
        self.timeline = []  # (host, action, hosts rolling at the time)
        self.transport = stack.enter_context(
            arq_stack.rabbit_transport(conf, transport_url))
        client = placement.client()
        stack.enter_context(arq_stack.serving_conductor(
            self.transport, db, placement_client=client, layout='pooled'))
        self.rollout = device_config.Rollout(
            host_sync.HostSync(client, layout='pooled'),
            agent_rpcapi.AgentAPI(self.transport, timeout=60,
                                  config_timeout=120), drain_hosts=1)
        self.api = webtest.TestApp(api_app.build_app(conf, db))
        self.agents = {}
        self.rpc_servers = []
        stack.callback(self.stop_agents)

    def add_host(self, host, kernel_class=Kernel):
        root = str(self.tmp_path / host)
        os.mkdir(root)
        kernel = kernel_class(root, self.placement.adapter(), self, host)
        kernel.build(4)
        create_compute_node(self.placement.adapter(), host)
        conf = arq_stack_conf(self.conf, host)
        agent = agent_manager.AgentManager(
            conf, [intel.IntelNICDriver(conf, pci.PCIReader(root))],
            conductor=conductor_rpcapi.ConductorAPI(self.transport),
            candidates=[(host, 'the configured host')], glance=None,
            run_playbook=kernel.follow)
        self.agents[host] = agent
        self.start_agent(host)
        agent.report_inventory()
        return kernel

    def start_agent(self, host):
        server = rpc.get_server(self.transport, rpc.AGENT_TOPIC, host,
                                [self.agents[host]])
        server.start()
        self.rpc_servers.append(server)

    def stop_agents(self):
        """Every agent stops answering (a killed agent)."""
        for server in self.rpc_servers:
            server.stop()
            server.wait()
        self.rpc_servers.clear()

    def rolling(self):
        """The hosts whose PF is draining or applying now."""
        with self.db.engine.connect() as connection:
            return sorted(connection.execute(
                sa.select(models.Device.hostname).join(
                    models.DeviceConfigStatus,
                    models.DeviceConfigStatus.device_id == models.Device.id)
                .where(models.DeviceConfigStatus.state.in_(
                    ('draining', 'applying')))).scalars())


def arq_stack_conf(conf, host):
    """``conf`` for the agent of ``host``: its own host name, the PF's
    port mapped to a physical network."""
    agent_conf = make_conf(conf.database.connection, host=host)
    agent_conf.set_override('physical_device_mappings', ['physnet1:eth2'],
                            group='intel_nic')
    return agent_conf


@pytest.fixture
def rig(conf, db, tmp_path, placement, vhost_url):  # noqa: F811
    """The ``Rig`` with one host, HOST; its kernel is ``rig.kernel``."""
    with contextlib.ExitStack() as stack:
        made = Rig(conf, db, tmp_path, placement, stack, vhost_url)
        made.kernel = made.add_host(HOST)
        yield made


def status(api, policy_uuid):
    rows = api.get('%s/%s/status' % (POLICIES, policy_uuid),
                   headers=ADMIN).json['status']
    assert len(rows) == 1, rows
    return rows[0]


def handles(db):
    with db.engine.connect() as connection:
        return connection.execute(
            sa.select(models.AttachHandle.id, models.AttachHandle.in_use)
            .order_by(models.AttachHandle.id)).all()


def set_in_use(db, handle_id, in_use):
    with db.engine.begin() as connection:
        connection.execute(sa.update(models.AttachHandle).where(
            models.AttachHandle.id == handle_id).values(in_use=in_use))


def create_policy(api, name='eight-vfs', num_vfs=8):
    return api.post_json(POLICIES, {
        'name': name, 'kind': 'sriov_vfs',
        'devices': {'vendor_id': '8086', 'product_id': '1572',
                    'pci_addresses': [PF]},
        'settings': {'num_vfs': num_vfs}}, headers=ADMIN).json


def test_a_vf_policy_drains_waits_for_the_vf_in_use_and_applies(
        rig, db, admin_context, placement):  # noqa: F811
    api, rollout, kernel = rig.api, rig.rollout, rig.kernel
    assert nic_inventory(placement.adapter()) == (4, 0)
    in_use = handles(db)[0].id
    set_in_use(db, in_use, True)

    made = create_policy(api)
    assert status(api, made['uuid'])['state'] == 'pending'

    rollout.run_pass(admin_context)

    # Drained: Nova can place nothing more on the PF, and the VF in use
    # keeps it from being touched.
    assert status(api, made['uuid'])['state'] == 'draining'
    assert nic_inventory(placement.adapter()) == (4, 4)
    rollout.run_pass(admin_context)
    assert status(api, made['uuid'])['state'] == 'draining'
    assert kernel.numvfs_after == []

    set_in_use(db, in_use, False)
    rollout.run_pass(admin_context)

    row = status(api, made['uuid'])
    assert row['state'] == 'applied', row
    assert row['applied_settings'] == {'num_vfs': 8}
    assert kernel.numvfs_after == [('setup', '8')]
    # Reserved the whole time the playbook ran.
    assert kernel.offered_while_applying == [(4, 4)]
    # The 8 VFs are the PF's handles, and Placement offers them.
    assert len(handles(db)) == 8
    assert nic_inventory(placement.adapter()) == (8, 0)

    # Applied: the next pass changes nothing.
    rollout.run_pass(admin_context)
    assert kernel.numvfs_after == [('setup', '8')]

    # To 4: the teardown takes the VFs to 0, the setup makes 4.
    api.patch_json('%s/%s' % (POLICIES, made['uuid']),
                   {'settings': {'num_vfs': 4}}, headers=ADMIN)
    rollout.run_pass(admin_context)

    assert status(api, made['uuid'])['state'] == 'applied'
    assert kernel.numvfs_after[1:] == [('teardown', '0'), ('setup', '4')]
    assert kernel.offered_while_applying[1:] == [(8, 8), (8, 8)]
    assert len(handles(db)) == 4
    assert nic_inventory(placement.adapter()) == (4, 0)


def test_two_hosts_with_one_draining_at_a_time_are_done_in_turn(
        rig, admin_context, placement):  # noqa: F811
    other = rig.add_host('io-host-2')
    made = create_policy(rig.api)

    rig.rollout.run_pass(admin_context)

    rows = rig.api.get('%s/%s/status' % (POLICIES, made['uuid']),
                       headers=ADMIN).json['status']
    assert [r['state'] for r in rows] == ['applied', 'applied']
    # Each host applied while it alone was rolling.
    assert rig.timeline == [(HOST, 'setup', [HOST]),
                            ('io-host-2', 'setup', ['io-host-2'])]
    assert other.numvfs_after == [('setup', '8')]
    assert nic_inventory(placement.adapter(), 'io-host-2') == (8, 0)


def test_a_failed_playbook_leaves_the_device_out_with_its_task_named(
        rig, admin_context, placement):  # noqa: F811
    api, rollout, kernel = rig.api, rig.rollout, rig.kernel
    # The kernel refuses to show the count: its file is not readable.
    os.unlink(kernel.numvfs_file())
    os.mkdir(kernel.numvfs_file())

    made = create_policy(api)
    rollout.run_pass(admin_context)

    row = status(api, made['uuid'])
    assert row['state'] == 'failed', row
    assert row['failed_task'] == 'Read the VF count'
    assert 'cannot read' in row['message']
    assert row['applied_settings'] is None
    # Out of scheduling until the operator acts.
    assert nic_inventory(placement.adapter()) == (4, 4)
    rollout.run_pass(admin_context)
    assert status(api, made['uuid'])['state'] == 'failed'


class _Owns:
    """A ring membership that owns the hosts named."""

    def __init__(self, *hosts):
        self.hosts = hosts

    def owns(self, host):
        return host in self.hosts


# One engine: the query that finds the new device is plain; the policy
# lock it takes is that of the policy writes, tested on every engine.
@pytest.mark.parametrize('database_url', ['mysql'], indirect=True)
def test_a_host_enrolled_after_the_policy_is_configured_by_its_owner(
        rig, admin_context, placement):  # noqa: F811
    made = create_policy(rig.api)
    rig.rollout.run_pass(admin_context)
    later = rig.add_host('io-host-3')
    item = '%s/%s/status' % (POLICIES, made['uuid'])
    assert len(rig.api.get(item, headers=ADMIN).json['status']) == 1

    # A conductor that does not own the new host leaves it alone.
    rig.rollout.run_pass(admin_context, _Owns(HOST))
    assert len(rig.api.get(item, headers=ADMIN).json['status']) == 1

    rig.rollout.run_pass(admin_context, _Owns(HOST, 'io-host-3'))

    rows = rig.api.get(item, headers=ADMIN).json['status']
    assert sorted((r['hostname'], r['state']) for r in rows) == [
        (HOST, 'applied'), ('io-host-3', 'applied')]
    assert later.numvfs_after == [('setup', '8')]
    assert nic_inventory(placement.adapter(), 'io-host-3') == (8, 0)


# The rollout is the same for every kind: one engine is enough here.
@pytest.mark.parametrize('database_url', ['sqlite'], indirect=True)
def test_a_driver_binding_is_rolled_out(conf, db, tmp_path, admin_context,
                                        placement, vhost_url):  # noqa: F811
    with contextlib.ExitStack() as stack:
        rig = Rig(conf, db, tmp_path, placement, stack, vhost_url)
        kernel = rig.add_host(HOST, BindingKernel)
        made = rig.api.post_json(POLICIES, {
            'name': 'pf-passthrough', 'kind': 'driver_binding',
            'devices': {'vendor_id': '8086', 'product_id': '1572',
                        'pci_addresses': [PF]},
            'settings': {'driver': 'vfio-pci'}}, headers=ADMIN).json

        rig.rollout.run_pass(admin_context)

        row = status(rig.api, made['uuid'])
        assert row['state'] == 'applied', row
        assert row['applied_settings'] == {'driver': 'vfio-pci'}
        assert kernel.writes == [('setup', [
            ('driver_override', 'vfio-pci'), ('i40e/unbind', PF),
            ('drivers_probe', PF)])]
        assert os.path.basename(os.readlink(os.path.join(
            kernel.root, 'sys/bus/pci/devices', PF, 'driver'))) == 'vfio-pci'
        # Released once applied.
        assert nic_inventory(placement.adapter()) == (4, 0)

        rig.rollout.run_pass(admin_context)
        assert len(kernel.writes) == 1
