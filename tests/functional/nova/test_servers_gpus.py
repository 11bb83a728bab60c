"""Servers booted through Nova with GPUs of the recorded-layout host
(``nova_cloud.GPU_FUNCTIONS``): four whole GPUs from one pooled provider
in one request group, and a vGPU whose mdev the agent's privsep daemon
makes for the bind and removes at the delete."""

import os
import time

from tests import nova_cloud
from tests.functional.nova import servers as nova_servers
from tests.functional.nova.conftest import SHARED
from tests.unit.drivers.trees import sysfs

pytestmark = SHARED


def _address(info):
    return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                            info['function'])


def _arqs(cloud, instance):
    return cloud.cyborg_call('GET', '/v2/accelerator_requests', params={
        'instance': instance}).json()['arqs']


def _accel_flavor(cloud, name, groups):
    nova_servers.device_profile(cloud, name, groups)
    return nova_servers.flavor(cloud, 'accel-' + name,
                               {'accel:device_profile': name})


def test_a_server_gets_four_pooled_gpus_from_one_request_group(cloud):
    four = _accel_flavor(cloud, 'four-gpus', [{'resources:PGPU': '4'}])
    one = _accel_flavor(cloud, 'one-gpu', [{'resources:PGPU': '1'}])

    booted, = nova_servers.boot_many(cloud, four, 1, 'four-gpus')

    nova_servers.report('4 pooled GPUs boot', booted)
    assert booted.status == 'ACTIVE', booted
    arqs = _arqs(cloud, booted.id)
    assert [a['state'] for a in arqs] == ['Bound'] * 4, arqs
    assert {a['device_rp_uuid'] for a in arqs} == {cloud.pgpu_rp}
    # Each ARQ its own H100, handed over whole.
    assert {a['attach_handle_type'] for a in arqs} == {'PCI'}
    assert sorted(_address(a['attach_handle_info']) for a in arqs) == (
        sorted(nova_cloud.H100S))
    held = nova_servers.wait_consistent(cloud)
    assert held.allocations == {booted.id: 4}
    assert held.handles_in_use == 4

    # The pool is empty: one more GPU does not fit.
    extra, = nova_servers.boot_many(cloud, one, 1, 'fifth-gpu')

    nova_servers.report('5th GPU boot', extra)
    assert extra.status == 'ERROR'
    assert 'No valid host' in extra.fault, extra.fault
    held = nova_servers.wait_consistent(cloud)
    assert held.allocations == {booted.id: 4}
    assert not _arqs(cloud, extra.id)

    nova_servers.delete(cloud, [booted.id, extra.id])
    held = nova_servers.wait_consistent(cloud)
    assert (held.arqs, held.handles_in_use, held.allocations) == ([], 0, {})


def _create_file(cloud):
    return os.path.join(cloud.sysfs_root, 'sys/class/mdev_bus',
                        nova_cloud.T4, 'mdev_supported_types',
                        nova_cloud.VGPU_TYPE, 'create')


def _available(cloud, count):
    """The kernel counts the instances the type still offers: one less
    while an mdev exists (the driver offers available plus made)."""
    path = os.path.join(os.path.dirname(_create_file(cloud)),
                        'available_instances')
    with open(path, 'w') as f:
        f.write(str(count))


def _wait_removed(mdev, timeout=60):
    """Once the agent wrote 1 to the mdev's ``remove``."""
    deadline = time.monotonic() + timeout
    while True:
        with open(os.path.join(mdev, 'remove')) as f:
            if f.read() == '1':
                return
        assert time.monotonic() < deadline, 'mdev %s not removed' % mdev
        time.sleep(0.05)


def _boot_vgpu(cloud, flavor, name):
    booted, = nova_servers.boot_many(cloud, flavor, 1, name)
    nova_servers.report('vGPU boot', booted)
    assert booted.status == 'ACTIVE', booted
    arq, = _arqs(cloud, booted.id)
    assert arq['state'] == 'Bound'
    assert arq['device_rp_uuid'] == cloud.vgpu_rp
    assert arq['attach_handle_type'] == 'MDEV'
    info = arq['attach_handle_info']
    assert (_address(info), info['asked_type']) == (
        nova_cloud.T4, nova_cloud.VGPU_TYPE)
    return booted, arq


def test_a_vgpu_is_made_for_each_bind_and_removed_with_its_server(cloud):
    flavor = _accel_flavor(cloud, 'one-vgpu', [{
        'resources:VGPU': '1',
        'trait:CUSTOM_VGPU_TYPE_NVIDIA_222': 'required'}])

    first, arq = _boot_vgpu(cloud, flavor, 'vgpu')

    # The privsep daemon asked the kernel for an mdev named after this
    # bind; the kernel (played here) makes it.
    with open(_create_file(cloud)) as f:
        assert f.read() == arq['attach_handle_uuid']
    mdev = sysfs.kernel_creates_mdev(cloud.sysfs_root, nova_cloud.T4,
                                     nova_cloud.VGPU_TYPE)
    _available(cloud, nova_cloud.VGPUS - 1)
    held = nova_servers.wait_consistent(cloud)
    assert held.allocations == {first.id: 1}

    nova_servers.delete(cloud, [first.id])

    # The agent asks the kernel to remove it; the kernel (played here)
    # does, and the scrub then finds it gone and the type free again.
    _wait_removed(mdev)
    sysfs.kernel_removes_mdev(cloud.sysfs_root, mdev)
    _available(cloud, nova_cloud.VGPUS)
    held = nova_servers.wait_consistent(cloud)
    assert (held.arqs, held.handles_in_use, held.allocations) == ([], 0, {})

    # The next server's mdev has a name of its own, even on the same
    # attach handle: a late release of the first cannot remove it.
    second, again = _boot_vgpu(cloud, flavor, 'vgpu-again')
    with open(_create_file(cloud)) as f:
        assert f.read() == again['attach_handle_uuid']
    assert again['attach_handle_uuid'] != arq['attach_handle_uuid']

    nova_servers.delete(cloud, [second.id])
    held = nova_servers.wait_consistent(cloud)
    assert (held.arqs, held.handles_in_use, held.allocations) == ([], 0, {})
