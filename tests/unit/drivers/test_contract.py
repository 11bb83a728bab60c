"""The driver contract: entry points, loading, defaults, the fake driver."""

import importlib.metadata
import time

from oslo_config import cfg
import pytest
from stevedore import extension

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import loader
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.objects import inventory
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

# What setup.cfg registers under [entry_points] cyborg.accelerator.driver.
ENTRY_POINTS = {
    'fake_driver': 'cyborg.accelerator.drivers.fake:FakeDriver',
    'pci_driver':
        'cyborg.accelerator.drivers.passthrough:PCIPassthroughDriver',
    'nvidia_gpu_driver':
        'cyborg.accelerator.drivers.gpu.nvidia:NvidiaGPUDriver',
    'intel_fpga_driver':
        'cyborg.accelerator.drivers.fpga.intel:IntelFPGADriver',
    'xilinx_fpga_driver':
        'cyborg.accelerator.drivers.fpga.xilinx:XilinxFPGADriver',
    'inspur_fpga_driver':
        'cyborg.accelerator.drivers.fpga.inspur:InspurFPGADriver',
    'intel_qat_driver': 'cyborg.accelerator.drivers.qat.intel:IntelQATDriver',
    'intel_nic_driver': 'cyborg.accelerator.drivers.nic.intel:IntelNICDriver',
    'inspur_nvme_ssd_driver':
        'cyborg.accelerator.drivers.ssd.inspur_nvme:InspurNVMeSSDDriver',
    'huawei_ascend_driver':
        'cyborg.accelerator.drivers.aichip.huawei_ascend:HuaweiAscendDriver',
}


def driver_classes():
    return {name: importlib.metadata.EntryPoint(
        name, value, base.NAMESPACE).load()
        for name, value in ENTRY_POINTS.items()}


def test_every_entry_point_loads_a_driver_of_that_name():
    for name, driver_class in driver_classes().items():
        assert issubclass(driver_class, base.AcceleratorDriver)
        assert driver_class.name == name
        assert driver_class.device_type in (None, *inventory.DEVICE_TYPES)


def test_installed_entry_points_are_the_table():
    installed = {ep.name: ep.value for ep in
                 importlib.metadata.entry_points(group=base.NAMESPACE)}
    assert installed == ENTRY_POINTS


def test_build_drivers_from_a_stevedore_manager(driver_conf, host_tree):
    classes = driver_classes()
    manager = extension.ExtensionManager.make_test_instance(
        [extension.Extension(name, None, classes[name], None)
         for name in ('fake_driver', 'nvidia_gpu_driver')],
        namespace=base.NAMESPACE)
    reader = pci.PCIReader(host_tree('gpu'))
    conf = driver_conf()
    drivers = loader.build_drivers(manager, conf, reader)
    assert [d.name for d in drivers] == ['fake_driver', 'nvidia_gpu_driver']
    assert all(d.conf is conf and d.pci is reader for d in drivers)


def test_entry_point_and_driver_name_must_agree(driver_conf):
    manager = extension.ExtensionManager.make_test_instance(
        [extension.Extension('gpu', None, fake.FakeDriver, None)])
    with pytest.raises(base.DriverError, match='gpu loads driver fake'):
        loader.build_drivers(manager, driver_conf(), pci.PCIReader('/'))


def test_unknown_driver_name_fails_loudly(driver_conf):
    with pytest.raises(base.DriverError, match='no_such_driver'):
        loader.load_drivers(driver_conf(), ['no_such_driver'],
                            pci.PCIReader('/'))


def test_fake_driver_inventory(driver_conf, tmp_path):
    # No tree at all: no domain to keep clear of.
    driver = fake.FakeDriver(driver_conf(), pci.PCIReader(str(tmp_path)))
    [device] = driver.discover()
    assert device.type == 'FPGA'
    assert device.vendor == 'abcd'
    assert device.controlpath_type == 'PCI'
    assert device.controlpath_info == {'domain': 'ffff', 'bus': '0c',
                                       'device': '00', 'function': '0'}
    [deployable] = device.deployables
    assert deployable.name == 'FakeDevice'
    assert deployable.resource_class == 'FPGA'
    assert deployable.traits == ['CUSTOM_FAKE_DEVICE']
    assert deployable.num_accelerators == 16
    assert deployable.driver_name == 'fake_driver'
    handles = deployable.attach_handles
    assert {h.attach_type for h in handles} == {'TEST_PCI'}
    assert len({h.key for h in handles}) == 16
    assert handles[0].attach_info['function'] == '1'
    assert handles[-1].attach_info == {'domain': 'ffff', 'bus': '0c',
                                       'device': '02', 'function': '0'}
    assert driver.discover() == [device]


def test_fake_driver_keeps_off_the_domains_of_real_functions(driver_conf,
                                                              tmp_path):
    # Hyper-V may give a passed-through device any 16-bit domain.
    root = sysfs.build(str(tmp_path), hosts.CHIPSET + [
        sysfs.Function('ffff:00:00.0', '10de', '2330', '030200'),
        sysfs.Function('fffe:00:00.0', '15b3', '101e', '020000')])
    driver = fake.FakeDriver(driver_conf(), pci.PCIReader(root))
    [device] = driver.discover()
    assert device.controlpath_info == {'domain': 'fffd', 'bus': '0c',
                                       'device': '00', 'function': '0'}
    [deployable] = device.deployables
    assert {h.attach_info['domain'] for h in deployable.attach_handles} == {
        'fffd'}
    [observation] = driver.observe([device])
    assert observation.address == 'fffd:0c:00.0'
    # Every reader of addresses takes it for a PCI address.
    address = inventory.PCIAddress.parse(observation.address)
    assert address.as_info() == device.controlpath_info
    assert pci._BDF.match(str(address))


