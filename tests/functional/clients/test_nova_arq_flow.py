"""Nova's own cyborg client module (PyPI nova) takes an instance through
its accelerator requests, on each database engine.

What runs for real: the API on a port of 127.0.0.1; the conductor on
oslo.messaging's in-process transport, binding and telling Nova; Placement
(openstack-placement on SQLite), where the conductor puts the fake FPGA
that compute1's agent reports; Nova's ``nova.accelerator.cyborg`` and
request-spec code in a child process (nova_arq_probe.py), reaching the
API through ``[cyborg] endpoint_override``; and a stand-in of Nova's
``os-server-external-events`` that checks each event with Nova's schema.

A boot, step by step as Nova does it: the profile's request groups, an
allocation candidate for them, the claim, the group to provider mapping
from the allocation, the ARQs created and bound, the events, the
resolved ARQs, and at last the instance's deletion.
"""

import collections
import contextlib
import dataclasses
import json
import pathlib
import queue
import subprocess
import sys
import threading
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.clients import nova as nova_client
from cyborg.clients import placement as placement_client
from cyborg.conductor import host_sync
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import placement_sync
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.objects import inventory as inventory_objects
from cyborg.privsep import checks
from tests import arq_stack
from tests import conductor_rpc
from tests.functional.clients.conftest import Recorder
from tests.nova_events import nova_events  # noqa: F401
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers import conftest as drivers_conftest
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401
from tests.unit.drivers.trees import hosts

PROBE = pathlib.Path(__file__).with_name('nova_arq_probe.py')
# The agent's host name; Nova named the compute node by its FQDN.
AGENT_HOST = 'compute1'
NODENAME = 'compute1.example.com'
OTHER_NODENAME = 'compute2.example.com'
PROFILE = arq_stack.PROFILE
# The flavor's own resources: the unnumbered request group.
FLAVOR = 'MEMORY_MB:512,VCPU:1'
EVENT = 'accelerator-request-bound'
ARQS = arq_stack.ARQS
PCI_FIELDS = {'domain', 'bus', 'device', 'function'}


class NovaProbe:
    """nova_arq_probe.py in a child process, one step per call."""

    def __init__(self, env, cwd, timeout=120):
        self.timeout = timeout
        self._process = subprocess.Popen(
            [sys.executable, str(PROBE)], env=env, cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, bufsize=1)
        self._answers = queue.Queue()
        # What Nova logged, for the failure messages.
        self._log = collections.deque(maxlen=200)
        self._readers = [
            threading.Thread(target=self._read, daemon=True,
                             args=(self._process.stdout, self._answers.put)),
            threading.Thread(target=self._read, daemon=True,
                             args=(self._process.stderr, self._log.append))]
        for reader in self._readers:
            reader.start()
        self._ready = False

    @staticmethod
    def _read(stream, keep):
        for line in stream:
            keep(line)
        keep(None)

    def _next(self):
        try:
            line = self._answers.get(timeout=self.timeout)
        except queue.Empty:
            line = None
        if line is None:
            raise AssertionError('Nova probe: no answer (exit code %s):\n%s'
                                 % (self._process.poll(), self.log()))
        answer = json.loads(line)
        assert 'crash' not in answer, answer['crash']
        return answer

    def log(self):
        return ''.join(line for line in list(self._log) if line)

    def connect(self, endpoint):
        """Point Nova at the API, once Nova is imported."""
        if not self._ready:
            assert self._next() == {'ready': True}
            self._ready = True
        self.ok('connect', endpoint=endpoint)

    def __call__(self, op, **arguments):
        """The step's answer, which may be Nova's error."""
        self._process.stdin.write(json.dumps({'op': op, **arguments}) + '\n')
        self._process.stdin.flush()
        return self._next()

    def ok(self, op, **arguments):
        """The step's answer; Nova's client must not have raised."""
        answer = self(op, **arguments)
        assert 'error' not in answer, (answer, self.log())
        return answer

    def close(self):
        self._process.stdin.close()
        # Nothing to wait for: Nova's interpreter takes a second to exit.
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for reader in self._readers:
            reader.join(timeout=5)
        self._process.stdout.close()
        self._process.stderr.close()


