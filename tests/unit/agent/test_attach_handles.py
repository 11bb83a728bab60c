"""prepare_attach_handle and release_attach_handle through the agent's
RPC endpoint, over a recorded sysfs tree."""

import json
import logging
import os

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.objects import payload as payloads
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import agent_conf
from tests.unit.drivers.inventory_view import address_of
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

A100_VGPU = {('gpu_devices', 'enabled_vgpu_types'): ['nvidia-472'],
             ('vgpu_nvidia-472', 'device_addresses'): [
                 '0000:af:00.4', '0000:af:00.5', '0000:af:00.6']}
HANDLE_UUID = '3c1d5e7f-9a0b-4c2d-8e4f-a6b7c8d9e0f1'
ARQ_UUID = 'b0a1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d'


@pytest.fixture
def gpu_root(tmp_path, privileged_on):
    """The GPU host's tree, which the agent's privileged calls write."""
    root = str(sysfs.build(str(tmp_path / 'gpu'), hosts.HOSTS['gpu'],
                           pci_ids=hosts.PCI_IDS))
    privileged_on(root)
    return root


def payload(handle, uuid=HANDLE_UUID):
    """The attach handle as the conductor sends it."""
    return {'uuid': uuid, 'attach_type': handle.attach_type,
            'attach_info': dict(handle.attach_info)}


def deployable_at(driver, address):
    [device] = [d for d in driver.discover()
                if address_of(d.controlpath_info) == address]
    [deployable] = device.deployables
    return deployable


def mdev_type_dir(root, parent, type_id):
    return os.path.join(root, 'sys/class/mdev_bus', parent,
                        'mdev_supported_types', type_id)


def test_mdev_is_created_and_removed_with_the_handle_uuid(serve_agent,
                                                          gpu_root):
    conf = agent_conf(A100_VGPU)
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(gpu_root))
    agent = serve_agent(conf, [driver])
    handle = deployable_at(driver, '0000:af:00.0').attach_handles[2]
    assert handle.attach_type == 'MDEV'
    assert address_of(handle.attach_info) == '0000:af:00.6'

    assert agent.api.prepare_attach_handle(
        agent.context, HOST, 'nvidia_gpu_driver', payload(handle),
        ARQ_UUID) is None
    with open(os.path.join(mdev_type_dir(gpu_root, '0000:af:00.6',
                                         'nvidia-472'), 'create')) as f:
        assert f.read() == HANDLE_UUID

    mdev = sysfs.kernel_creates_mdev(gpu_root, '0000:af:00.6', 'nvidia-472')
    assert agent.api.release_attach_handle(
        agent.context, HOST, 'nvidia_gpu_driver', payload(handle),
        ARQ_UUID) is None
    with open(os.path.join(mdev, 'remove')) as f:
        assert f.read() == '1'

    # Once the kernel has removed it, a second release changes nothing.
    sysfs.kernel_removes_mdev(gpu_root, mdev)
    agent.api.release_attach_handle(agent.context, HOST,
                                    'nvidia_gpu_driver', payload(handle),
                                    ARQ_UUID)
    assert not os.path.exists(mdev)


def test_attach_info_may_come_as_json_text(serve_agent, gpu_root):
    conf = agent_conf(A100_VGPU)
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(gpu_root))
    agent = serve_agent(conf, [driver])
    handle = deployable_at(driver, '0000:af:00.0').attach_handles[0]
    sent = payload(handle)
    sent['attach_info'] = json.dumps(sent['attach_info'])
    agent.api.prepare_attach_handle(agent.context, HOST,
                                    'nvidia_gpu_driver', sent, ARQ_UUID)
    with open(os.path.join(mdev_type_dir(gpu_root, '0000:af:00.4',
                                         'nvidia-472'), 'create')) as f:
        assert f.read() == HANDLE_UUID


