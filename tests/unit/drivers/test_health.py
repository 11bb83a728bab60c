"""PCI-level health: two successive observations of a recorded tree, with
the change a real fault makes to sysfs in between."""

import os
import shutil
import sys

import pytest

from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.aichip import huawei_ascend
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.accelerator.drivers.nic import intel as intel_nic
from cyborg.accelerator.drivers.qat import intel as intel_qat
from cyborg.accelerator.drivers.ssd import inspur_nvme
from cyborg.objects import inventory

H100 = '0000:00:06.0'

# aer_dev_fatal as the kernel prints it, counts to fill in.
AER_FATAL = ('Undefined {0}\nDLP {1}\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\n'
             'CmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP {2}\nECRC 0\n'
             'UnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n'
             'AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\n'
             'TOTAL_ERR_FATAL {3}\n')


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


class Host:
    """A driver on a tree, discovered once, then observed."""

    def __init__(self, driver_class, root, conf):
        self.root = root
        self.driver = driver_class(conf, pci.PCIReader(root))
        self.devices = self.driver.discover()

    def path(self, address, *names):
        return os.path.join(self.root, 'sys/bus/pci/devices', address,
                            *names)

    def write(self, address, name, text):
        _write(self.path(address, name), text)

    def observe(self):
        return {o.address: o for o in self.driver.observe(self.devices)}


@pytest.fixture
def h100(h100_tree, driver_conf, monkeypatch):
    # The PCI level only: NVML is not there.
    monkeypatch.setitem(sys.modules, 'pynvml', None)
    host = Host(nvidia.NvidiaGPUDriver, h100_tree, driver_conf())
    for name, counts in (('aer_dev_fatal', (0, 0, 0, 0)),
                         ('aer_dev_nonfatal', (0, 0, 0, 0))):
        host.write(H100, name, AER_FATAL.format(*counts))
    return host


def _pci_findings(observation):
    # What the PCI level found: NVML's "unknown" left out.
    return [(f.state, f.reason) for f in observation.findings
            if not f.reason.startswith('the NVML bindings')]


def test_first_observation_of_the_recorded_h100_is_the_baseline(h100):
    h100.write(H100, 'aer_dev_fatal', AER_FATAL.format(0, 3, 0, 3))
    observation = h100.observe()[H100]
    # Errors from before the agent looked are not judged.
    assert _pci_findings(observation) == []
    assert observation.state == health.UNKNOWN  # no NVML here
    assert observation.usage == {'pcie_link_gts': 32.0,
                                 'pcie_link_width': 16}


def test_fatal_aer_counter_that_increases_is_unhealthy(h100):
    h100.observe()
    h100.write(H100, 'aer_dev_fatal', AER_FATAL.format(0, 1, 2, 3))
    observation = h100.observe()[H100]
    assert observation.state == health.UNHEALTHY
    assert observation.reason == (
        'PCIe AER fatal errors on 0000:00:06.0: DLP +1, MalfTLP +2')
    # Counters that stay put are not judged again.
    assert h100.observe()[H100].state == health.UNKNOWN


def test_non_fatal_aer_counter_that_increases_is_degraded(h100):
    h100.observe()
    h100.write(H100, 'aer_dev_nonfatal', AER_FATAL.format(1, 0, 0, 1))
    observation = h100.observe()[H100]
    assert observation.state == health.DEGRADED
    assert observation.reason == (
        'PCIe AER non-fatal errors on 0000:00:06.0: Undefined +1')


def test_driver_unbound_is_unhealthy(h100):
    assert h100.observe()[H100].state == health.UNKNOWN
    os.unlink(h100.path(H100, 'driver'))
    observation = h100.observe()[H100]
    assert observation.state == health.UNHEALTHY
    assert observation.reason == (
        'kernel driver nvidia was unbound from 0000:00:06.0')


def test_driver_changed_is_degraded(h100):
    h100.observe()
    os.unlink(h100.path(H100, 'driver'))
    os.symlink('../../../bus/pci/drivers/nouveau', h100.path(H100, 'driver'))
    observation = h100.observe()[H100]
    assert observation.state == health.DEGRADED
    assert observation.reason == (
        'kernel driver of 0000:00:06.0 changed from nvidia to nouveau')


def test_device_that_disappears_is_unhealthy(h100):
    h100.observe()
    shutil.rmtree(h100.path(H100))
    observation = h100.observe()[H100]
    assert observation.state == health.UNHEALTHY
    assert observation.reason == '0000:00:06.0 is gone from the PCI bus'
    assert observation.usage == {}


def test_link_that_retrains_narrower_is_degraded(h100):
    h100.observe()
    h100.write(H100, 'current_link_width', '8\n')
    observation = h100.observe()[H100]
    assert observation.state == health.DEGRADED
    assert observation.reason == (
        'PCIe link of 0000:00:06.0 trained at x8, below its maximum x16')
    assert observation.usage['pcie_link_width'] == 8


def test_a_gpu_link_slower_than_its_maximum_is_power_saving(h100):
    h100.observe()
    h100.write(H100, 'current_link_speed', '2.5 GT/s PCIe\n')
    observation = h100.observe()[H100]
    assert _pci_findings(observation) == []
    assert observation.usage['pcie_link_gts'] == 2.5