@dataclasses.dataclass
class Compute:
    node_rp: str
    other_node_rp: str
    fpga_rp: str


profile = arq_stack.profile  # PROFILE: three ARQs of the fake FPGA
transport = arq_stack.transport


@pytest.fixture
def cyborg_api(transport, served_api):
    """The served API (its RPC to the conductor from ``transport_url``,
    set by ``transport`` before the app is built), with a record of what
    Nova sent and got back."""
    recorder = Recorder(served_api.server.wsgi_app)
    # cheroot looks the application up on every request.
    served_api.server.wsgi_app = recorder
    return recorder


@pytest.fixture(params=[placement_sync.PER_DEVICE])
def conductor(request, conf, db, transport, placement,  # noqa: F811
              nova_events):  # noqa: F811
    nova_events.configure(conf)
    nova = nova_client.NovaClient.from_conf(conf)
    assert nova is not None
    with arq_stack.serving_conductor(
            transport, db, arq_stack.binder(conf, nova=nova),
            placement.client(), layout=request.param) as endpoint:
        yield endpoint


@pytest.fixture
def compute(db, transport, placement, conductor):  # noqa: F811
    """compute1 (with the fake FPGA) and compute2 in Placement.

    Nova made the compute-node providers; compute1's agent reported what
    the fake driver discovers and the conductor made the FPGA's provider.
    """
    adapter = placement.adapter()
    node = create_compute_node(adapter, NODENAME)
    other = create_compute_node(adapter, OTHER_NODENAME)
    inventory = inventory_objects.HostInventory(
        AGENT_HOST, fake.FakeDriver(None, None).discover())

    summary = conductor_rpcapi.ConductorAPI(transport).report_host_inventory(
        cyborg_context.admin_context(db), inventory.to_dict(),
        [AGENT_HOST, NODENAME])

    assert summary['placement']['status'] == 'synced', summary
    assert summary['placement']['compute_node'] == NODENAME
    fpga_rp = placement_sync.provider_uuid(
        placement_sync.provider_name(AGENT_HOST, fake.DEPLOYABLE_NAME))
    provider = placement_get(adapter, '/resource_providers/' + fpga_rp)
    assert provider['parent_provider_uuid'] == node['uuid']
    return Compute(node['uuid'], other['uuid'], fpga_rp)


@pytest.fixture
def nova_process(client_env, tmp_path):
    """The probe, started first: Nova imports while the rest is set up
    (tests name this fixture before any other)."""
    process = NovaProbe(client_env, tmp_path)
    yield process
    process.close()


@pytest.fixture
def probe(nova_process, cyborg_api, served_api):
    """Nova, with ``[cyborg] endpoint_override`` set to the served API."""
    nova_process.connect(served_api.url + '/v2')
    return nova_process


def placement_get(adapter, url, **kwargs):
    response = adapter.get(url, microversion=placement_client.MICROVERSION,
                           raise_exc=False, **kwargs)
    assert response.status_code == 200, response.text
    return response.json()


def schedule(placement, probe, instance, dp_name=PROFILE):  # noqa: F811
    """Nova's API, scheduler and conductor before the bind.

    Returns the request groups, the instance's allocation as Placement
    holds it, and Nova's request group to provider mapping.
    """
    adapter = placement.adapter()
    groups = probe.ok('groups', dp_name=dp_name)['groups']
    params = [tuple(p) for g in groups for p in g['queryparams']]
    params += [('resources', FLAVOR), ('group_policy', 'none')]
    # Only compute1 has an FPGA: one candidate, both groups on it.
    candidate, = placement_get(adapter, '/allocation_candidates',
                               params=params)['allocation_requests']
    claimed = adapter.put(
        '/allocations/' + instance,
        json={'allocations': candidate['allocations'],
              'consumer_generation': None, 'consumer_type': 'INSTANCE',
              'project_id': 'nova-project', 'user_id': 'nova-user'},
        microversion=placement_client.MICROVERSION, raise_exc=False)
    assert claimed.status_code == 204, claimed.text
    allocations = placement_get(adapter,
                                '/allocations/' + instance)['allocations']
    traits = {rp: placement_get(
        adapter, '/resource_providers/%s/traits' % rp)['traits']
        for rp in allocations}

    rg_rp_map = probe.ok('map', dp_name=dp_name, allocations=allocations,
                         provider_traits=traits)['rg_rp_map']

    # The scheduler's mapping of the candidate says the same.
    assert rg_rp_map == {suffix: rps for suffix, rps
                         in candidate['mappings'].items() if suffix}
    return groups, allocations, rg_rp_map