def test_whole_pci_functions_need_nothing(serve_agent, gpu_root):
    conf = agent_conf()
    gpu_driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(gpu_root))
    fake_driver = fake.FakeDriver(conf, pci.PCIReader(gpu_root))
    agent = serve_agent(conf, [fake_driver, gpu_driver])
    before = sorted(os.walk(gpu_root))
    pgpu = deployable_at(gpu_driver, '0000:3b:00.0').attach_handles[0]
    test_pci = fake_driver.discover()[0].deployables[0].attach_handles[5]
    assert (pgpu.attach_type, test_pci.attach_type) == ('PCI', 'TEST_PCI')
    for driver_name, handle in (('nvidia_gpu_driver', pgpu),
                                ('fake_driver', test_pci)):
        for call in (agent.api.prepare_attach_handle,
                     agent.api.release_attach_handle):
            assert call(agent.context, HOST, driver_name, payload(handle),
                        ARQ_UUID) is None
    assert sorted(os.walk(gpu_root)) == before
    with open(os.path.join(mdev_type_dir(gpu_root, '0000:3b:00.0',
                                         'nvidia-222'), 'create')) as f:
        assert f.read().strip() == ''


def test_unknown_driver_is_a_clear_error_logged_in_one_line(
        serve_agent, caplog):
    conf = agent_conf()
    driver = fake.FakeDriver(conf, pci.PCIReader('/'))
    agent = serve_agent(conf, [driver])
    handle = driver.discover()[0].deployables[0].attach_handles[0]
    caplog.set_level(logging.DEBUG)
    with pytest.raises(agent_rpcapi.DriverNotEnabled) as caught:
        agent.api.prepare_attach_handle(agent.context, HOST,
                                        'nvidia_gpu_driver', payload(handle),
                                        ARQ_UUID)
    assert caught.value.message == (
        'Driver nvidia_gpu_driver is not enabled on host compute1 '
        '(enabled: fake_driver)')
    assert caught.value.status == 404
    [line] = [r for r in caplog.records if r.name == 'cyborg.agent.manager']
    assert line.levelno == logging.WARNING
    assert 'prepare_attach_handle requested by the conductor failed: ' \
        'DriverNotEnabled: Driver nvidia_gpu_driver' in line.getMessage()
    assert line.exc_info is None
    # No traceback anywhere: the error is expected.
    assert not [r for r in caplog.records
                if r.exc_info or r.levelno >= logging.ERROR]


def test_handle_not_on_this_host(serve_agent):
    conf = agent_conf()
    driver = fake.FakeDriver(conf, pci.PCIReader('/'))
    agent = serve_agent(conf, [driver])
    handle = driver.discover()[0].deployables[0].attach_handles[0]
    gone = payload(handle)
    gone['attach_info'] = dict(gone['attach_info'], bus='0d')
    for call in (agent.api.prepare_attach_handle,
                 agent.api.release_attach_handle):
        with pytest.raises(agent_rpcapi.NotOnThisHost) as caught:
            call(agent.context, HOST, 'fake_driver', gone, ARQ_UUID)
        assert caught.value.message == (
            'Driver fake_driver on host compute1 finds no TEST_PCI attach '
            'handle ffff:0d:00.1 (%s)' % HANDLE_UUID)
    # Another type at the same address is another handle.
    with pytest.raises(agent_rpcapi.NotOnThisHost):
        agent.api.prepare_attach_handle(
            agent.context, HOST, 'fake_driver',
            dict(payload(handle), attach_type='PCI'), ARQ_UUID)


def test_malformed_attach_handle_is_refused(serve_agent):
    conf = agent_conf()
    agent = serve_agent(conf, [fake.FakeDriver(conf, pci.PCIReader('/'))])
    with pytest.raises(payloads.PayloadError,
                       match='attach handle payload .* lacks attach_info'):
        agent.api.prepare_attach_handle(
            agent.context, HOST, 'fake_driver',
            {'uuid': HANDLE_UUID, 'attach_type': 'TEST_PCI'}, ARQ_UUID)


def test_driver_failure_reaches_the_caller(serve_agent, gpu_root):
    root = gpu_root
    conf = agent_conf(A100_VGPU)
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(root))
    agent = serve_agent(conf, [driver])
    handle = deployable_at(driver, '0000:af:00.0').attach_handles[0]
    # The write is refused (here: ``create`` is no regular file).
    create = os.path.join(mdev_type_dir(root, '0000:af:00.4', 'nvidia-472'),
                          'create')
    os.remove(create)
    os.mkdir(create)
    with pytest.raises(base.DriverError,
                       match='Cannot create mdev %s of type nvidia-472 on '
                             '0000:af:00.4' % HANDLE_UUID):
        agent.api.prepare_attach_handle(agent.context, HOST,
                                        'nvidia_gpu_driver', payload(handle),
                                        ARQ_UUID)