QAT = '0000:3d:00.0'


@pytest.fixture
def io_host(fresh_host_tree, driver_conf):
    def build(driver_class):
        return Host(driver_class, fresh_host_tree('io'), driver_conf())
    return build


def test_other_devices_are_judged_on_link_speed_too(io_host):
    host = io_host(intel_qat.IntelQATDriver)
    for name, value in (('max_link_speed', '8.0 GT/s PCIe'),
                        ('current_link_speed', '8.0 GT/s PCIe'),
                        ('max_link_width', '16'),
                        ('current_link_width', '16')):
        host.write(QAT, name, value + '\n')
    assert host.observe()[QAT].state == health.HEALTHY
    host.write(QAT, 'current_link_speed', '5.0 GT/s PCIe\n')
    observation = host.observe()[QAT]
    assert observation.state == health.DEGRADED
    assert observation.reason == ('PCIe link of 0000:3d:00.0 trained at 5.0 '
                                  'GT/s, below its maximum 8.0 GT/s')


def test_a_device_without_link_or_aer_files_is_healthy(io_host):
    # Virtual machines and older kernels show neither.
    host = io_host(huawei_ascend.HuaweiAscendDriver)
    observations = host.observe()
    assert sorted(observations) == ['0000:82:00.0', '0000:84:00.0',
                                    '0000:8a:00.0']
    assert {o.state for o in observations.values()} == {health.HEALTHY}
    assert {o.reason for o in observations.values()} == {'no problem seen'}


def test_qat_endpoint_that_is_down_is_degraded(io_host):
    host = io_host(intel_qat.IntelQATDriver)
    host.write(QAT, 'qat/state', 'up\n')
    assert host.observe()[QAT].state == health.HEALTHY
    host.write(QAT, 'qat/state', 'down\n')
    observation = host.observe()[QAT]
    assert (observation.state, observation.reason) == (
        health.DEGRADED, 'QAT endpoint 0000:3d:00.0 is down')


SSD = '0000:b1:00.0'


def test_nvme_controller_state_and_temperature(io_host):
    host = io_host(inspur_nvme.InspurNVMeSSDDriver)
    hwmon = 'nvme/nvme0/hwmon3/'
    host.write(SSD, 'nvme/nvme0/state', 'live\n')
    host.write(SSD, hwmon + 'temp1_label', 'Composite\n')
    host.write(SSD, hwmon + 'temp1_input', '38850\n')
    host.write(SSD, hwmon + 'temp1_max', '84850\n')
    host.write(SSD, hwmon + 'temp1_crit', '89850\n')
    observation = host.observe()[SSD]
    assert observation.state == health.HEALTHY
    assert observation.usage == {'temperature_c': 38.85,
                                 'nvme_state': 'live'}
    host.write(SSD, hwmon + 'temp1_input', '85000\n')
    assert host.observe()[SSD].reason == (
        'Composite at 85 °C, at or above its maximum 84.85 °C')
    host.write(SSD, 'nvme/nvme0/state', 'dead\n')
    observation = host.observe()[SSD]
    assert observation.state == health.UNHEALTHY
    assert observation.reason == (
        'NVMe controller nvme0 of 0000:b1:00.0 is dead')


def test_network_interface_state_is_usage_not_health(io_host):
    host = io_host(intel_nic.IntelNICDriver)
    port = '0000:18:00.0'
    host.write(port, 'net/eth2/operstate', 'down\n')
    observation = host.observe()[port]
    assert observation.state == health.HEALTHY
    assert observation.usage == {'net': {'eth2': 'down'}}


def test_observation_as_a_dict():
    observation = health.Observation.of(
        H100, [health.Finding(health.DEGRADED, 'a'),
               health.Finding(health.UNKNOWN, 'b'),
               health.Finding(health.DEGRADED, 'c')],
        {'power_mw': 1}, observed_at=12.5)
    assert observation.to_dict() == {
        'address': H100, 'state': 'degraded', 'reason': 'a; c',
        'observed_at': 12.5, 'usage': {'power_mw': 1},
        'findings': [{'state': 'degraded', 'reason': 'a'},
                     {'state': 'unknown', 'reason': 'b'},
                     {'state': 'degraded', 'reason': 'c'}]}


def test_non_pci_control_path_is_unknown(driver_conf):
    driver = huawei_ascend.HuaweiAscendDriver(driver_conf(),
                                              pci.PCIReader('/nonexistent'))
    device = inventory.Device(type='AICHIP', vendor='19e5', model='x',
                              controlpath_type='PLATFORM',
                              controlpath_info={'path': '/dev/davinci0'},
                              std_board_info={}, vendor_board_info={},
                              deployables=[])
    [observation] = driver.observe([device])
    assert observation.state == health.UNKNOWN
    assert observation.reason == 'no health check for control path PLATFORM'


def test_fake_driver_is_always_healthy(driver_conf):
    driver = fake.FakeDriver(driver_conf(), pci.PCIReader('/nonexistent'))
    [observation] = driver.observe(driver.discover())
    assert observation.state == health.HEALTHY
    assert observation.address == 'ffff:0c:00.0'