def create_and_bind(probe, rg_rp_map, instance, hostname, dp_name=PROFILE):
    """Nova's conductor: create the ARQs, then bind each to its provider."""
    arqs = probe.ok('create', dp_name=dp_name, rg_rp_map=rg_rp_map)['arqs']
    bindings = {arq['uuid']: {'hostname': hostname,
                              'device_rp_uuid': arq['device_rp_uuid'],
                              'instance_uuid': instance}
                for arq in arqs}
    probe.ok('bind', bindings=bindings)
    return arqs


def handles(db):
    """Every attach handle of the database by uuid."""
    with db.engine.connect() as conn:
        rows = conn.execute(sa.select(
            models.AttachHandle.uuid, models.AttachHandle.attach_type,
            models.AttachHandle.attach_info,
            models.AttachHandle.in_use)).all()
    return {row.uuid: row for row in rows}


def handles_in_use(db):
    return sorted(u for u, row in handles(db).items() if row.in_use)


def stored_arqs(db):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(
            models.ExtendedAcceleratorRequest)).scalar_one()


def wire(recorder):
    return [(c['method'], c['path'], c['query'], c['status'])
            for c in recorder.api_calls()]


def assert_deleted_by_nova(probe, db, instance):
    probe.ok('delete', instance_uuid=instance)

    left = probe('arqs', instance_uuid=instance, only_resolved=False)
    # Nova's client reports an instance without ARQs as its error.
    assert left['error'] == 'AcceleratorRequestOpFailed'
    assert 'returned no accelerator requests' in left['message']
    assert stored_arqs(db) == 0


def test_nova_boots_and_deletes_an_instance_with_accelerators(
        nova_process, db, cyborg_api, compute, profile, probe,
        placement, nova_events):  # noqa: F811
    instance = str(uuid.uuid4())

    groups, allocations, rg_rp_map = schedule(placement, probe, instance)

    assert [(g['requester_id'], g['resources'], g['required_traits'])
            for g in groups] == [
        ('device_profile_0', {'FPGA': 2}, ['CUSTOM_FAKE_DEVICE']),
        ('device_profile_1', {'FPGA': 1}, [])]
    assert {rp: a['resources'] for rp, a in allocations.items()} == {
        compute.node_rp: {'VCPU': 1, 'MEMORY_MB': 512},
        compute.fpga_rp: {'FPGA': 3}}
    assert rg_rp_map == {'device_profile_0': [compute.fpga_rp],
                         'device_profile_1': [compute.fpga_rp]}

    arqs = create_and_bind(probe, rg_rp_map, instance, NODENAME)

    assert [a['device_profile_group_id'] for a in arqs] == [0, 0, 1]
    assert {a['state'] for a in arqs} == {'Initial'}
    assert {a['device_rp_uuid'] for a in arqs} == {compute.fpga_rp}
    # What Nova's compute manager waits for: one event per ARQ.
    events = nova_events.wait_for_events(len(arqs), timeout=30)
    assert sorted((e.server_uuid, e.name, e.tag, e.status, e.code)
                  for e in events) == sorted(
        (instance, EVENT, a['uuid'], 'completed', 200) for a in arqs)
    assert nova_events.invalid == []
    # All of one instance's events in one call, at Nova's microversion.
    assert [c.microversion for c in nova_events.calls] == ['2.82']

    resolved = probe.ok('arqs', instance_uuid=instance,
                        only_resolved=True)['arqs']

    assert sorted(a['uuid'] for a in resolved) == sorted(
        a['uuid'] for a in arqs)
    in_db = handles(db)
    for arq in resolved:
        assert arq['state'] == 'Bound'
        assert arq['instance_uuid'] == instance
        assert arq['hostname'] == NODENAME
        assert arq['device_rp_uuid'] == compute.fpga_rp
        assert arq['device_profile_name'] == PROFILE
        assert arq['attach_handle_type'] == 'TEST_PCI'
        info = arq['attach_handle_info']
        assert set(info) == PCI_FIELDS
        assert (info['domain'], info['bus']) == (fake.ADDRESS.domain,
                                                fake.ADDRESS.bus)
        handle = in_db[arq['attach_handle_uuid']]
        assert handle.in_use and handle.attach_type == 'TEST_PCI'
        assert handle.attach_info == info
    assert handles_in_use(db) == sorted(
        a['attach_handle_uuid'] for a in resolved)

    assert_deleted_by_nova(probe, db, instance)

    assert handles_in_use(db) == []
    assert wire(cyborg_api) == [
        ('GET', '/v2/device_profiles', 'name=' + PROFILE, 200),
        ('POST', ARQS, '', 201),
        ('PATCH', ARQS, '', 202),
        ('GET', ARQS, 'instance=' + instance, 200),
        ('DELETE', ARQS, 'instance=' + instance, 204),
        ('GET', ARQS, 'instance=' + instance, 200),
    ]


