"""NVIDIA GPU health and usage through the real NVML bindings, replaying
the NVML recording of an H100 (idle, load, cool-down)."""

import json
import os
import sys

import pynvml
import pytest

from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.accelerator.drivers.gpu import nvml
from tests.unit.drivers.trees import recorded

H100 = '0000:00:06.0'


@pytest.fixture
def h100(h100_tree, driver_conf):
    """(driver, devices) as the agent has them after discovery."""
    driver = nvidia.NvidiaGPUDriver(driver_conf(), pci.PCIReader(h100_tree))
    devices = driver.discover()
    assert [d.controlpath_info['bus'] + d.controlpath_info['device']
            for d in devices] == ['0006']
    return driver, devices


def observe(h100):
    driver, devices = h100
    [observation] = driver.observe(devices)
    assert observation.address == H100
    return observation


def test_usage_follows_the_recording(h100, recorded_nvml):
    library = recorded_nvml()
    seen = []
    while True:
        sample = library.sample
        observation = observe(h100)
        assert observation.state == health.HEALTHY, observation.reason
        assert observation.reason == 'no problem seen'
        assert {k: observation.usage[k] for k in (
            'gpu_util_percent', 'memory_util_percent', 'fb_used_bytes',
            'fb_total_bytes', 'power_mw', 'temperature_c')} == {
            'gpu_util_percent': sample['gpu_util'],
            'memory_util_percent': sample['mem_util'],
            'fb_used_bytes': sample['fb_used'],
            'fb_total_bytes': sample['fb_total'],
            'power_mw': sample['power_mw'],
            'temperature_c': sample['temp_c']}
        # The link as sysfs shows it: gen5 x16.
        assert observation.usage['pcie_link_gts'] == 32.0
        assert observation.usage['pcie_link_width'] == 16
        assert 'vgpus' not in observation.usage  # no vGPU manager there
        seen.append((sample['phase'], observation.usage))
        if not library.step():
            break
    assert len(seen) == len(library.samples) == 42

    def phase(name):
        return [usage for p, usage in seen if p == name]
    assert {u['gpu_util_percent'] for u in phase('idle')} == {0}
    assert max(u['gpu_util_percent'] for u in phase('load')) == 100
    assert max(u['power_mw'] for u in phase('load')) > 600000
    assert phase('cooldown')[-1]['power_mw'] < 200000
    # NVML was started and the GPU looked up once, not at every look.
    assert library.calls.count('nvmlInitWithFlags') == 1
    assert library.calls.count('nvmlDeviceGetHandleByPciBusId_v2') == 1
    assert library.calls.count('nvmlDeviceRegisterEvents') == 1
    assert library.calls.count('nvmlEventSetWait_v2') == 42
    # The slowdown threshold does not change: read once.
    assert library.calls.count('nvmlDeviceGetTemperatureThreshold') == 1


def test_identity_remapped_rows_and_the_last_xid(h100, recorded_nvml):
    library = recorded_nvml()
    usage = observe(h100).usage
    sample = library.sample
    assert {k: usage[k] for k in (
        'gpu_index', 'gpu_uuid', 'gpu_name', 'fb_free_bytes', 'last_xid',
        'remapped_rows_correctable', 'remapped_rows_uncorrectable',
        'row_remap_pending', 'row_remap_failure')} == {
        'gpu_index': 0,
        'gpu_uuid': library.static['uuid'],
        'gpu_name': 'NVIDIA H100 80GB HBM3',
        'fb_free_bytes': sample['fb_total'] - sample['fb_used'],
        'last_xid': 0,
        'remapped_rows_correctable': 0, 'remapped_rows_uncorrectable': 0,
        'row_remap_pending': 0, 'row_remap_failure': 0}
    library.override(remapped_rows=[3, 2, 1, 1])
    library.inject_xid(H100, 79)
    library.inject_xid(H100, 13)  # caused by an application: still the last
    usage = observe(h100).usage
    assert usage['last_xid'] == 13
    assert (usage['remapped_rows_correctable'],
            usage['remapped_rows_uncorrectable'], usage['row_remap_pending'],
            usage['row_remap_failure']) == (3, 2, 1, 1)
    # The identity does not change: read once.
    assert library.calls.count('nvmlDeviceGetUUID') == 1


