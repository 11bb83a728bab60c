"""nvidia_gpu_driver on the GPU host: PGPU, vGPU, SR-IOV and noise."""

import os

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.objects import inventory
from tests.unit.drivers.inventory_view import address_of
from tests.unit.drivers.inventory_view import by_controlpath
from tests.unit.drivers.inventory_view import handle_addresses
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

T4_VGPU = {('gpu_devices', 'enabled_vgpu_types'): ['nvidia-222'],
           ('vgpu_nvidia-222', 'device_addresses'): ['0000:3b:00.0']}
A100_VGPU = {('gpu_devices', 'enabled_vgpu_types'): ['nvidia-472'],
             ('vgpu_nvidia-472', 'device_addresses'): [
                 '0000:af:00.4', '0000:af:00.5', '0000:af:00.6']}


def test_every_gpu_is_a_pgpu_without_vgpu_config(discover):
    devices = by_controlpath(discover(nvidia.NvidiaGPUDriver, 'gpu'))
    # The A100's VFs, the RTX's audio/USB/UCSI functions, the NVSwitch and
    # the BMC display are not GPUs.
    assert sorted(devices) == ['0000:3b:00.0', '0000:5e:00.0',
                               '0000:af:00.0']
    for address, device in devices.items():
        assert device.type == 'GPU'
        assert device.vendor == '10de'
        [deployable] = device.deployables
        assert deployable.name == 'pgpu_' + address
        assert deployable.resource_class == 'PGPU'
        assert deployable.num_accelerators == 1
        assert deployable.driver_name == 'nvidia_gpu_driver'
        assert handle_addresses(deployable) == [address]
        assert deployable.attach_handles[0].attach_type == 'PCI'


def test_pgpu_traits_and_board_info(discover):
    a100 = by_controlpath(discover(nvidia.NvidiaGPUDriver,
                                   'gpu'))['0000:af:00.0']
    assert a100.deployables[0].traits == ['CUSTOM_GPU_NVIDIA',
                                          'CUSTOM_GPU_PRODUCT_ID_20F1']
    assert a100.model == 'GA100 [A100 PCIe 40GB]'
    assert a100.std_board_info == {
        'vendor_id': '10de', 'product_id': '20f1', 'class_code': '030200',
        'subsystem_vendor_id': '10de', 'subsystem_product_id': '145f',
        'numa_node': '1', 'sriov_totalvfs': '16',
        'mdev_types': ['nvidia-472', 'nvidia-473']}
    assert a100.vendor_board_info == {'vendor_name': 'NVIDIA Corporation'}


def test_the_vgpu_types_offered_are_in_the_board_info(discover):
    # Whether or not vGPUs are configured: policies are checked by them.
    for config in ({}, T4_VGPU):
        devices = by_controlpath(discover(nvidia.NvidiaGPUDriver, 'gpu',
                                          config))
        assert devices['0000:3b:00.0'].std_board_info['mdev_types'] == [
            'nvidia-222', 'nvidia-223', 'nvidia-230']
        # With SR-IOV, those of its VFs.
        assert devices['0000:af:00.0'].std_board_info['mdev_types'] == [
            'nvidia-472', 'nvidia-473']
        assert 'mdev_types' not in devices['0000:5e:00.0'].std_board_info


def test_model_falls_back_to_the_device_id(discover):
    rtx = by_controlpath(discover(nvidia.NvidiaGPUDriver,
                                  'gpu'))['0000:5e:00.0']
    assert rtx.model == '1e07'


def test_partly_used_vgpu_counts_created_and_free_instances(discover):
    devices = by_controlpath(discover(nvidia.NvidiaGPUDriver, 'gpu',
                                      T4_VGPU))
    [deployable] = devices['0000:3b:00.0'].deployables
    assert deployable.name == 'vgpu_0000:3b:00.0_nvidia-222'
    assert deployable.resource_class == 'VGPU'
    # 14 free plus the 2 that exist: creating an mdev must not shrink it.
    assert deployable.num_accelerators == 16
    assert deployable.traits == ['CUSTOM_GPU_NVIDIA',
                                 'CUSTOM_GPU_PRODUCT_ID_1EB8',
                                 'CUSTOM_VGPU_TYPE_NVIDIA_222']
    assert deployable.attributes == {'vgpu_type': 'nvidia-222',
                                     'vgpu_type_name': 'GRID T4-1B'}
    handles = deployable.attach_handles
    assert {h.attach_type for h in handles} == {'MDEV'}
    assert [h.attach_info['vgpu_mark'] for h in handles] == [
        'nvidia-222_%d' % i for i in range(16)]
    assert handles[3].attach_info == {
        'domain': '0000', 'bus': '3b', 'device': '00', 'function': '0',
        'asked_type': 'nvidia-222', 'vgpu_mark': 'nvidia-222_3'}
    assert len({h.key for h in handles}) == 16
    # GPUs not listed stay whole.
    assert devices['0000:af:00.0'].deployables[0].resource_class == 'PGPU'


