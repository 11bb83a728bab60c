"""A host with three kinds of bind, rebooted: each comes back as it was
before the agent's first report.

One GPU host built from both recorded hosts: the T4 given whole to VMs
(bound to vfio-pci, offered from a pooled provider), the A100 handing out
vGPUs on its VFs, and the H100 making MIG instances on demand (the NVML
stand-in with its MIG behaviour). API, conductor and agent share the
in-process transport; the conductor syncs the host to a real Placement
in the ``pooled`` layout; the agent's privileged calls run in the test
process, with a kernel stand-in that makes the mdev written to a
``create`` file. One ARQ of each kind is bound; the host then reboots
(mdevs and MIG instances gone, the T4 left as it was) and a new agent
starts on the same database. What the host holds when its first report
leaves is what the three binds need.

The subject is the agent, not SQL: one engine.
"""

import contextlib
import dataclasses
import errno
import glob
import os
import shutil
import time
import uuid

import pynvml
import pytest
import sqlalchemy as sa

from cyborg import rpc
from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import host_sync
from cyborg.conductor import placement_sync
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conf import gpu_devices
from cyborg.db import models
from cyborg.db.api import device_health as health_db
from cyborg.privsep import checks
from cyborg.privsep import mdev as privsep_mdev
from cyborg.privsep import mig as privsep_mig
from tests import arq_stack
from tests.arq_stack import ARQS
from tests.conftest import database_url_on
from tests.placement_service import create_compute_node
from tests.unit.agent.test_attach_handles import mdev_type_dir
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

database_url = database_url_on('sqlite')

HOST = 'gpu-host'
T4 = hosts.T4.bdf
A100 = hosts.A100.bdf
H100 = hosts.H100.bdf
VGPU_TYPE = 'nvidia-472'
# The A100's VF at af:00.5 holds an mdev made outside Cyborg, its one
# instance taken: the two free VFs hand out vGPUs.
VFS = ['0000:af:00.4', '0000:af:00.6']
MIG_PROFILE = '3g.40gb'
MIG_MEMORY_SLICES = 4  # the size of its placement
PROFILES = {
    'vgpu': [{'resources:VGPU': '1'}],
    'mig': [{'resources:CUSTOM_MIG_COMPUTE_SLICE': '3',
             'resources:CUSTOM_MIG_MEMORY_SLICE': str(MIG_MEMORY_SLICES),
             'trait:CUSTOM_MIG_PROFILE_3G_40GB': 'required'}],
    'gpu': [{'resources:PGPU': '1'}],
}
RESOURCE_CLASS = {'vgpu': 'VGPU', 'mig': 'CUSTOM_MIG_COMPUTE_SLICE',
                  'gpu': 'PGPU'}


def host_functions():
    """The T4 and the A100 with its VFs of the GPU host, the H100 of the
    H100 host, each below its root port. The T4 is on vfio-pci since
    boot, as a GPU given whole to VMs is: no vGPU types, no mdevs."""
    t4 = dataclasses.replace(hosts.T4, driver='vfio-pci', mdev_types=())
    gpus = [t4 if f.bdf == T4 else f for f in hosts.GPU_HOST
            if f.bdf in (T4, hosts.T4.parent, A100, hosts.A100.parent)
            or f.physfn == A100]
    return gpus + [f for f in hosts.H100_HOST
                   if f.bdf in (H100, hosts.H100.parent)]


def _available(type_dir):
    with open(os.path.join(type_dir, 'available_instances')) as f:
        return int(f.read())


def _count_available(type_dir, change):
    count = _available(type_dir)
    with open(os.path.join(type_dir, 'available_instances'), 'w') as f:
        f.write(str(count + change))


def kernel_makes_mdevs(monkeypatch, root):
    """The kernel's answer to a UUID written to a ``create`` file: the
    mdev, and one instance fewer available; refused (EUSERS) when none
    is."""
    creating = privsep_mdev.create_mdev

    def create(pci_address, mdev_type, mdev_uuid):
        type_dir = mdev_type_dir(root, pci_address, mdev_type)
        if (os.path.isdir(type_dir) and mdev_uuid not in mdevs(root)
                and _available(type_dir) < 1):
            raise OSError(errno.EUSERS, os.strerror(errno.EUSERS))
        made = creating(pci_address, mdev_type, mdev_uuid)
        if made:
            sysfs.kernel_creates_mdev(root, pci_address, mdev_type)
            _count_available(type_dir, -1)
        return made

    monkeypatch.setattr(privsep_mdev, 'create_mdev', create)