def test_xid_79_makes_the_gpu_unhealthy_and_it_stays_so(h100, recorded_nvml):
    library = recorded_nvml()
    assert observe(h100).state == health.HEALTHY
    library.inject_xid(H100, 79)
    for _ in range(2):
        observation = observe(h100)
        assert observation.state == health.UNHEALTHY
        assert observation.reason == (
            'critical XID 79 (GPU has fallen off the bus)')
        library.step()
    # Usage is still read while the GPU answers.
    assert 'gpu_util_percent' in observation.usage


def test_application_xid_13_leaves_the_gpu_healthy(h100, recorded_nvml):
    library = recorded_nvml()
    assert observe(h100).state == health.HEALTHY
    library.inject_xid(H100, 13)
    library.inject_xid(H100, 43)
    observation = observe(h100)
    assert observation.state == health.HEALTHY
    # One wait that timed out, then two events and a time-out.
    assert library.calls.count('nvmlEventSetWait_v2') == 4
    # ... but a critical XID among them still counts.
    library.inject_xid(H100, 13)
    library.inject_xid(H100, 48)
    observation = observe(h100)
    assert observation.state == health.UNHEALTHY
    assert observation.reason == 'critical XID 48 (double-bit ECC error)'


def test_a_lost_gpu_is_unhealthy(h100, recorded_nvml):
    library = recorded_nvml()
    observe(h100)
    library.lose(H100)
    observation = observe(h100)
    assert observation.state == health.UNHEALTHY
    assert observation.reason == 'NVML has lost the GPU at 0000:00:06.0'
    assert 'gpu_util_percent' not in observation.usage


@pytest.mark.parametrize('fields,state,reason', [
    ({'temp_c': 89}, health.DEGRADED,
     'GPU at 89 °C, at or above its slowdown threshold 89 °C'),
    ({'ecc_unc_volatile': 2}, health.UNHEALTHY,
     '2 uncorrectable ECC errors since the driver loaded'),
    ({'remapped_rows': [0, 1, 1, 0]}, health.DEGRADED,
     'a row remap is pending until the next GPU reset'),
    ({'remapped_rows': [0, 1, 0, 1]}, health.UNHEALTHY,
     'row remapping failed'),
    # Corrected errors and aggregate history alone are no fault.
    ({'ecc_cor_volatile': 12, 'ecc_unc_aggregate': 1, 'temp_c': 88},
     health.HEALTHY, 'no problem seen'),
])
def test_gpu_faults(h100, recorded_nvml, fields, state, reason):
    library = recorded_nvml()
    library.override(**fields)
    observation = observe(h100)
    assert (observation.state, observation.reason) == (state, reason)


def test_unknown_without_the_nvml_bindings(h100, monkeypatch):
    monkeypatch.setitem(sys.modules, 'pynvml', None)  # import fails
    observation = observe(h100)
    assert observation.state == health.UNKNOWN
    assert observation.reason == nvml.NOT_INSTALLED
    # The PCI level is still read.
    assert observation.usage == {'pcie_link_gts': 32.0,
                                 'pcie_link_width': 16}


def test_unknown_without_a_driver_then_healthy_once_it_loads(
        h100, recorded_nvml):
    library = recorded_nvml(driver_loaded=False)
    observation = observe(h100)
    assert observation.state == health.UNKNOWN
    assert observation.reason == 'NVML cannot start: Driver Not Loaded'
    library.driver_loaded = True
    assert observe(h100).state == health.HEALTHY


def test_a_gpu_nvml_does_not_know_is_unknown(driver_conf, host_tree,
                                              recorded_nvml):
    recorded_nvml()
    driver = nvidia.NvidiaGPUDriver(driver_conf(),
                                    pci.PCIReader(host_tree('gpu')))
    observations = {o.address: o for o in driver.observe(driver.discover())}
    t4 = observations['0000:3b:00.0']
    assert t4.state == health.UNKNOWN
    assert t4.reason == 'NVML does not see 0000:3b:00.0'


