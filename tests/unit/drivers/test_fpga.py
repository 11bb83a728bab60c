"""FPGA drivers on the FPGA host: Intel PAC, Xilinx Alveo, Inspur.

Programming runs the vendor's tool through the agent's privileged calls
(here in the test process, checks included); the tool is a recording
stand-in (``fake_tool``): the tests check what it was asked to do and how
its failures are reported.
"""

import glob
import os
import re

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.fpga import inspur
from cyborg.accelerator.drivers.fpga import intel
from cyborg.accelerator.drivers.fpga import xilinx
from cyborg.objects import inventory
from tests.unit.drivers.inventory_view import by_controlpath
from tests.unit.drivers.inventory_view import handle_addresses
from tests.unit.drivers.test_contract import driver_classes

PAC_REGION = 'ce48969398f05f33946d560708be108a'
PAC_AFU = 'd8424dc4a4a3c413f89e433683f9040b'


@pytest.fixture(autouse=True)
def _privileged_in_process(privileged_on, tmp_path):
    privileged_on(tmp_path)


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


def test_xilinx_golden_image_is_an_fpga_without_deployables(
        u50_golden_tree, driver_conf):
    reader = pci.PCIReader(u50_golden_tree)
    found = {name: driver_class(driver_conf(), reader).discover()
             for name, driver_class in driver_classes().items()
             if name != 'fake_driver'}
    [card] = found.pop('xilinx_fpga_driver')
    # Nobody else takes the card for theirs.
    assert not any(found.values()), found
    assert (card.type, card.vendor, card.model) == ('FPGA', '10ee', 'd020')
    assert card.controlpath_info == {'domain': '0000', 'bus': '3b',
                                     'device': '00', 'function': '0'}
    assert card.std_board_info == {'vendor_id': '10ee', 'product_id': 'd020',
                                   'class_code': '120000', 'numa_node': '0'}
    assert card.deployables == []
    assert card.vendor_board_info['image'] == 'golden'
    assert 'nothing is schedulable' in card.vendor_board_info['note']


def test_xilinx_golden_image_is_observed_at_the_pci_level(u50_golden_tree,
                                                          driver_conf):
    driver = xilinx.XilinxFPGADriver(driver_conf(),
                                     pci.PCIReader(u50_golden_tree))
    [observation] = driver.observe(driver.discover())
    assert observation.address == '0000:3b:00.0'
    assert observation.state == 'healthy', observation.reason
    assert observation.usage == {'pcie_link_gts': 8.0,
                                 'pcie_link_width': 16}


def test_xilinx_golden_image_is_not_programmed(u50_golden_tree, driver_conf,
                                               fake_tool, gbs):
    xbmgmt = fake_tool('xbmgmt')
    driver, devices = fpga_host_devices(xilinx.XilinxFPGADriver,
                                        driver_conf, u50_golden_tree)
    with pytest.raises(base.DriverError, match='factory image'):
        driver.program(devices['0000:3b:00.0'], gbs)
    assert not xbmgmt.ran


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


def fpga_host_devices(driver_class, driver_conf, root):
    driver = driver_class(driver_conf(), pci.PCIReader(root))
    return driver, by_controlpath(driver.discover())


@pytest.fixture
def gbs(tmp_path):
    path = tmp_path / 'nlb_mode_0.gbs'
    path.write_bytes(b'GBS\x00green bitstream')
    return path


@pytest.fixture
def xclbin(tmp_path):
    path = tmp_path / 'vadd.xclbin'
    path.write_bytes(b'xclbin2\x00')
    return path


def test_intel_program_runs_fpgaconf_on_the_card(driver_conf, host_tree,
                                                 fake_tool, gbs):
    fpgaconf = fake_tool('fpgaconf')
    driver, devices = fpga_host_devices(intel.IntelFPGADriver, driver_conf,
                                        host_tree('fpga'))
    driver.program(devices['0000:13:00.0'], gbs,
                   {'function_uuid': PAC_AFU, 'bs-name': 'nlb0'})
    # The bitstream, opened and checked once, reaches the tool as a
    # descriptor of its own.
    assert fpgaconf.argv[:-1] == ['--bus', '0x13', '--device', '0x00',
                                  '--function', '0x0']
    assert re.fullmatch(r'/dev/fd/\d+', fpgaconf.argv[-1])
    assert fpgaconf.input == gbs.read_bytes()


def test_fpgaconf_names_the_segment_only_when_it_is_not_0():
    assert intel.fpgaconf_command(
        inventory.PCIAddress('0001', 'af', '00', '0'), '/tmp/x.gbs') == [
            'fpgaconf', '--segment', '0x0001', '--bus', '0xaf',
            '--device', '0x00', '--function', '0x0', '/tmp/x.gbs']