def test_vgpus_on_sriov_vfs_belong_to_the_physical_gpu(discover):
    devices = by_controlpath(discover(nvidia.NvidiaGPUDriver, 'gpu',
                                      A100_VGPU))
    assert '0000:af:00.4' not in devices
    [deployable] = devices['0000:af:00.0'].deployables
    assert deployable.name == 'vgpu_0000:af:00.0_nvidia-472'
    # One instance per listed VF; af:00.5 holds a VM's mdev already and
    # af:00.7 is not listed.
    assert handle_addresses(deployable) == [
        '0000:af:00.4', '0000:af:00.5', '0000:af:00.6']
    assert deployable.num_accelerators == 3
    assert [h.attach_info['asked_type'] for h in deployable.attach_handles
            ] == ['nvidia-472'] * 3


def test_a_vf_that_stops_offering_its_type_leaves_the_others_handles(
        fresh_host_tree):
    """The marks count the instances of each function: af:00.4 losing
    the type (a changed VF type, a driver upgrade) changes nothing of
    af:00.6's handle, which a bound ARQ may hold."""
    import shutil

    from tests.unit.drivers.conftest import make_driver_conf

    root = fresh_host_tree('gpu')
    driver = nvidia.NvidiaGPUDriver(make_driver_conf(A100_VGPU),
                                    pci.PCIReader(root))

    def handles():
        [gpu] = [d for d in driver.discover()
                 if d.controlpath_info['bus'] == 'af']
        return {address_of(h.attach_info): h.attach_info
                for h in gpu.deployables[0].attach_handles}

    before = handles()
    assert {a: i['vgpu_mark'] for a, i in before.items()} == dict.fromkeys(
        ['0000:af:00.4', '0000:af:00.5', '0000:af:00.6'], 'nvidia-472_0')
    shutil.rmtree(os.path.join(root, 'sys/class/mdev_bus/0000:af:00.4',
                               'mdev_supported_types/nvidia-472'))
    after = handles()
    assert '0000:af:00.4' not in after
    assert after == {a: i for a, i in before.items()
                     if a != '0000:af:00.4'}


def test_single_type_without_addresses_applies_to_every_capable_gpu(
        discover):
    devices = by_controlpath(discover(
        nvidia.NvidiaGPUDriver, 'gpu',
        {('gpu_devices', 'enabled_vgpu_types'): ['nvidia-472']}))
    assert devices['0000:af:00.0'].deployables[0].num_accelerators == 4
    # The T4 does not offer the type: it stays a PGPU.
    assert devices['0000:3b:00.0'].deployables[0].resource_class == 'PGPU'


def test_configured_type_not_offered_gives_nothing(discover):
    devices = by_controlpath(discover(
        nvidia.NvidiaGPUDriver, 'gpu',
        {('gpu_devices', 'enabled_vgpu_types'): ['nvidia-472'],
         ('vgpu_nvidia-472', 'device_addresses'): ['0000:3b:00.0']}))
    assert devices['0000:3b:00.0'].deployables == []


def test_closed_type_gives_no_empty_provider(discover):
    # nvidia-223 has no free instance and none created on the T4.
    devices = by_controlpath(discover(
        nvidia.NvidiaGPUDriver, 'gpu',
        {('gpu_devices', 'enabled_vgpu_types'): ['nvidia-223'],
         ('vgpu_nvidia-223', 'device_addresses'): ['0000:3b:00.0']}))
    assert devices['0000:3b:00.0'].deployables == []


def test_address_under_two_types_is_refused(driver_conf, host_tree):
    conf = driver_conf({
        ('gpu_devices', 'enabled_vgpu_types'): ['nvidia-222', 'nvidia-223'],
        ('vgpu_nvidia-222', 'device_addresses'): ['0000:3b:00.0'],
        ('vgpu_nvidia-223', 'device_addresses'): ['0000:3b:00.0']})
    with pytest.raises(base.DriverError, match='nvidia-222 and nvidia-223'):
        nvidia.NvidiaGPUDriver(conf, pci.PCIReader(host_tree('gpu')))


def test_prepare_and_release_an_mdev(driver_conf, fresh_host_tree,
                                     privileged_on):
    root = fresh_host_tree('gpu')
    privileged_on(root)
    driver = nvidia.NvidiaGPUDriver(driver_conf(A100_VGPU),
                                    pci.PCIReader(root))
    [device] = [d for d in driver.discover()
                if address_of(d.controlpath_info) == '0000:af:00.0']
    handle = device.deployables[0].attach_handles[2]
    uuid = 'a6b1c2d3-0000-4000-8000-000000000001'
    driver.prepare_attach_handle(device, handle, uuid)
    with open(_create_file(root, '0000:af:00.6')) as f:
        assert f.read() == uuid
    # Nothing was created at that UUID in the recorded tree: no-op.
    driver.release_attach_handle(device, handle, uuid)


def _a100_handle(driver, vf):
    [device] = [d for d in driver.discover()
                if address_of(d.controlpath_info) == '0000:af:00.0']
    [handle] = [h for h in device.deployables[0].attach_handles
                if address_of(h.attach_info) == vf]
    return device, handle


