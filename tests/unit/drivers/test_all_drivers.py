"""Every driver at once over the mixed host, as an agent runs them."""

import os

import pytest

from cyborg.accelerator.drivers import pci
from cyborg.objects import inventory
from tests.unit.drivers.inventory_view import address_of
from tests.unit.drivers.inventory_view import claimed_functions
from tests.unit.drivers.test_contract import driver_classes
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

# Control path -> (driver, device type, resource class of its deployables
# or None when it has nothing to offer).
EXPECTED = {
    'ffff:0c:00.0': ('fake_driver', 'FPGA', 'FPGA'),
    '0000:3b:00.0': ('nvidia_gpu_driver', 'GPU', 'VGPU'),
    '0000:5e:00.0': ('nvidia_gpu_driver', 'GPU', 'PGPU'),
    '0000:af:00.0': ('nvidia_gpu_driver', 'GPU', 'VGPU'),
    '0000:13:00.0': ('intel_fpga_driver', 'FPGA', 'FPGA'),
    '0000:86:00.0': ('intel_fpga_driver', 'FPGA', None),
    '0000:9a:00.0': ('intel_fpga_driver', 'FPGA', 'FPGA'),
    '0000:d8:00.0': ('xilinx_fpga_driver', 'FPGA', 'FPGA'),
    '0000:65:00.0': ('xilinx_fpga_driver', 'FPGA', None),
    '0000:6f:00.0': ('inspur_fpga_driver', 'FPGA', 'FPGA'),
    '0000:3d:00.0': ('intel_qat_driver', 'QAT', 'CUSTOM_QAT'),
    '0000:3f:00.0': ('intel_qat_driver', 'QAT', None),
    '0000:6b:00.0': ('intel_qat_driver', 'QAT', 'CUSTOM_QAT'),
    '0000:18:00.0': ('intel_nic_driver', 'NIC', 'CUSTOM_NIC'),
    '0000:18:00.1': ('intel_nic_driver', 'NIC', None),
    '0000:b6:00.0': ('intel_nic_driver', 'NIC', 'CUSTOM_NIC'),
    '0000:5a:00.0': ('pci_driver', 'NIC', 'CUSTOM_PCI'),
    '0000:b1:00.0': ('inspur_nvme_ssd_driver', 'SSD', 'CUSTOM_SSD'),
    '0000:82:00.0': ('huawei_ascend_driver', 'AICHIP', 'CUSTOM_AICHIP'),
    '0000:84:00.0': ('huawei_ascend_driver', 'AICHIP', 'CUSTOM_AICHIP'),
    '0000:8a:00.0': ('huawei_ascend_driver', 'AICHIP', 'CUSTOM_AICHIP'),
}


def discover_host(root, driver_conf):
    """name of driver -> devices, every driver run over ``root``."""
    reader = pci.PCIReader(root)
    conf = driver_conf(hosts.MIXED_OPTIONS)
    return {name: driver_class(conf, reader).discover()
            for name, driver_class in driver_classes().items()}


@pytest.fixture
def mixed(host_tree, driver_conf):
    return discover_host(host_tree('mixed'), driver_conf)


def test_each_device_found_once_by_its_driver_with_its_type(mixed):
    found = {}
    for driver_name, devices in mixed.items():
        for device in devices:
            address = address_of(device.controlpath_info)
            assert address not in found, 'found twice: %s' % address
            rcs = {d.resource_class for d in device.deployables}
            found[address] = (driver_name, device.type,
                              rcs.pop() if rcs else None)
            assert not rcs, 'one resource class per device'
            for deployable in device.deployables:
                assert deployable.driver_name == driver_name
    assert found == EXPECTED


def test_no_pci_function_is_claimed_twice(mixed):
    claimed_by = {}
    for driver_name, devices in mixed.items():
        for device in devices:
            for address in claimed_functions(device):
                assert address not in claimed_by, (
                    '%s claimed by %s and %s' % (
                        address, claimed_by[address], driver_name))
                claimed_by[address] = driver_name
    # VFs, user functions and vGPU parents are part of their devices.
    assert claimed_by['0000:af:00.5'] == 'nvidia_gpu_driver'
    assert claimed_by['0000:d8:00.1'] == 'xilinx_fpga_driver'
    assert claimed_by['0000:13:00.1'] == 'intel_fpga_driver'
    assert claimed_by['0000:3d:01.3'] == 'intel_qat_driver'
    assert claimed_by['0000:18:02.0'] == 'intel_nic_driver'


def test_no_vf_or_infrastructure_function_is_a_device(mixed, host_tree):
    functions = {str(f.address): f for f in
                 pci.PCIReader(host_tree('mixed')).functions()}
    for devices in mixed.values():
        for device in devices:
            address = address_of(device.controlpath_info)
            if address == 'ffff:0c:00.0':
                continue  # the fake FPGA is not in any tree
            assert not functions[address].is_vf
            for claimed in claimed_functions(device):
                assert not functions[claimed].is_infrastructure
    # BMC display, GPU audio/USB/UCSI, NVSwitch, boot drive: nobody's.
    every_claim = set().union(*(claimed_functions(d)
                                for devices in mixed.values()
                                for d in devices))
    for bdf in ('0000:03:00.0', '0000:5e:00.1', '0000:5e:00.2',
                '0000:5e:00.3', '0000:c0:00.0', '0000:01:00.0'):
        assert bdf not in every_claim


def test_deployable_names_are_unique_on_the_host(mixed):
    names = [d.name for devices in mixed.values() for device in devices
             for d in device.deployables]
    assert len(names) == len(set(names))
    assert len(names) == 21


def test_same_tree_gives_equal_inventory(host_tree, driver_conf, tmp_path):
    first = discover_host(host_tree('mixed'), driver_conf)
    again = discover_host(host_tree('mixed'), driver_conf)
    # Written afresh elsewhere, with the functions in another order.
    rebuilt = sysfs.build(str(tmp_path), list(reversed(hosts.HOSTS['mixed'])),
                          pci_ids=hosts.PCI_IDS)
    elsewhere = discover_host(rebuilt, driver_conf)
    assert first == again == elsewhere

    def snapshot(found):
        return inventory.HostInventory(
            'compute1', [d for devices in found.values() for d in devices])
    assert snapshot(first).to_dict() == snapshot(elsewhere).to_dict()


def test_binding_a_vgpu_leaves_the_inventory_unchanged(fresh_host_tree,
                                                       driver_conf):
    root = fresh_host_tree('mixed')
    before = discover_host(root, driver_conf)
    # What the kernel does when a VM's mdev is created on the T4.
    type_dir = os.path.join(root, 'sys/class/mdev_bus/0000:3b:00.0/'
                            'mdev_supported_types/nvidia-222')
    with open(os.path.join(type_dir, 'available_instances'), 'w') as f:
        f.write('13\n')
    os.mkdir(os.path.join(type_dir, 'devices',
                          '99999999-0000-4000-8000-000000000000'))
    assert discover_host(root, driver_conf) == before
