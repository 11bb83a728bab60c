"""The agent's metrics endpoint scraped over HTTP: the H100's NVML
recording as dcgm-exporter names and labels it, the health of every
device, and the instance a device is bound to as the conductor's answer
to the report names it.

The agent service runs on the in-process transport with a stand-in for
the conductor's report endpoint; the devices are observed here as the
agent's periodic observation does (each driver's ``observe()``).
"""

import queue
import socket
import sys
import time
import urllib.error
import urllib.request

import oslo_messaging as messaging
import pytest

from cyborg import rpc
from cyborg.accelerator.drivers import loader
from cyborg.accelerator.drivers import pci
from cyborg.agent import manager as agent_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.metrics import agent as agent_metrics
from cyborg.metrics import endpoint as metrics_endpoint
from cyborg.metrics import gpu
from tests.metrics_scrape import observe
from tests.metrics_scrape import scrape
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import agent_conf
from tests.unit.drivers.conftest import h100_tree  # noqa: F401
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401
from tests.unit.drivers.conftest import recorded_nvml  # noqa: F401

H100 = '0000:00:06.0'
FAKE = 'ffff:0c:00.0'
INSTANCE = '2f0c6e58-0d1e-4d6b-9a53-6c2f1b7f0a11'
OTHER_INSTANCE = '0b9d3c6e-7a2f-4e51-8c1d-93e4f5a6b7c8'
PROJECT = 'p1'
MIB = 1024 * 1024


class Conductor:
    """The conductor's report endpoint: answers with ``bindings``, or,
    as a conductor of an older release, without any (None)."""

    target = messaging.Target(version=conductor_rpcapi.VERSION)

    def __init__(self, bindings):
        self.bindings = bindings
        self.reports = queue.Queue()

    def report_host_inventory(self, context, inventory, compute_node_names):
        self.reports.put(inventory)
        answer = {'changed': True}
        if self.bindings is not None:
            answer['bindings'] = self.bindings
        return answer

    def agent_heartbeat(self, context, **kwargs):
        pass


@pytest.fixture
def serve(h100_tree):  # noqa: F811
    """serve(bindings, **options) -> a started AgentService running the
    NVIDIA and fake drivers on the recorded H100 tree, its metrics on a
    free port; ``options`` as ``{(group, name): value}``."""
    running = []

    def start(bindings=None, options=None):
        conf = agent_conf({
            ('agent', 'enabled_drivers'): ['nvidia_gpu_driver',
                                           'fake_driver'],
            ('agent', 'report_interval'): 3600,
            ('agent', 'report_timeout'): 10,
            ('pci', 'sysfs_root'): h100_tree,
            ('metrics', 'enabled'): True,
            ('metrics', 'listen_address'): '127.0.0.1',
            ('metrics', 'agent_port'): 0,
            **(options or {})})
        transport = rpc.get_transport(conf)
        server = rpc.get_server(transport, rpc.CONDUCTOR_TOPIC,
                                'conductor-1', [Conductor(bindings)])
        server.start()
        agent = agent_manager.AgentService(conf, transport=transport,
                                           glance=None)
        running.append((agent, server, transport))
        agent.start()
        deadline = time.monotonic() + 10
        while agent.manager.last_report is None:
            assert time.monotonic() < deadline, 'no report answered'
            time.sleep(0.02)
        return agent

    yield start
    for agent, server, transport in reversed(running):
        agent.stop()
        server.stop()
        server.wait()
        transport.cleanup()


class Endpoint:
    """An agent's manager and its metrics endpoint, without the service
    around them: what the service serves, on a free port."""

    def __init__(self, manager):
        self.manager = manager
        registry = metrics_endpoint.service_registry()
        registry.register(agent_metrics.AgentCollector(HOST,
                                                       lambda: manager))
        self.endpoint = metrics_endpoint.Endpoint(registry, '127.0.0.1', 0)
        self.endpoint.start()

    def scrape(self):
        return scrape(self.endpoint.url)


@pytest.fixture
def endpoint(h100_tree):  # noqa: F811
    """endpoint(bindings) -> an Endpoint of an agent running the NVIDIA
    driver on the recorded H100 tree, reported once to a conductor that
    answered with ``bindings`` (None: none, as an older release)."""
    started = []

    def start(bindings=None):
        conf = agent_conf({('pci', 'sysfs_root'): h100_tree})
        drivers = loader.load_drivers(conf, ['nvidia_gpu_driver'],
                                      pci.PCIReader(h100_tree))
        manager = agent_manager.AgentManager(
            conf, drivers, Conductor(bindings),
            candidates=[(HOST, 'the configured host')], glance=None)
        assert manager.report_inventory() == {'changed': True}
        started.append(Endpoint(manager))
        return started[-1]

    yield start
    for served in started:
        served.endpoint.stop()