@pytest.mark.parametrize('cause', ['another_host', 'handles_taken'])
def test_nova_hears_that_a_bind_failed(
        nova_process, db, cyborg_api, compute, profile, probe,
        placement, nova_events, cause):  # noqa: F811
    instance = str(uuid.uuid4())
    _, _, rg_rp_map = schedule(placement, probe, instance)
    hostname = NODENAME
    if cause == 'another_host':
        # Nova names a compute node that the provider is not under.
        hostname = OTHER_NODENAME
    else:
        # Every handle went to binds that Placement does not know of.
        with db.engine.begin() as conn:
            conn.execute(sa.update(models.AttachHandle).values(in_use=True))
    taken = handles_in_use(db)
    assert len(taken) == (0 if cause == 'another_host' else fake.HANDLES)

    arqs = create_and_bind(probe, rg_rp_map, instance, hostname)

    events = nova_events.wait_for_events(len(arqs), timeout=30)
    assert sorted((e.server_uuid, e.name, e.tag, e.status)
                  for e in events) == sorted(
        (instance, EVENT, a['uuid'], 'failed') for a in arqs)
    assert nova_events.invalid == []
    assert [c.microversion for c in nova_events.calls] == ['2.82']

    resolved = probe.ok('arqs', instance_uuid=instance,
                        only_resolved=True)['arqs']

    assert sorted(a['uuid'] for a in resolved) == sorted(
        a['uuid'] for a in arqs)
    assert {a['state'] for a in resolved} == {'BindFailed'}
    assert {a['instance_uuid'] for a in resolved} == {instance}
    assert {a['attach_handle_type'] for a in resolved} == {''}
    assert {a['attach_handle_uuid'] for a in resolved} == {None}
    assert handles_in_use(db) == taken

    # Nova gives up on the instance and deletes its ARQs.
    assert_deleted_by_nova(probe, db, instance)

    assert handles_in_use(db) == taken


def eight_h100s():
    """What the NVIDIA driver reports of a host with eight H100s on one
    NUMA node: identical but for their PCI addresses."""
    devices = []
    for index in range(8):
        address = inventory_objects.PCIAddress(
            '0000', '%02x' % (0x18 + 0x10 * index), '00', '0')
        devices.append(inventory_objects.Device(
            type='GPU', vendor='10de', model='H100',
            controlpath_type='PCI', controlpath_info=address.as_info(),
            std_board_info={'vendor_id': '10de', 'product_id': '2330',
                            'numa_node': '0'},
            deployables=[inventory_objects.Deployable(
                name='gpu_%s' % address.bus, num_accelerators=1,
                resource_class='PGPU', driver_name='nvidia_gpu_driver',
                traits=['CUSTOM_GPU_NVIDIA', 'CUSTOM_GPU_PRODUCT_ID_2330'],
                attach_handles=[inventory_objects.AttachHandle(
                    'PCI', address.as_info())])]))
    return inventory_objects.HostInventory(AGENT_HOST, devices)


