"""QAT, NIC, NVMe SSD and Ascend drivers on the I/O host."""

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.aichip import huawei_ascend
from cyborg.accelerator.drivers.nic import intel as intel_nic
from cyborg.accelerator.drivers.qat import intel as intel_qat
from cyborg.accelerator.drivers.ssd import inspur_nvme
from tests.unit.drivers.inventory_view import by_controlpath
from tests.unit.drivers.inventory_view import handle_addresses


def test_qat_one_deployable_per_vf(discover):
    devices = by_controlpath(discover(intel_qat.IntelQATDriver, 'io'))
    assert sorted(devices) == ['0000:3d:00.0', '0000:3f:00.0',
                               '0000:6b:00.0']
    c62x = devices['0000:3d:00.0']
    assert (c62x.type, c62x.vendor) == ('QAT', '8086')
    assert [d.name for d in c62x.deployables] == [
        'qat_0000:3d:01.0', 'qat_0000:3d:01.1', 'qat_0000:3d:01.2',
        'qat_0000:3d:01.3']
    for deployable in c62x.deployables:
        assert deployable.resource_class == 'CUSTOM_QAT'
        assert deployable.num_accelerators == 1
        assert deployable.traits == ['CUSTOM_QAT_INTEL',
                                     'CUSTOM_QAT_PRODUCT_ID_37C8']
        assert handle_addresses(deployable) == [deployable.name[4:]]
    assert [d.name for d in devices['0000:6b:00.0'].deployables] == [
        'qat_0000:6b:00.1', 'qat_0000:6b:00.2']
    assert devices['0000:6b:00.0'].deployables[0].traits[1] == (
        'CUSTOM_QAT_PRODUCT_ID_4940')


def test_qat_endpoint_without_vfs_offers_nothing(discover):
    devices = by_controlpath(discover(intel_qat.IntelQATDriver, 'io'))
    assert devices['0000:3f:00.0'].deployables == []


PHYSNETS = {('intel_nic', 'physical_device_mappings'): [
    'physnet1:eth2', 'physnet2:0000:b6:00.0'],
    ('intel_nic', 'function_device_mappings'): ['GTPv1:eth2']}


def test_nic_vfs_of_a_port_with_physnet_and_function(discover):
    devices = by_controlpath(discover(intel_nic.IntelNICDriver, 'io',
                                      PHYSNETS))
    # The Mellanox port is not an Intel NIC; VFs are not ports.
    assert sorted(devices) == ['0000:18:00.0', '0000:18:00.1',
                               '0000:b6:00.0']
    [x710] = devices['0000:18:00.0'].deployables
    assert x710.name == 'nic_0000:18:00.0'
    assert x710.resource_class == 'CUSTOM_NIC'
    assert x710.num_accelerators == 4
    assert x710.traits == ['CUSTOM_NIC_INTEL', 'CUSTOM_NIC_PRODUCT_ID_1572',
                           'CUSTOM_PHYSNET_PHYSNET1',
                           'CUSTOM_NIC_FUNCTION_GTPV1']
    assert x710.attributes == {'function': 'GTPv1'}
    assert handle_addresses(x710) == ['0000:18:02.0', '0000:18:02.1',
                                      '0000:18:02.2', '0000:18:02.3']
    assert {h.attach_info['physical_network'] for h in x710.attach_handles
            } == {'physnet1'}
    # Mapped by PCI address rather than interface name.
    [e810] = devices['0000:b6:00.0'].deployables
    assert e810.traits[:2] == ['CUSTOM_NIC_INTEL',
                               'CUSTOM_NIC_PRODUCT_ID_1592']
    assert [h.attach_info['physical_network'] for h in e810.attach_handles
            ] == ['physnet2', 'physnet2']


def test_nic_port_without_vfs_is_kept_by_the_host(discover):
    devices = by_controlpath(discover(intel_nic.IntelNICDriver, 'io',
                                      PHYSNETS))
    assert devices['0000:18:00.1'].deployables == []


def test_nic_without_mapping_has_no_physical_network(discover):
    [e810] = by_controlpath(discover(intel_nic.IntelNICDriver, 'io'))[
        '0000:b6:00.0'].deployables
    assert 'physical_network' not in e810.attach_handles[0].attach_info
    assert e810.traits == ['CUSTOM_NIC_INTEL', 'CUSTOM_NIC_PRODUCT_ID_1592']


@pytest.mark.parametrize('mappings', [
    ['physnet1'], ['physnet1:'], ['physnet1:eth2', 'physnet2:eth2']])
def test_nic_bad_mappings_are_refused(driver_conf, host_tree, mappings):
    conf = driver_conf({('intel_nic', 'physical_device_mappings'): mappings})
    with pytest.raises(base.DriverError):
        intel_nic.IntelNICDriver(conf, pci.PCIReader(host_tree('io')))


def test_inspur_nvme_but_not_the_boot_drive(discover):
    [ssd] = discover(inspur_nvme.InspurNVMeSSDDriver, 'io')
    # The Samsung boot drive at 01:00.0 is not offered.
    assert by_controlpath([ssd]).keys() == {'0000:b1:00.0'}
    assert (ssd.type, ssd.vendor) == ('SSD', '1bd4')
    [deployable] = ssd.deployables
    assert deployable.name == 'ssd_0000:b1:00.0'
    assert deployable.resource_class == 'CUSTOM_SSD'
    assert deployable.traits == ['CUSTOM_SSD_INSPUR',
                                 'CUSTOM_SSD_PRODUCT_ID_1001']
    assert handle_addresses(deployable) == ['0000:b1:00.0']


def test_ascend_npus_one_deployable_per_chip(discover):
    devices = by_controlpath(discover(huawei_ascend.HuaweiAscendDriver,
                                      'io'))
    assert sorted(devices) == ['0000:82:00.0', '0000:84:00.0',
                               '0000:8a:00.0']
    names = []
    for address, device in devices.items():
        assert device.type == 'AICHIP'
        [deployable] = device.deployables
        assert deployable.resource_class == 'CUSTOM_AICHIP'
        assert handle_addresses(deployable) == [address]
        names.append(deployable.name)
    assert sorted(names) == ['npu_0000:82:00.0', 'npu_0000:84:00.0',
                             'npu_0000:8a:00.0']
    assert devices['0000:82:00.0'].deployables[0].traits == [
        'CUSTOM_AICHIP_HUAWEI', 'CUSTOM_AICHIP_PRODUCT_ID_D801']
    assert devices['0000:8a:00.0'].deployables[0].traits[1] == (
        'CUSTOM_AICHIP_PRODUCT_ID_D500')
    assert devices['0000:8a:00.0'].std_board_info['numa_node'] == '1'


@pytest.mark.parametrize('driver_class', [
    intel_qat.IntelQATDriver, intel_nic.IntelNICDriver,
    inspur_nvme.InspurNVMeSSDDriver, huawei_ascend.HuaweiAscendDriver])
def test_nothing_on_the_gpu_host(discover, driver_class):
    assert discover(driver_class, 'gpu') == []


def test_nic_ports_report_how_many_vfs_they_can_have(discover):
    # What a device configuration policy's VF count is held against,
    # whether or not the port has VFs now.
    devices = by_controlpath(discover(intel_nic.IntelNICDriver, 'io'))
    assert {address: device.std_board_info['sriov_totalvfs']
            for address, device in devices.items()} == {
        '0000:18:00.0': '64', '0000:18:00.1': '64', '0000:b6:00.0': '128'}
