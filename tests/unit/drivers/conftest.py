"""Recorded hosts written as sysfs trees, and configurations for drivers."""

from oslo_config import cfg
import pytest

from cyborg.accelerator.drivers import pci
from cyborg.conf import gpu_devices
from cyborg.conf import intel_nic
from cyborg.conf import pci as pci_conf
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs


@pytest.fixture(scope='session')
def host_tree(tmp_path_factory):
    """host_tree(name) -> root of that host's tree, written once a session.

    Tests that change a tree (creating mdevs) take ``fresh_host_tree``.
    """
    roots = {}

    def build(name):
        if name not in roots:
            roots[name] = str(sysfs.build(
                str(tmp_path_factory.mktemp(name)), hosts.HOSTS[name],
                pci_ids=hosts.PCI_IDS))
        return roots[name]
    return build


@pytest.fixture
def fresh_host_tree(tmp_path):
    def build(name):
        return str(sysfs.build(str(tmp_path / name), hosts.HOSTS[name],
                               pci_ids=hosts.PCI_IDS))
    return build


def make_driver_conf(options=None):
    """A parsed configuration with the driver options.

    ``options`` maps ``(group, option)`` to a value; vGPU groups are
    registered once ``enabled_vgpu_types`` is set, as the driver does.
    """
    overrides = dict(options or {})
    conf = cfg.ConfigOpts()
    for module in (pci_conf, gpu_devices, intel_nic):
        module.register_opts(conf)
    conf([], project='cyborg', default_config_files=[])
    types = overrides.pop(('gpu_devices', 'enabled_vgpu_types'), None)
    if types is not None:
        conf.set_override('enabled_vgpu_types', types, group='gpu_devices')
        gpu_devices.register_dynamic_opts(conf)
    for (group, name), value in overrides.items():
        conf.set_override(name, value, group=group)
    return conf


@pytest.fixture
def driver_conf():
    return make_driver_conf


@pytest.fixture
def discover(host_tree):
    """discover(driver class, host name, options) -> devices."""
    def run(driver_class, host, options=None):
        driver = driver_class(make_driver_conf(options),
                              pci.PCIReader(host_tree(host)))
        return driver.discover()
    return run