@pytest.mark.parametrize('conductor', [placement_sync.POOLED],
                         indirect=True)
def test_nova_binds_an_instance_to_four_pooled_gpus(
        nova_process, db, admin_context, cyborg_api, conductor, probe,
        placement, nova_events, transport):  # noqa: F811
    adapter = placement.adapter()
    node = create_compute_node(adapter, NODENAME)
    summary = conductor_rpcapi.ConductorAPI(transport).report_host_inventory(
        cyborg_context.admin_context(db), eight_h100s().to_dict(),
        [AGENT_HOST, NODENAME])
    assert summary['placement']['status'] == 'synced', summary
    pool, = summary['placement']['created']
    pool_rp = placement_sync.provider_uuid(pool)
    arq_stack.make_profile(admin_context, 'four-h100', [
        {'resources:PGPU': '4', 'trait:CUSTOM_GPU_PRODUCT_ID_2330':
         'required'}])
    instance = str(uuid.uuid4())

    groups, allocations, rg_rp_map = schedule(placement, probe, instance,
                                              dp_name='four-h100')

    assert [(g['resources'], g['required_traits']) for g in groups] == [
        ({'PGPU': 4}, ['CUSTOM_GPU_PRODUCT_ID_2330'])]
    assert {rp: a['resources'] for rp, a in allocations.items()} == {
        node['uuid']: {'VCPU': 1, 'MEMORY_MB': 512}, pool_rp: {'PGPU': 4}}
    assert rg_rp_map == {'device_profile_0': [pool_rp]}

    arqs = create_and_bind(probe, rg_rp_map, instance, NODENAME,
                           dp_name='four-h100')

    assert len(arqs) == 4
    events = nova_events.wait_for_events(4, timeout=30)
    assert {(e.server_uuid, e.status) for e in events} == {
        (instance, 'completed')}
    assert nova_events.invalid == []
    resolved = probe.ok('arqs', instance_uuid=instance,
                        only_resolved=True)['arqs']
    assert {a['state'] for a in resolved} == {'Bound'}
    assert {a['device_rp_uuid'] for a in resolved} == {pool_rp}
    # Four distinct GPUs: four handles, four PCI addresses.
    assert len({a['attach_handle_uuid'] for a in resolved}) == 4
    assert len({a['attach_handle_info']['bus'] for a in resolved}) == 4
    assert handles_in_use(db) == sorted(
        a['attach_handle_uuid'] for a in resolved)

    assert_deleted_by_nova(probe, db, instance)
    assert handles_in_use(db) == []


H100 = hosts.H100.bdf
MIG_PROFILE = 'mig-2g.20gb'
MIG_SLICES = ('CUSTOM_MIG_COMPUTE_SLICE', 'CUSTOM_MIG_MEMORY_SLICE')
EMPTY_CARD = ['CUSTOM_MIG_PROFILE_' + p for p in (
    '1G_10GB', '1G_10GB_ME', '1G_20GB', '2G_20GB', '3G_40GB', '4G_40GB',
    '7G_80GB')]


@contextlib.contextmanager
def serving_agent(conf, transport, host, drivers):
    """The agent's RPC endpoint of ``host`` on the file's transport."""
    agent = agent_manager.AgentManager(
        conf, drivers, conductor=None,
        candidates=[(host, 'the configured host')], glance=None)
    server = rpc.get_server(transport, rpc.AGENT_TOPIC, host, [agent])
    server.start()
    try:
        yield agent
    finally:
        server.stop()
        server.wait()


@dataclasses.dataclass
class MIGCompute:
    node_rp: str
    rp: str  # the GPU's provider of slices
    library: object  # the NVML stand-in