def test_a_gpu_given_to_a_vm_is_judged_at_the_pci_level(
        h100, h100_tree, recorded_nvml):
    library = recorded_nvml()
    driver, devices = h100
    link = '%s/sys/bus/pci/devices/%s/driver' % (h100_tree, H100)
    os.unlink(link)
    os.symlink('../../../bus/pci/drivers/vfio-pci', link)
    observation = observe(h100)
    assert observation.state == health.HEALTHY
    assert observation.reason == (
        '0000:00:06.0 is bound to vfio-pci, as for a VM; 0000:00:06.0 is '
        'bound to vfio-pci: NVML cannot see it, only the PCI level is '
        'judged')
    assert library.calls == []


def test_the_recording_is_the_h100():
    with open(recorded.recording('h100-vm', 'nvml-record.jsonl')) as f:
        static = json.loads(f.readline())['static']
    assert static['name'] == 'NVIDIA H100 80GB HBM3'
    assert static['xid_events'] == 'registered'


def test_a_recurring_xid_is_named_once_and_the_gpu_stays_unhealthy(
        h100, recorded_nvml):
    library = recorded_nvml()
    library.inject_xid(H100, 79)
    first = observe(h100)
    # The same faults again and again, another kind among them.
    for _ in range(3):
        library.inject_xid(H100, 79)
        library.inject_xid(H100, 48)
        library.inject_xid(H100, 79)
        library.step()
        observation = observe(h100)
        assert observation.state == health.UNHEALTHY
        assert observation.reason == (
            'critical XID 79 (GPU has fallen off the bus); '
            'critical XID 48 (double-bit ECC error)')
    assert first.reason == 'critical XID 79 (GPU has fallen off the bus)'
    # With no new event the GPU is still judged unhealthy, for the same
    # reason: a heartbeat repeats nothing new.
    library.step()
    again = observe(h100)
    assert (again.state, again.reason) == (observation.state,
                                           observation.reason)
    assert len(again.findings) == 2


def test_the_xids_named_are_bounded(h100, recorded_nvml):
    library = recorded_nvml()
    critical = [x for x in range(1, 200) if x not in nvml.APPLICATION_XIDS]
    for xid in critical[:3 * nvml.MAX_XIDS_NAMED]:
        library.inject_xid(H100, xid)
    observation = observe(h100)
    assert observation.state == health.UNHEALTHY
    named = [f.reason for f in observation.findings
             if f.state == health.UNHEALTHY]
    assert len(named) == nvml.MAX_XIDS_NAMED
    # The latest kinds of fault are the ones named.
    assert named[-1].startswith(
        'critical XID %d' % critical[3 * nvml.MAX_XIDS_NAMED - 1])


def test_mig_instances_report_their_memory(h100, mig_nvml):
    """A GPU in MIG mode (the stand-in with the H100's MIG behaviour):
    each MIG instance's identity and memory; none on a card with none."""
    from tests.unit.drivers import test_nvml_mig_standin as mig

    library = mig_nvml()
    assert 'mig_instances' not in observe(h100).usage
    gpu = pynvml.nvmlDeviceGetHandleByPciBusId(H100)
    for name, start in (('3g.40gb', 0), ('1g.10gb', 4)):
        mig.create_ci(mig.create(gpu, name, start))
    observation = observe(h100)
    assert observation.state == health.HEALTHY, observation.reason
    uuids = [i.uuids[0] for i in library.instances(H100)]
    assert [(m['gi_id'], m['ci_id'], m['profile'], m['mig_uuid'],
             m['fb_total_bytes'] // 2 ** 20, m['fb_used_bytes'])
            for m in observation.usage['mig_instances']] == [
        (1, 0, '3g.40gb', uuids[0], 40448, 0),
        (2, 0, '1g.10gb', uuids[1], 9984, 0)]


def test_a_gpu_out_of_mig_mode_reports_no_mig_instances(h100,
                                                        recorded_nvml):
    recorded_nvml()
    observation = observe(h100)
    assert 'mig_instances' not in observation.usage
    assert observation.state == health.HEALTHY, observation.reason