def _create_file(root, vf, type_id='nvidia-472'):
    return os.path.join(root, 'sys/class/mdev_bus', vf,
                        'mdev_supported_types', type_id, 'create')


def test_creating_an_mdev_that_exists_with_its_type_succeeds(
        driver_conf, fresh_host_tree, privileged_on):
    """A bind resumed after a crash creates the mdev again: the kernel
    would answer EEXIST; the driver finds it there and writes nothing."""
    root = fresh_host_tree('gpu')
    privileged_on(root)
    driver = nvidia.NvidiaGPUDriver(driver_conf(A100_VGPU),
                                    pci.PCIReader(root))
    device, handle = _a100_handle(driver, '0000:af:00.5')

    driver.prepare_attach_handle(device, handle, hosts.A100_MDEV)

    with open(_create_file(root, '0000:af:00.5')) as f:
        assert f.read().strip() == ''


def test_creating_an_mdev_that_exists_with_another_type_fails(
        driver_conf, fresh_host_tree, privileged_on):
    root = fresh_host_tree('gpu')
    privileged_on(root)
    driver = nvidia.NvidiaGPUDriver(driver_conf(A100_VGPU),
                                    pci.PCIReader(root))
    device, handle = _a100_handle(driver, '0000:af:00.5')
    conflicting = inventory.AttachHandle('MDEV', dict(
        handle.attach_info, asked_type='nvidia-473'))
    with pytest.raises(base.DriverError,
                       match='Cannot create mdev .*: mdev %s exists with '
                             'type nvidia-472, not nvidia-473'
                             % hosts.A100_MDEV):
        driver.prepare_attach_handle(device, conflicting, hosts.A100_MDEV)
    with open(_create_file(root, '0000:af:00.5', 'nvidia-473')) as f:
        assert f.read().strip() == ''


def test_removing_an_mdev_twice_succeeds(driver_conf, fresh_host_tree,
                                         privileged_on):
    root = fresh_host_tree('gpu')
    privileged_on(root)
    driver = nvidia.NvidiaGPUDriver(driver_conf(A100_VGPU),
                                    pci.PCIReader(root))
    device, handle = _a100_handle(driver, '0000:af:00.5')
    mdev_dir = os.path.realpath(os.path.join(
        root, 'sys/bus/mdev/devices', hosts.A100_MDEV))
    driver.release_attach_handle(device, handle, hosts.A100_MDEV)
    with open(os.path.join(mdev_dir, 'remove')) as f:
        assert f.read() == '1'
    sysfs.kernel_removes_mdev(root, mdev_dir)
    driver.release_attach_handle(device, handle, hosts.A100_MDEV)
    assert not os.path.exists(mdev_dir)


def test_releasing_another_handles_mdev_is_refused(
        driver_conf, fresh_host_tree, privileged_on):
    """A release for the handle of one VF that names the mdev made on
    another VF removes nothing."""
    root = fresh_host_tree('gpu')
    privileged_on(root)
    driver = nvidia.NvidiaGPUDriver(driver_conf(A100_VGPU),
                                    pci.PCIReader(root))
    device, handle = _a100_handle(driver, '0000:af:00.6')
    mdev_dir = os.path.realpath(os.path.join(
        root, 'sys/bus/mdev/devices', hosts.A100_MDEV))
    with pytest.raises(base.DriverError,
                       match='Cannot remove mdev %s of type nvidia-472 on '
                             '0000:af:00.6: .* on 0000:af:00.5' %
                             hosts.A100_MDEV):
        driver.release_attach_handle(device, handle, hosts.A100_MDEV)
    with open(os.path.join(mdev_dir, 'remove')) as f:
        assert f.read().strip() == ''


def test_prepare_fails_cleanly_when_the_type_is_gone(driver_conf, tmp_path,
                                                     privileged_on):
    privileged_on(tmp_path)
    driver = nvidia.NvidiaGPUDriver(driver_conf(T4_VGPU),
                                    pci.PCIReader(str(tmp_path)))
    handle = inventory.AttachHandle('MDEV', {
        'domain': '0000', 'bus': '3b', 'device': '00', 'function': '0',
        'asked_type': 'nvidia-222', 'vgpu_mark': 'nvidia-222_0'})
    with pytest.raises(base.DriverError,
                       match='Cannot create mdev %s of type nvidia-222 on '
                             '0000:3b:00.0: .* does not exist'
                             % hosts.A100_MDEV):
        driver.prepare_attach_handle(None, handle, hosts.A100_MDEV)
    assert os.listdir(tmp_path) == []


def test_pci_handles_need_no_preparation(driver_conf, fresh_host_tree):
    root = fresh_host_tree('gpu')
    driver = nvidia.NvidiaGPUDriver(driver_conf(), pci.PCIReader(root))
    device = driver.discover()[0]
    handle = device.deployables[0].attach_handles[0]
    driver.prepare_attach_handle(device, handle, 'u')
    driver.release_attach_handle(device, handle, 'u')
    with open(os.path.join(root, 'sys/class/mdev_bus/0000:3b:00.0/'
                           'mdev_supported_types/nvidia-222/create')) as f:
        assert f.read().strip() == ''