def test_intel_program_loads_the_function_that_discovery_reports(
        driver_conf, fresh_host_tree, fake_tool, gbs):
    # The stand-in writes the port's AFU id as the card would.
    root = fresh_host_tree('fpga')
    [afu_id_file] = glob.glob(os.path.join(
        root, 'sys/bus/pci/devices/0000:9a:00.0/dfl-port.*/afu_id'))
    function = '0f1e2d3c4b5a69788796a5b4c3d2e1f0'
    fake_tool('fpgaconf', extra='echo %s > %s' % (function, afu_id_file))
    driver, devices = fpga_host_devices(intel.IntelFPGADriver, driver_conf,
                                        root)
    assert 'function_uuid' not in devices['0000:9a:00.0'].deployables[
        0].attributes
    driver.program(devices['0000:9a:00.0'], gbs, {'function_uuid': function})
    [deployable] = by_controlpath(driver.discover())[
        '0000:9a:00.0'].deployables
    assert 'CUSTOM_FPGA_FUNCTION_ID_' + function.upper() in deployable.traits
    assert deployable.attributes['function_uuid'] == function


def test_intel_program_failure_quotes_fpgaconf(driver_conf, host_tree,
                                               fake_tool, gbs):
    fake_tool('fpgaconf', status=4, stderr='No suitable slots found.')
    driver, devices = fpga_host_devices(intel.IntelFPGADriver, driver_conf,
                                        host_tree('fpga'))
    with pytest.raises(base.DriverError) as caught:
        driver.program(devices['0000:13:00.0'], gbs)
    message = caught.value.message
    assert 'Intel FPGA 0000:13:00.0' in message
    assert 'fpgaconf --bus 0x13' in message
    assert 'exited with status 4: No suitable slots found.' in message


def test_intel_card_without_region_is_not_programmed(driver_conf, host_tree,
                                                     fake_tool, gbs):
    fpgaconf = fake_tool('fpgaconf')
    driver, devices = fpga_host_devices(intel.IntelFPGADriver, driver_conf,
                                        host_tree('fpga'))
    with pytest.raises(base.DriverError, match='no FPGA region'):
        driver.program(devices['0000:86:00.0'], gbs)
    assert not fpgaconf.ran


def test_missing_tool_is_named(driver_conf, host_tree, tmp_path,
                               monkeypatch, gbs):
    monkeypatch.setenv('PATH', str(tmp_path))
    driver, devices = fpga_host_devices(intel.IntelFPGADriver, driver_conf,
                                        host_tree('fpga'))
    with pytest.raises(base.DriverError,
                       match='fpgaconf is not installed'):
        driver.program(devices['0000:13:00.0'], gbs)


def test_xilinx_program_loads_the_user_partition(driver_conf, host_tree,
                                                 fake_tool, xclbin):
    xbmgmt = fake_tool('xbmgmt')
    driver, devices = fpga_host_devices(xilinx.XilinxFPGADriver,
                                        driver_conf, host_tree('fpga'))
    driver.program(devices['0000:d8:00.0'], xclbin, {})
    # The management function, not the user function the VM gets.
    assert xbmgmt.argv[:-1] == ['program', '--device', '0000:d8:00.0',
                                '--user']
    assert re.fullmatch(r'/dev/fd/\d+', xbmgmt.argv[-1])
    assert xbmgmt.input == b'xclbin2\x00'


def test_xilinx_program_failure_quotes_xbmgmt(driver_conf, host_tree,
                                              fake_tool, xclbin):
    fake_tool('xbmgmt', status=1,
              stderr='ERROR: xclbin is not compatible with the shell\n')
    driver, devices = fpga_host_devices(xilinx.XilinxFPGADriver,
                                        driver_conf, host_tree('fpga'))
    with pytest.raises(base.DriverError,
                       match=r'xbmgmt program --device 0000:d8:00.0 --user '
                             r'.* exited with status 1: ERROR: xclbin is '
                             r'not compatible'):
        driver.program(devices['0000:d8:00.0'], xclbin)


def test_xilinx_factory_image_is_not_programmed(driver_conf, host_tree,
                                                fake_tool, gbs):
    xbmgmt = fake_tool('xbmgmt')
    driver, devices = fpga_host_devices(xilinx.XilinxFPGADriver,
                                        driver_conf, host_tree('fpga'))
    with pytest.raises(base.DriverError, match='factory image'):
        driver.program(devices['0000:65:00.0'], gbs)
    assert not xbmgmt.ran


def test_inspur_refuses_to_program(driver_conf, host_tree, gbs):
    driver = inspur.InspurFPGADriver(driver_conf(),
                                     pci.PCIReader(host_tree('mixed')))
    [card] = driver.discover()
    with pytest.raises(base.OperationNotSupported,
                       match='cannot program FPGA 0000:6f:00.0'):
        driver.program(card, gbs, {})