@pytest.fixture
def mig_compute(conf, db, tmp_path, monkeypatch, admin_context,
                privileged_on, mig_nvml, placement, transport,  # noqa: F811
                nova_events):  # noqa: F811
    """compute1 with the recorded H100 host's GPU, its MIG instances made
    on demand through the agent's privileged helper and the NVML
    stand-in; the conductor stored compute1's report and synced it to
    Placement, and binds through compute1's agent.

    Not tests.functional.conductor.mig_host: that one writes the rows
    itself, as operator attributes, so Placement never gets the memory
    slices and media engine that Nova's request needs.
    """
    nova_events.configure(conf)
    root = tmp_path / 'host'
    library = drivers_conftest.h100_on_demand_host(root, monkeypatch,
                                                   privileged_on, mig_nvml)
    # The privileged helper checks its own copy of the configuration.
    daemon = checks.daemon_conf()
    daemon.set_override('mig_on_demand_addresses', [H100],
                        group='gpu_devices')
    conf.set_override('mig_on_demand_addresses', [H100],
                      group='gpu_devices')
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(str(root)))
    # One HostSync for reports and binds, as the conductor service has.
    sync = host_sync.HostSync(placement.client())
    binder = arq_stack.binder(
        conf, agent_rpcapi.AgentAPI(transport, timeout=10),
        nova=nova_client.NovaClient.from_conf(conf), sync=sync)
    node = create_compute_node(placement.adapter(), NODENAME)
    try:
        with serving_agent(conf, transport, AGENT_HOST, [driver]), \
                conductor_rpc.serving(transport, db, [
                    conductor_manager.ConductorManager(sync, binder)]):
            summary = conductor_rpcapi.ConductorAPI(
                transport).report_host_inventory(
                cyborg_context.admin_context(db),
                inventory_objects.HostInventory(
                    AGENT_HOST, driver.discover()).to_dict(),
                [AGENT_HOST, NODENAME])
            assert summary['placement']['status'] == 'synced', summary
            rp, = [placement_sync.provider_uuid(name)
                   for name in summary['placement']['created']]
            arq_stack.make_profile(admin_context, MIG_PROFILE, [{
                'resources:CUSTOM_MIG_COMPUTE_SLICE': '2',
                'resources:CUSTOM_MIG_MEMORY_SLICE': '2',
                'trait:CUSTOM_MIG_PROFILE_2G_20GB': 'required'}])
            yield MIGCompute(node['uuid'], rp, library)
    finally:
        daemon.clear_override('mig_on_demand_addresses',
                              group='gpu_devices')


def mig_traits(adapter, rp):
    """The MIG profile traits Placement holds for ``rp``."""
    return sorted(t for t in placement_get(
        adapter, '/resource_providers/%s/traits' % rp)['traits']
        if t.startswith('CUSTOM_MIG_PROFILE_'))


def slices_used(adapter, rp):
    usages = placement_get(adapter,
                           '/resource_providers/%s/usages' % rp)['usages']
    return {c: usages[c] for c in MIG_SLICES}


def whole_card_candidates(adapter):
    """Allocation candidates for a 7g.80gb: only an empty card has one."""
    return placement_get(adapter, '/allocation_candidates', params=[
        ('resources', 'CUSTOM_MIG_COMPUTE_SLICE:7,CUSTOM_MIG_MEMORY_SLICE:8'),
        ('required', 'CUSTOM_MIG_PROFILE_7G_80GB')])['allocation_requests']


def held(library):
    """{MIG UUID: (profile, start)} on the card."""
    return {u: (i.profile, i.start)
            for i in library.instances(H100) for u in i.uuids}


# Nova binds with its compute service's host name: the agent's own, or
# the FQDN (as the other tests here). A release must reach the agent
# either way.
@pytest.mark.parametrize('nova_host', [AGENT_HOST, NODENAME],
                         ids=['agent_name', 'fqdn'])
