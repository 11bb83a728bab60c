"""FPGA drivers on the FPGA host: Intel PAC, Xilinx Alveo, Inspur."""

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.fpga import inspur
from cyborg.accelerator.drivers.fpga import intel
from cyborg.accelerator.drivers.fpga import xilinx
from tests.unit.drivers.inventory_view import by_controlpath
from tests.unit.drivers.inventory_view import handle_addresses

PAC_REGION = 'ce48969398f05f33946d560708be108a'
PAC_AFU = 'd8424dc4a4a3c413f89e433683f9040b'


def test_intel_pac_with_a_loaded_function(discover):
    devices = by_controlpath(discover(intel.IntelFPGADriver, 'fpga'))
    # The PAC's VF is a port of the PAC, not a card of its own.
    assert sorted(devices) == ['0000:13:00.0', '0000:86:00.0',
                               '0000:9a:00.0']
    pac = devices['0000:13:00.0']
    assert (pac.type, pac.vendor, pac.model) == ('FPGA', '8086', '09c4')
    assert pac.vendor_board_info == {'fpga_region': 'intel-fpga-dev.0',
                                     'vendor_name': 'Intel Corporation'}
    [deployable] = pac.deployables
    assert deployable.name == 'fpga_0000:13:00.0'
    assert deployable.resource_class == 'FPGA'
    assert deployable.traits == [
        'CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_PRODUCT_ID_09C4',
        'CUSTOM_FPGA_REGION_' + PAC_REGION.upper(),
        'CUSTOM_FPGA_FUNCTION_ID_' + PAC_AFU.upper()]
    assert deployable.attributes == {'region_uuid': PAC_REGION,
                                     'function_uuid': PAC_AFU}
    # SR-IOV is on: the VM gets the port's VF.
    assert handle_addresses(deployable) == ['0000:13:00.1']
    assert deployable.num_accelerators == 1


def test_intel_card_without_fpga_driver_offers_nothing(discover):
    d5005 = by_controlpath(discover(intel.IntelFPGADriver,
                                    'fpga'))['0000:86:00.0']
    assert d5005.deployables == []


def test_intel_dfl_card_with_a_blank_port(discover):
    n6000 = by_controlpath(discover(intel.IntelFPGADriver,
                                    'fpga'))['0000:9a:00.0']
    [deployable] = n6000.deployables
    assert deployable.traits == [
        'CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_PRODUCT_ID_BCCE',
        'CUSTOM_FPGA_REGION_1A2B3C4D5E6F70819A8B7C6D5E4F3A2B']
    assert 'function_uuid' not in deployable.attributes
    assert handle_addresses(deployable) == ['0000:9a:00.0']


def test_xilinx_management_and_user_functions_are_one_device(discover):
    devices = by_controlpath(discover(xilinx.XilinxFPGADriver, 'fpga'))
    assert sorted(devices) == ['0000:65:00.0', '0000:d8:00.0']
    u250 = devices['0000:d8:00.0']
    assert u250.vendor_board_info == {'user_function': '0000:d8:00.1'}
    [deployable] = u250.deployables
    assert deployable.name == 'fpga_0000:d8:00.0'
    assert deployable.resource_class == 'FPGA'
    assert deployable.traits == ['CUSTOM_FPGA_XILINX',
                                 'CUSTOM_FPGA_PRODUCT_ID_5004']
    assert handle_addresses(deployable) == ['0000:d8:00.1']


def test_xilinx_factory_image_offers_nothing(discover):
    golden = by_controlpath(discover(xilinx.XilinxFPGADriver,
                                     'fpga'))['0000:65:00.0']
    assert golden.deployables == []


def test_inspur_fpga(discover):
    [card] = discover(inspur.InspurFPGADriver, 'mixed')
    # Inspur's NVMe SSD shares the vendor id and is not an FPGA.
    assert card.controlpath_info == {'domain': '0000', 'bus': '6f',
                                     'device': '00', 'function': '0'}
    [deployable] = card.deployables
    assert deployable.name == 'fpga_0000:6f:00.0'
    assert deployable.traits == ['CUSTOM_FPGA_INSPUR',
                                 'CUSTOM_FPGA_PRODUCT_ID_0021']


@pytest.mark.parametrize('driver_class', [
    intel.IntelFPGADriver, xilinx.XilinxFPGADriver, inspur.InspurFPGADriver])
def test_fpga_drivers_find_nothing_on_other_hosts(discover, driver_class):
    assert discover(driver_class, 'gpu') == []
    assert discover(driver_class, 'io') == []


def test_programming_is_not_offered_yet(driver_conf, host_tree, tmp_path):
    driver = intel.IntelFPGADriver(driver_conf(),
                                   pci.PCIReader(host_tree('fpga')))
    device = driver.discover()[0]
    with pytest.raises(base.OperationNotSupported):
        driver.program(device, tmp_path / 'bitstream.gbs')