def mdevs(root):
    """{mdev UUID: (parent function, type)} as the kernel shows them."""
    devices = os.path.join(root, 'sys/bus/mdev/devices')
    found = {}
    for name in os.listdir(devices):
        mdev = os.path.realpath(os.path.join(devices, name))
        found[name] = (os.path.basename(os.path.dirname(mdev)),
                       os.path.basename(os.path.realpath(
                           os.path.join(mdev, 'mdev_type'))))
    return found


def mig_instances(library):
    """{MIG UUID: (profile, start, size)}: the H100's instances, placed
    as NVML says."""
    gpu = pynvml.nvmlDeviceGetHandleByPciBusId(H100)
    found = {}
    for instance in library.instances(H100):
        info = pynvml.nvmlGpuInstanceGetInfo(
            pynvml.nvmlDeviceGetGpuInstanceById(gpu, instance.gi_id))
        for mig_uuid in instance.uuids:
            found[mig_uuid] = (instance.profile, info.placement.start,
                               info.placement.size)
    return found


def t4_files(root):
    """What the T4's function and the PCI bus's driver files hold: any
    rebind, reset or override of the T4 shows here."""
    function = os.path.realpath(os.path.join(root, 'sys/bus/pci/devices',
                                             T4))
    found = {}
    paths = [os.path.join(top, name)
             for top, dirs, files in os.walk(function)
             for name in dirs + files]
    paths += glob.glob(os.path.join(root, 'sys/bus/pci/drivers/*/*bind'))
    paths.append(os.path.join(root, 'sys/bus/pci/drivers_probe'))
    for path in paths:
        if os.path.islink(path):
            found[path] = ('link', os.readlink(path))
        elif os.path.isfile(path):
            with open(path) as f:
                found[path] = f.read()
    return found


def reboot(root, library):
    """The host restarts: every mdev and MIG instance is gone, and nothing
    was written to a ``create`` file since; the T4 is left alone."""
    devices = os.path.join(root, 'sys/bus/mdev/devices')
    for name in os.listdir(devices):
        mdev = os.path.realpath(os.path.join(devices, name))
        type_dir = os.path.realpath(os.path.join(mdev, 'mdev_type'))
        sysfs.kernel_removes_mdev(root, mdev)
        _count_available(type_dir, +1)
    for create in glob.glob(os.path.join(
            root, 'sys/class/mdev_bus/*/mdev_supported_types/*/create')):
        open(create, 'w').close()
    library.lose_instances(H100)


@dataclasses.dataclass
class Seen:
    """The host when a report left: its mdevs, MIG instances, the T4's
    files and the agent's observation ({address: (state, reason)})."""
    mdevs: dict
    migs: dict
    t4: dict
    health: dict


class Watched:
    """The agent's conductor client (the real one, over RPC to the real
    endpoint); each report first notes what the host holds."""

    def __init__(self, api, look):
        self._api = api
        self._look = look
        self.reports = []

    def report_host_inventory(self, *args, **kwargs):
        self.reports.append(self._look())
        return self._api.report_host_inventory(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._api, name)


class Rig:
    """The stack, the host and the agent of ``HOST`` as it runs now."""

    def __init__(self, conf, db, api, transport, root, library, client):
        self.conf = conf
        self.db = db
        self.api = api
        self.transport = transport
        self.root = root
        self.library = library
        self.client = client
        self.agent = self.driver = self.conductor = None
        self._server = None

    def look(self):
        return Seen(mdevs(self.root), mig_instances(self.library),
                    t4_files(self.root),
                    {address: (o.state, o.reason)
                     for address, o in self.agent.observe().items()})

    def start_agent(self):
        """A new agent process: its own driver, endpoint and client; the
        one before stops serving."""
        self.stop_agent()
        self.driver = nvidia.NvidiaGPUDriver(self.conf,
                                             pci.PCIReader(self.root))
        self.conductor = Watched(conductor_rpcapi.ConductorAPI(
            self.transport, timeout=10,
            version_cap=self.conf.upgrade_levels.conductor), self.look)
        self.agent = agent_manager.AgentManager(
            self.conf, [self.driver], self.conductor,
            candidates=[(HOST, 'the configured host')], glance=None)
        self._server = rpc.get_server(self.transport, rpc.AGENT_TOPIC, HOST,
                                      [self.agent])
        self._server.start()

    def stop_agent(self):
        if self._server is not None:
            self._server.stop()
            self._server.wait()
            self._server = None

    def rp_of(self, kind):
        with self.db.engine.connect() as connection:
            return connection.execute(
                sa.select(models.Deployable.rp_uuid).where(
                    models.Deployable.resource_class
                    == RESOURCE_CLASS[kind])).scalar_one()

    def bind(self, kind):
        return arq_stack.bind_one(self.api, kind, self.rp_of(kind),
                                  str(uuid.uuid4()), HOST)

    def get(self, arq):
        return self.api.get(ARQS + '/' + arq['uuid']).json

    def health(self):
        """{PCI address: (health, reason, quarantined)} in the database."""
        with self.db.engine.connect() as connection:
            return {address: (row.health, row.health_reason,
                              row.quarantined)
                    for address, row in health_db.read_host(
                        connection, HOST).items()}

    def heartbeat_until(self, predicate, timeout=10):
        """The agent's heartbeat (a cast), then the database's health
        once ``predicate`` holds of it."""
        assert self.agent.heartbeat()
        return wait_for(self.health, predicate, timeout)