def dcgm_values(sample):
    """dcgm-exporter's values, in its units, of an NVML sample."""
    return {
        'DCGM_FI_DEV_GPU_TEMP': sample['temp_c'],
        'DCGM_FI_DEV_POWER_USAGE': sample['power_mw'] / 1000,
        'DCGM_FI_DEV_GPU_UTIL': sample['gpu_util'],
        'DCGM_FI_DEV_MEM_COPY_UTIL': sample['mem_util'],
        'DCGM_FI_DEV_XID_ERRORS': 0,
        'DCGM_FI_DEV_FB_FREE': (sample['fb_total'] - sample['fb_used'])
        // MIB,
        'DCGM_FI_DEV_FB_USED': sample['fb_used'] // MIB,
        'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS':
            sample['remapped_rows'][1],
        'DCGM_FI_DEV_ROW_REMAP_FAILURE': sample['remapped_rows'][3],
    }


def health_of(got, address):
    """{state: value} of a device's health series."""
    return {labels['state']: value for labels, value in
            got.samples('cyborg_device_health', address=address)}


def test_gpu_series_follow_the_recording_named_as_dcgm_exporter(
        serve, recorded_nvml):  # noqa: F811
    library = recorded_nvml()
    agent = serve({H100: [{'instance_uuid': INSTANCE,
                           'project_id': PROJECT}]})
    labels = {'gpu': '0', 'UUID': library.static['uuid'],
              'pci_bus_id': '00000000:00:06.0', 'device': 'nvidia0',
              'modelName': 'NVIDIA H100 80GB HBM3', 'Hostname': HOST,
              'instance_uuid': INSTANCE, 'project_id': PROJECT}
    utilisation = []
    while True:
        observe(agent.manager)
        got = scrape(agent.metrics_endpoint.url)
        assert {name: got.samples(name) for name in gpu.NAMES} == {
            name: [(labels, float(value))]
            for name, value in dcgm_values(library.sample).items()}
        utilisation.append(got.value('DCGM_FI_DEV_GPU_UTIL'))
        if not library.step():
            break
    assert len(utilisation) == 42
    assert {got.type_of(name) for name in gpu.NAMES} == {'gauge'}
    # Idle, a matrix-multiply load, cool-down.
    assert utilisation[0] == 0 and max(utilisation) == 100

    # Every device has its health, whatever its driver; the bound one
    # names its instance.
    h100 = got.samples('cyborg_device_health', address=H100, state='healthy')
    assert h100 == [({'Hostname': HOST, 'address': H100, 'device_type': 'GPU',
                      'vendor': '10de', 'driver': 'nvidia_gpu_driver',
                      'instance_uuid': INSTANCE, 'project_id': PROJECT,
                      'state': 'healthy'}, 1.0)]
    assert health_of(got, H100) == {'healthy': 1, 'unknown': 0,
                                    'degraded': 0, 'unhealthy': 0}
    fake, = got.samples('cyborg_device_health', address=FAKE,
                        state='healthy')
    assert fake == ({'Hostname': HOST, 'address': FAKE,
                     'device_type': 'FPGA', 'vendor': 'abcd',
                     'driver': 'fake_driver', 'state': 'healthy'}, 1.0)
    assert got.samples('cyborg_device_binding') == [
        ({'Hostname': HOST, 'address': H100, 'instance_uuid': INSTANCE,
          'project_id': PROJECT}, 1.0)]
    observed = got.value('cyborg_device_observed_timestamp_seconds',
                         address=H100)
    assert observed == agent.manager.last_observations[H100].observed_at


def test_xid_and_remapped_rows_make_the_gpu_unhealthy(
        endpoint, recorded_nvml):  # noqa: F811
    library = recorded_nvml()
    agent = endpoint()
    observe(agent.manager)
    library.inject_xid(H100, 79)
    library.override(remapped_rows=[0, 2, 0, 1])
    observe(agent.manager)

    got = agent.scrape()
    assert got.value('DCGM_FI_DEV_XID_ERRORS') == 79
    assert got.value('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS') == 2
    assert got.value('DCGM_FI_DEV_ROW_REMAP_FAILURE') == 1
    assert health_of(got, H100) == {'healthy': 0, 'unknown': 0,
                                    'degraded': 0, 'unhealthy': 1}