def test_fake_driver_programs_an_existing_bitstream(driver_conf, tmp_path):
    driver = fake.FakeDriver(driver_conf(), pci.PCIReader(str(tmp_path)))
    [device] = driver.discover()
    bitstream = tmp_path / 'image.bin'
    bitstream.write_bytes(b'\x00')
    driver.program(device, bitstream)
    with pytest.raises(base.DriverError, match='No bitstream'):
        driver.program(device, tmp_path / 'missing.bin')


FUNCTION_UUID = '5a4c3e2f-1b0d-4f9e-8a7b-6c5d4e3f2a1b'
FUNCTION_TRAIT = 'CUSTOM_FPGA_FUNCTION_ID_5A4C3E2F1B0D4F9E8A7B6C5D4E3F2A1B'


def test_fake_driver_reports_the_function_it_was_programmed_with(
        driver_conf, tmp_path):
    driver = fake.FakeDriver(driver_conf(), pci.PCIReader(str(tmp_path)))
    [before] = driver.discover()
    bitstream = tmp_path / 'image.bin'
    bitstream.write_bytes(b'\x00')
    driver.program(before, bitstream, {'function_uuid': FUNCTION_UUID,
                                       'bs-name': 'gzip'})
    [after] = driver.discover()
    [deployable] = after.deployables
    assert deployable.traits == [fake.TRAIT, FUNCTION_TRAIT]
    assert deployable.attributes == {
        'region_uuid': fake.REGION_UUID,
        'function_uuid': '5a4c3e2f1b0d4f9e8a7b6c5d4e3f2a1b'}
    # Everything else is the inventory of before.
    deployable.traits = [fake.TRAIT]
    deployable.attributes = {'region_uuid': fake.REGION_UUID}
    assert after == before
    # A bitstream without a function leaves none loaded; another
    # instance (an agent that restarted) has none either.
    driver.program(after, bitstream, {'bs-name': 'blank'})
    assert driver.discover() == [before]
    driver.program(after, bitstream, {'function_uuid': FUNCTION_UUID})
    assert fake.FakeDriver(driver_conf(), pci.PCIReader('/')).discover() == [
        before]


def test_fake_driver_takes_program_seconds(driver_conf, tmp_path):
    driver = fake.FakeDriver(
        driver_conf({('fake_driver', 'program_seconds'): 0.3}),
        pci.PCIReader(str(tmp_path)))
    bitstream = tmp_path / 'image.bin'
    bitstream.write_bytes(b'\x00')
    started = time.monotonic()
    driver.program(driver.discover()[0], bitstream,
                   {'function_uuid': FUNCTION_UUID})
    assert time.monotonic() - started >= 0.3
    assert FUNCTION_TRAIT in driver.discover()[0].deployables[0].traits


def test_fake_driver_needs_no_configuration():
    driver = fake.FakeDriver(None, None)
    assert driver.program_seconds == 0
    assert driver.discover()[0].deployables[0].traits == [fake.TRAIT]


def test_fake_driver_registers_its_options():
    conf = cfg.ConfigOpts()
    conf([], project='cyborg', default_config_files=[])
    assert fake.FakeDriver(conf, pci.PCIReader('/')).program_seconds == 0
    assert conf.fake_driver.program_seconds == 0


def test_non_fpga_drivers_refuse_to_program(driver_conf, tmp_path):
    from cyborg.accelerator.drivers.qat import intel
    driver = intel.IntelQATDriver(driver_conf(), pci.PCIReader('/'))
    with pytest.raises(base.OperationNotSupported) as caught:
        driver.program(None, tmp_path / 'x')
    assert caught.value.status == 409


def test_inventory_survives_the_rpc_round_trip(driver_conf):
    devices = fake.FakeDriver(driver_conf(), pci.PCIReader('/')).discover()
    snapshot = inventory.HostInventory('compute1', devices)
    assert inventory.HostInventory.from_dict(snapshot.to_dict()) == snapshot


@pytest.mark.parametrize('parts,trait', [
    (('GPU', 'NVIDIA'), 'CUSTOM_GPU_NVIDIA'),
    (('VGPU_TYPE', 'nvidia-222'), 'CUSTOM_VGPU_TYPE_NVIDIA_222'),
    (('PHYSNET', 'phys.net-1'), 'CUSTOM_PHYSNET_PHYS_NET_1'),
])
def test_trait_spelling(parts, trait):
    assert traits.custom(*parts) == trait


def test_vendor_and_product_traits():
    assert traits.vendor_trait('FPGA', '10ee') == 'CUSTOM_FPGA_XILINX'
    assert traits.vendor_trait('NIC', '1af4') == 'CUSTOM_NIC_VENDOR_1AF4'
    assert traits.product_trait('AICHIP', 'd801') == (
        'CUSTOM_AICHIP_PRODUCT_ID_D801')