def wait_for(read, predicate, timeout=10):
    """``read()`` once ``predicate`` holds of it: the conductor handles
    a cast on a thread of its own."""
    deadline = time.monotonic() + timeout
    while not predicate(read()):
        assert time.monotonic() < deadline, read()
        time.sleep(0.05)
    return read()


@pytest.fixture
def rig(conf, db, tmp_path, monkeypatch, admin_context, privileged_on,
        mig_nvml, placement):  # noqa: F811
    root = str(sysfs.build(str(tmp_path / 'host'), host_functions(),
                           pci_ids=hosts.PCI_IDS))
    library = mig_nvml(H100)
    # NVML sees the A100 (host driver loaded, MIG off); the T4 on
    # vfio-pci it cannot see.
    library.add_gpu(A100, mig_enabled=False)
    privileged_on(root)
    monkeypatch.setattr(privsep_mig, '_cards', {})
    kernel_makes_mdevs(monkeypatch, root)
    conf.set_override('host', HOST)
    conf.set_override('enabled_vgpu_types', [VGPU_TYPE], group='gpu_devices')
    gpu_devices.register_dynamic_opts(conf)
    conf.set_override('device_addresses', VFS, group='vgpu_' + VGPU_TYPE)
    conf.set_override('mig_on_demand_addresses', [H100],
                      group='gpu_devices')
    create_compute_node(placement.adapter(), HOST)
    client = placement.client()
    for name, groups in PROFILES.items():
        arq_stack.make_profile(admin_context, name, groups)
    with contextlib.ExitStack() as stack:
        # The privileged daemon reads its own copy of the list.
        daemon = checks.daemon_conf()
        daemon.set_override('mig_on_demand_addresses', [H100],
                            group='gpu_devices')
        stack.callback(daemon.clear_override, 'mig_on_demand_addresses',
                       group='gpu_devices')
        transport = stack.enter_context(arq_stack.fake_transport(conf))
        pooled = host_sync.HostSync(client, layout=placement_sync.POOLED)
        stack.enter_context(arq_stack.serving_conductor(
            transport, db, arq_stack.binder(
                conf, agent_rpcapi.AgentAPI(transport, timeout=10),
                sync=pooled), placement_client=client,
            layout=placement_sync.POOLED))
        api = arq_stack.webtest_app(conf, db, transport)
        rig = Rig(conf, db, api, transport, root, library, client)
        rig.start_agent()
        stack.callback(rig.stop_agent)
        # The agent's first report stores the host and syncs Placement.
        first = rig.agent.report_inventory()
        assert first['placement']['status'] == 'synced', first
        yield rig


def vf_of(arq):
    info = arq['attach_handle_info']
    return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                            info['function'])


@pytest.fixture
def bound(rig):
    """One ARQ of each kind Bound: {kind: ARQ}, and the host then."""
    # The T4 is offered from a pool, not from a provider of its own.
    pool = rig.client.get_provider(rig.rp_of('gpu'))
    assert pool['name'].startswith(HOST + '_PGPU_NUMA'), pool
    arqs = {kind: rig.bind(kind) for kind in PROFILES}
    assert {k: a['state'] for k, a in arqs.items()} == dict.fromkeys(
        PROFILES, 'Bound')
    before = rig.look()
    vgpu, mig = arqs['vgpu'], arqs['mig']['attach_handle_info']
    assert set(before.mdevs.items()) >= {(vgpu['attach_handle_uuid'], (
        vf_of(vgpu), VGPU_TYPE))}
    assert before.migs == {mig['mig_uuid']: (
        MIG_PROFILE, int(mig['start']), MIG_MEMORY_SLICES)}
    assert arqs['gpu']['attach_handle_info'] == {
        'domain': '0000', 'bus': '3b', 'device': '00', 'function': '0'}
    return arqs, before