def test_without_bindings_from_an_older_conductor_no_instance_labels(
        endpoint, recorded_nvml):  # noqa: F811
    recorded_nvml()
    agent = endpoint(bindings=None)
    observe(agent.manager)

    got = agent.scrape()
    assert agent.manager.bindings == {}
    assert got.samples('DCGM_FI_DEV_GPU_UTIL') != []
    assert not [labels for samples in got.by_name.values()
                for labels, _ in samples
                if 'instance_uuid' in labels or 'project_id' in labels]
    assert got.samples('cyborg_device_binding') == []


def test_a_gpu_shared_by_two_instances_names_both(
        endpoint, recorded_nvml):  # noqa: F811
    recorded_nvml()
    agent = endpoint({H100: [{'instance_uuid': INSTANCE, 'project_id': 'p2'},
                             {'instance_uuid': OTHER_INSTANCE,
                              'project_id': PROJECT}]})
    observe(agent.manager)

    got = agent.scrape()
    labels, _ = got.samples('DCGM_FI_DEV_FB_USED')[0]
    assert labels['instance_uuid'] == ','.join(sorted([INSTANCE,
                                                       OTHER_INSTANCE]))
    assert labels['project_id'] == 'p1,p2'
    assert sorted((labels['instance_uuid'], labels['project_id'])
                  for labels, _ in got.samples('cyborg_device_binding')) == [
        (OTHER_INSTANCE, PROJECT), (INSTANCE, 'p2')]


def test_a_gpu_nvml_cannot_see_has_its_health_only(endpoint, monkeypatch):
    monkeypatch.setitem(sys.modules, 'pynvml', None)  # import fails
    agent = endpoint()
    got = agent.scrape()
    # Discovered, not observed yet: unknown.
    assert health_of(got, H100)['unknown'] == 1
    assert got.samples('cyborg_device_observed_timestamp_seconds') == []
    observe(agent.manager)

    got = agent.scrape()
    assert health_of(got, H100)['unknown'] == 1
    assert all(got.samples(name) == [] for name in gpu.NAMES)


def test_off_by_default_and_a_taken_port_leaves_the_agent_running(
        serve, caplog):
    assert serve(options={('metrics', 'enabled'): False}) \
        .metrics_endpoint is None

    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        port = taken.getsockname()[1]
        agent = serve(options={('metrics', 'agent_port'): port})
        assert agent.metrics_endpoint is None
    assert ('cyborg-agent: no metrics endpoint: cannot listen on 127.0.0.1 '
            'port %d' % port) in caplog.text
    assert agent.manager.last_report == {'changed': True}


def test_stopping_the_agent_closes_its_endpoint(serve):
    agent = serve()
    url = agent.metrics_endpoint.url
    assert scrape(url).samples('cyborg_device_health', address=FAKE)
    agent.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)


def test_each_mig_instance_has_its_frame_buffer_series(
        endpoint, mig_nvml):  # noqa: F811
    """A GPU in MIG mode: the GPU's frame-buffer samples and one more per
    MIG instance, labelled as dcgm-exporter labels them."""
    import pynvml

    from tests.unit.drivers import test_nvml_mig_standin as mig

    mig_nvml()
    agent = endpoint()
    gpu_handle = pynvml.nvmlDeviceGetHandleByPciBusId(H100)
    for name, start in (('3g.40gb', 0), ('1g.10gb', 4)):
        mig.create_ci(mig.create(gpu_handle, name, start))
    observe(agent.manager)

    got = agent.scrape()
    per_instance = sorted(
        (labels['GPU_I_ID'], labels['GPU_I_PROFILE'], value)
        for labels, value in got.samples('DCGM_FI_DEV_FB_FREE')
        if 'GPU_I_ID' in labels)
    assert per_instance == [('1', '3g.40gb', 40448.0),
                            ('2', '1g.10gb', 9984.0)]
    whole = [labels for labels, _ in got.samples('DCGM_FI_DEV_FB_USED')
             if 'GPU_I_ID' not in labels]
    assert len(whole) == 1 and whole[0]['pci_bus_id'] == '00000000:00:06.0'
    # Utilisation is not given per MIG instance: the GPU's series only.
    assert all('GPU_I_ID' not in labels for labels, _ in
               got.samples('DCGM_FI_DEV_GPU_UTIL'))