def test_nova_binds_an_instance_to_a_2g_20gb_profile(
        nova_process, db, cyborg_api, mig_compute, probe,
        placement, nova_events, nova_host):  # noqa: F811
    adapter = placement.adapter()
    rp = mig_compute.rp
    inventories = placement_get(
        adapter, '/resource_providers/%s/inventories' % rp)['inventories']
    assert {c: i['total'] for c, i in inventories.items()} == {
        'CUSTOM_MIG_COMPUTE_SLICE': 7, 'CUSTOM_MIG_MEMORY_SLICE': 8,
        'CUSTOM_MIG_MEDIA_ENGINE': 1}
    assert mig_traits(adapter, rp) == EMPTY_CARD
    assert held(mig_compute.library) == {}
    instance = str(uuid.uuid4())

    groups, allocations, rg_rp_map = schedule(placement, probe, instance,
                                              dp_name=MIG_PROFILE)

    assert [(g['resources'], g['required_traits']) for g in groups] == [
        ({'CUSTOM_MIG_COMPUTE_SLICE': 2, 'CUSTOM_MIG_MEMORY_SLICE': 2},
         ['CUSTOM_MIG_PROFILE_2G_20GB'])]
    assert {p: a['resources'] for p, a in allocations.items()} == {
        mig_compute.node_rp: {'VCPU': 1, 'MEMORY_MB': 512},
        rp: {'CUSTOM_MIG_COMPUTE_SLICE': 2, 'CUSTOM_MIG_MEMORY_SLICE': 2}}
    assert rg_rp_map == {'device_profile_0': [rp]}

    arq, = create_and_bind(probe, rg_rp_map, instance, nova_host,
                           dp_name=MIG_PROFILE)

    assert (arq['state'], arq['device_rp_uuid']) == ('Initial', rp)
    event, = nova_events.wait_for_events(1, timeout=30)
    assert (event.server_uuid, event.name, event.tag, event.status,
            event.code) == (instance, EVENT, arq['uuid'], 'completed', 200)
    assert nova_events.invalid == []

    resolved, = probe.ok('arqs', instance_uuid=instance,
                         only_resolved=True)['arqs']

    assert (resolved['uuid'], resolved['state'], resolved['instance_uuid'],
            resolved['device_rp_uuid']) == (arq['uuid'], 'Bound', instance,
                                            rp)
    assert resolved['attach_handle_type'] == 'MIG'
    info = resolved['attach_handle_info']
    # The parent GPU's PCI address: the function libvirt passes through.
    assert {k: info[k] for k in PCI_FIELDS} == (
        inventory_objects.PCIAddress.parse(H100).as_info())
    assert info['mig_profile'] == '2g.20gb'
    assert held(mig_compute.library) == {
        info['mig_uuid']: ('2g.20gb', int(info['start']))}
    assert handles_in_use(db) == [resolved['attach_handle_uuid']]
    # Placement follows the card. Best fit put the instance at start 0,
    # where it takes the 4g.40gb's slots as well as the whole card's.
    assert info['start'] == '0'
    assert mig_traits(adapter, rp) == [
        t for t in EMPTY_CARD if not t.endswith(('4G_40GB', '7G_80GB'))]
    assert whole_card_candidates(adapter) == []

    probe.ok('delete', instance_uuid=instance)

    # Checked first: a release that went astray leaves the instance here.
    assert held(mig_compute.library) == {}
    left = probe('arqs', instance_uuid=instance, only_resolved=False)
    assert left.get('error') == 'AcceleratorRequestOpFailed', left
    assert stored_arqs(db) == 0
    assert handles_in_use(db) == []
    assert mig_traits(adapter, rp) == EMPTY_CARD
    # Nova's claim still holds the slices, until Nova removes it.
    assert slices_used(adapter, rp) == dict.fromkeys(MIG_SLICES, 2)
    assert whole_card_candidates(adapter) == []
    removed = adapter.delete('/allocations/' + instance,
                             microversion=placement_client.MICROVERSION,
                             raise_exc=False)
    assert removed.status_code == 204, removed.text
    assert slices_used(adapter, rp) == dict.fromkeys(MIG_SLICES, 0)
    assert len(whole_card_candidates(adapter)) == 1
    assert wire(cyborg_api) == [
        ('GET', '/v2/device_profiles', 'name=' + MIG_PROFILE, 200),
        ('POST', ARQS, '', 201),
        ('PATCH', ARQS, '', 202),
        ('GET', ARQS, 'instance=' + instance, 200),
        ('DELETE', ARQS, 'instance=' + instance, 204),
        ('GET', ARQS, 'instance=' + instance, 200),
    ]