def only_report(rig):
    """The first report of the agent started again, and the host when it
    left."""
    rig.start_agent()
    assert rig.agent.mdev_restore.pending and rig.agent.mig_restore.pending
    assert rig.agent.report_inventory() is not None, 'the report failed'
    seen, = rig.conductor.reports
    assert not rig.agent.mdev_restore.pending
    assert not rig.agent.mig_restore.pending
    return seen


def assert_mig_and_t4_as_bound(rig, arqs, before, seen):
    """The MIG instance is back where its ARQ placed it, the ARQ names
    it; the T4 and its ARQ are as they were."""
    mig = arqs['mig']['attach_handle_info']
    assert len(seen.migs) == 1, seen.migs
    [(now_uuid, placed)] = seen.migs.items()
    assert placed == before.migs[mig['mig_uuid']]
    assert placed[:2] == (mig['mig_profile'], int(mig['start']))
    assert now_uuid != mig['mig_uuid']  # a new MIG device
    recorded = rig.get(arqs['mig'])
    assert recorded['state'] == 'Bound'
    assert (recorded['attach_handle_info']['mig_uuid'],
            recorded['attach_handle_info']['mig_profile'],
            int(recorded['attach_handle_info']['start'])) == (
        now_uuid, MIG_PROFILE, int(mig['start']))

    assert seen.t4 == before.t4
    assert t4_files(rig.root) == before.t4
    gpu = rig.get(arqs['gpu'])
    assert (gpu['state'], gpu['attach_handle_uuid'],
            gpu['attach_handle_info']) == (
        'Bound', arqs['gpu']['attach_handle_uuid'],
        arqs['gpu']['attach_handle_info'])


def test_a_reboot_puts_back_the_vgpu_and_the_mig_instance_and_leaves_the_t4(
        rig, bound):
    arqs, before = bound
    reboot(rig.root, rig.library)
    assert mdevs(rig.root) == {} and mig_instances(rig.library) == {}

    seen = only_report(rig)

    # The vGPU's mdev, with its handle's UUID and type on its VF; no
    # other (the mdev no ARQ held stays gone).
    vgpu = arqs['vgpu']
    assert seen.mdevs == {vgpu['attach_handle_uuid']: (vf_of(vgpu),
                                                       VGPU_TYPE)}
    assert_mig_and_t4_as_bound(rig, arqs, before, seen)
    assert rig.get(vgpu)['state'] == 'Bound'

    assert {a: state for a, (state, _) in seen.health.items()} == \
        dict.fromkeys((T4, A100, H100), health.HEALTHY), seen.health
    stored = rig.heartbeat_until(lambda found: {
        a: state for a, (state, _, _) in found.items()} == dict.fromkeys(
        (T4, A100, H100), health.HEALTHY))
    assert not any(quarantined for _, _, quarantined in stored.values())


def test_a_vgpu_type_gone_after_the_reboot_quarantines_the_a100_only(rig,
                                                                     bound):
    arqs, before = bound
    vgpu = arqs['vgpu']
    vf = vf_of(vgpu)
    reboot(rig.root, rig.library)
    # The VF offers the type no more.
    shutil.rmtree(mdev_type_dir(rig.root, vf, VGPU_TYPE))

    seen = only_report(rig)

    assert seen.mdevs == {}
    assert_mig_and_t4_as_bound(rig, arqs, before, seen)
    why = ('mdev %s of type %s on %s could not be made again after the '
           'host restarted: %s no longer offers vGPU type %s'
           % (vgpu['attach_handle_uuid'], VGPU_TYPE, vf, vf, VGPU_TYPE))
    assert seen.health[A100][0] == health.UNHEALTHY
    assert why in seen.health[A100][1]
    assert (seen.health[T4][0], seen.health[H100][0]) == (
        health.HEALTHY, health.HEALTHY)

    # The heartbeat's health reaches the conductor: the A100 alone is
    # quarantined, with the reason, and Placement reserves its vGPUs.
    stored = rig.heartbeat_until(
        lambda found: found[A100][0] == health.UNHEALTHY)
    _, reason, quarantined = stored[A100]
    assert quarantined and why in reason
    assert {a: (s, q) for a, (s, _, q) in stored.items() if a != A100} == {
        T4: (health.HEALTHY, False), H100: (health.HEALTHY, False)}
    # The conductor syncs the host once the quarantine is written.
    wait_for(lambda: rig.client.get_inventories(rig.rp_of('vgpu'))[1][
        'VGPU'], lambda vgpus: vgpus['reserved'] == vgpus['total'])
    assert rig.get(vgpu)['state'] == 'Bound'
