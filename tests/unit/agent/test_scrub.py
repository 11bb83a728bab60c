"""Scrubbing released attach handles through the agent's RPC endpoint,
over recorded sysfs trees: what each deployable reports as its scrub
method, a GPU passed through reset and checked, a vGPU checked gone."""

import dataclasses
import os

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import scrub
from cyborg.accelerator.drivers.gpu import nvidia
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import agent_conf
from tests.unit.agent.test_attach_handles import A100_VGPU
from tests.unit.agent.test_attach_handles import ARQ_UUID
from tests.unit.agent.test_attach_handles import HANDLE_UUID
from tests.unit.agent.test_attach_handles import deployable_at
from tests.unit.agent.test_attach_handles import payload
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

DRIVER = 'nvidia_gpu_driver'
RTX = '0000:5e:00.0'


def _tree(tmp_path, privileged_on, rtx_driver='vfio-pci'):
    """The GPU host, its workstation GPU bound to ``rtx_driver`` with a
    function-level reset."""
    functions = [dataclasses.replace(f, driver=rtx_driver,
                                     reset_method='flr')
                 if f.bdf == RTX else f for f in hosts.HOSTS['gpu']]
    root = str(sysfs.build(str(tmp_path / 'gpu'), functions,
                           pci_ids=hosts.PCI_IDS))
    privileged_on(root)
    return root


def _scrub(agent, handle, method):
    return agent.api.scrub_attach_handle(agent.context, HOST, DRIVER,
                                         payload(handle), method, 10)


def test_each_deployable_reports_how_it_is_scrubbed(tmp_path,
                                                    privileged_on,
                                                    serve_agent):
    root = _tree(tmp_path, privileged_on)
    conf = agent_conf(A100_VGPU)
    agent = serve_agent(conf, [nvidia.NvidiaGPUDriver(
        conf, pci.PCIReader(root))])
    methods = {d.name: d.attributes.get('scrub_method')
               for device in agent.manager.discover().devices
               for d in device.deployables}
    assert methods['pgpu_' + RTX] == scrub.FLR
    vgpus = [m for name, m in methods.items() if name.startswith('vgpu_')]
    assert vgpus and set(vgpus) == {scrub.MDEV_DESTROY}

    # Turned off for the driver: no deployable says it is scrubbed.
    conf.set_override('disabled_drivers', [DRIVER], group='scrub')
    assert not any('scrub_method' in d.attributes
                   for device in agent.manager.discover().devices
                   for d in device.deployables)


def test_a_gpu_passed_through_is_reset_and_checked(tmp_path, privileged_on,
                                                   serve_agent):
    root = _tree(tmp_path, privileged_on)
    conf = agent_conf()
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(root))
    agent = serve_agent(conf, [driver])
    handle, = deployable_at(driver, RTX).attach_handles

    done = _scrub(agent, handle, scrub.FLR)
    assert done['method'] == scrub.FLR
    assert done['steps'] == ['reset', 'verify']
    assert done['seconds'] >= 0
    with open(os.path.join(root, 'sys/bus/pci/devices', RTX, 'reset')) as f:
        assert f.read() == '1'

    # Gone from the bus after the reset: the verification fails. (The
    # agent would not find the handle any more: the driver's scrub is
    # called directly.)
    os.unlink(os.path.join(root, 'sys/bus/pci/devices', RTX, 'vendor'))
    with pytest.raises(base.ScrubFailed) as failed:
        scrub.reset_function(driver.pci_health,
                             nvidia._handle_address(handle), nvidia.VENDOR_ID)
    assert failed.value.step == 'verify'
    assert 'did not come back' in failed.value.message


def test_a_gpu_its_host_driver_holds_is_not_reset(tmp_path, privileged_on,
                                                  serve_agent):
    root = _tree(tmp_path, privileged_on, rtx_driver='nvidia')
    conf = agent_conf()
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(root))
    agent = serve_agent(conf, [driver])
    handle, = deployable_at(driver, RTX).attach_handles
    with pytest.raises(base.ScrubFailed) as failed:
        _scrub(agent, handle, scrub.FLR)
    assert failed.value.step == 'reset'
    assert 'bound to nvidia, not vfio-pci' in failed.value.message
    with open(os.path.join(root, 'sys/bus/pci/devices', RTX, 'reset')) as f:
        assert f.read() == ''


def test_a_vgpu_is_checked_gone_and_its_type_free_again(tmp_path,
                                                        privileged_on,
                                                        serve_agent,
                                                        monkeypatch):
    monkeypatch.setattr(scrub, 'MDEV_SETTLE', 0.3)
    root = _tree(tmp_path, privileged_on)
    conf = agent_conf(A100_VGPU)
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(root))
    agent = serve_agent(conf, [driver])
    handle = deployable_at(driver, '0000:af:00.0').attach_handles[2]
    agent.api.prepare_attach_handle(agent.context, HOST, DRIVER,
                                    payload(handle), ARQ_UUID)
    mdev = sysfs.kernel_creates_mdev(root, '0000:af:00.6', 'nvidia-472')

    # The kernel has not removed it: the scrub asks again, and the
    # verification sees it still there.
    with pytest.raises(base.ScrubFailed) as failed:
        _scrub(agent, handle, scrub.MDEV_DESTROY)
    assert failed.value.step == 'verify'
    assert 'mdev %s is still on 0000:af:00.6' % HANDLE_UUID in (
        failed.value.message)
    with open(os.path.join(mdev, 'remove')) as f:
        assert f.read() == '1'

    sysfs.kernel_removes_mdev(root, mdev)
    assert _scrub(agent, handle, scrub.MDEV_DESTROY)['steps'] == [
        'destroy', 'verify']
