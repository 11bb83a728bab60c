"""Recorded hosts written as sysfs trees, configurations for drivers, and
stand-ins for the vendor tools that program FPGAs."""

import os
import shlex

from oslo_config import cfg
import pytest

from cyborg.accelerator.drivers import pci
from cyborg.conf import fake_driver
from cyborg.conf import gpu_devices
from cyborg.conf import intel_nic
from cyborg.conf import pci as pci_conf
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import recorded
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
    for module in (pci_conf, gpu_devices, intel_nic, fake_driver):
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



class FakeTool:
    """A vendor tool that cannot run here, as a script first on PATH.

    It records its arguments (one per line) and the bytes of the file
    named by its last argument, runs ``extra`` (shell), writes ``stderr``
    and exits with ``status``.
    """

    def __init__(self, directory, name):
        self.argv_file = directory / (name + '.argv')
        self.input_file = directory / (name + '.input')

    @property
    def ran(self):
        return self.argv_file.exists()

    @property
    def argv(self):
        return self.argv_file.read_text().splitlines()

    @property
    def input(self):
        return self.input_file.read_bytes()


@pytest.fixture
def fake_tool(tmp_path, monkeypatch):
    """fake_tool(name, status=0, stderr='', extra='') -> FakeTool.

    PATH holds only the tools installed this way (and what /bin:/usr/bin
    hold for the scripts themselves).
    """
    bindir = tmp_path / 'fake-tools'
    bindir.mkdir()
    monkeypatch.setenv('PATH', os.pathsep.join([str(bindir), '/usr/bin',
                                                '/bin']))

    def install(name, status=0, stderr='', extra=''):
        tool = FakeTool(tmp_path, name)
        script = bindir / name
        script.write_text(
            '#!/bin/sh\n'
            'printf "%%s\\n" "$@" > %(argv)s\n'
            'for last in "$@"; do :; done\n'
            'cat "$last" > %(input)s 2>/dev/null\n'
            '%(extra)s\n'
            'printf "%%s" %(stderr)s >&2\n'
            'exit %(status)d\n'
            % {'argv': shlex.quote(str(tool.argv_file)),
               'input': shlex.quote(str(tool.input_file)),
               'extra': extra, 'stderr': shlex.quote(stderr),
               'status': status})
        script.chmod(0o755)
        return tool
    return install


@pytest.fixture
def h100_tree(tmp_path):
    """A fresh copy of the sysfs tree recorded on the H100 machine."""
    return recorded.unpack('h100-vm', tmp_path / 'h100-vm')


@pytest.fixture
def u50_golden_tree(tmp_path):
    """The sysfs tree of a host with an Alveo U50 in its golden image."""
    return recorded.unpack('u50-golden', tmp_path / 'u50-golden')


@pytest.fixture
def recorded_nvml(monkeypatch):
    """recorded_nvml(**kw) -> the H100's NVML recording, under the real
    NVML bindings for this test."""
    # The bindings are a test requirement, but only these tests need them.
    from tests.unit.drivers import nvml_standin

    def install(**kw):
        return nvml_standin.install(monkeypatch, nvml_standin.RecordedNVML(
            recorded.recording('h100-vm', 'nvml-record.jsonl'), **kw))
    return install


@pytest.fixture
def mig_nvml(monkeypatch):
    """mig_nvml(*addresses, **kw) -> the H100's NVML recording with its
    MIG behaviour, MIG mode on (``mig_enabled=False``: off, as recorded),
    under the real NVML bindings for this test; ``addresses`` are more
    GPUs of the same kind."""
    from tests.unit.drivers import nvml_mig_standin
    from tests.unit.drivers import nvml_standin

    def install(*addresses, **kw):
        library = nvml_mig_standin.MIGCapableNVML(
            recorded.recording('h100-vm', 'nvml-record.jsonl'), **kw)
        for address in addresses:
            library.add_gpu(address)
        return nvml_standin.install(monkeypatch, library)
    return install


def h100_on_demand_host(root, monkeypatch, privileged_on, mig_nvml,
                        addresses=None):
    """The recorded H100 host's GPU (and its bridge) written at ``root``
    (or the recorded H100 at each of ``addresses``, ``hosts.h100s``),
    the stand-in serving it with its MIG behaviour, and the agent's
    privileged calls running in the test process on that tree, with no
    card an earlier test's daemon knew. Returns the stand-in."""
    from cyborg.privsep import mig as privsep_mig

    if addresses is None:
        sysfs.build(root, [f for f in hosts.H100_HOST
                           if f.bdf in {hosts.H100.bdf, hosts.H100.parent}])
        addresses = [hosts.H100.bdf]
    else:
        sysfs.build(root, hosts.h100s(addresses))
    library = mig_nvml(*addresses)
    privileged_on(str(root))
    monkeypatch.setattr(privsep_mig, '_cards', {})
    return library
