"""pci_driver: Nova-style device_spec over the mixed host."""

import json

import pytest

from cyborg.accelerator.drivers import passthrough
from cyborg.accelerator.drivers import pci
from cyborg.objects import inventory
from tests.unit.drivers.inventory_view import by_controlpath
from tests.unit.drivers.inventory_view import handle_addresses
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs


def spec(*items):
    return {('pci', 'device_spec'): [json.dumps(item) for item in items]}


def test_nothing_without_a_spec(discover):
    assert discover(passthrough.PCIPassthroughDriver, 'mixed') == []


def test_typed_by_pci_class_not_always_gpu(discover):
    devices = by_controlpath(discover(
        passthrough.PCIPassthroughDriver, 'mixed',
        spec({'vendor_id': '15b3', 'product_id': '1017'},
             {'vendor_id': '10de', 'address': '0000:5e:00.0'},
             {'vendor_id': '144d'})))
    assert {a: d.type for a, d in devices.items()} == {
        '0000:5a:00.0': 'NIC', '0000:5e:00.0': 'GPU', '0000:01:00.0': 'SSD'}
    cx5 = devices['0000:5a:00.0']
    [deployable] = cx5.deployables
    assert deployable.name == 'pci_0000:5a:00.0'
    assert deployable.resource_class == 'CUSTOM_PCI'
    assert deployable.driver_name == 'pci_driver'
    assert deployable.traits == ['CUSTOM_NIC_MELLANOX',
                                 'CUSTOM_NIC_PRODUCT_ID_1017']
    assert handle_addresses(deployable) == ['0000:5a:00.0']


def test_side_functions_and_bmc_display_are_never_offered(discover):
    # A vendor-wide spec over the RTX card and the ASPEED BMC.
    devices = by_controlpath(discover(
        passthrough.PCIPassthroughDriver, 'mixed',
        spec({'address': '0000:5e:00.*'}, {'vendor_id': '1a03'})))
    assert sorted(devices) == ['0000:5e:00.0']


def test_matched_vfs_are_handles_of_their_physical_function(discover):
    devices = by_controlpath(discover(
        passthrough.PCIPassthroughDriver, 'mixed',
        spec({'vendor_id': '8086', 'product_id': '154c',
              'address': {'bus': '18', 'slot': '02',
                          'function': '[0-2]'}})))
    [deployable] = devices['0000:18:00.0'].deployables
    assert handle_addresses(deployable) == ['0000:18:02.0', '0000:18:02.1',
                                            '0000:18:02.2']
    assert deployable.num_accelerators == 3
    assert deployable.traits == ['CUSTOM_NIC_INTEL',
                                 'CUSTOM_NIC_PRODUCT_ID_1572']


def test_physical_function_with_matching_vfs_is_not_itself_a_handle(
        discover):
    devices = by_controlpath(discover(
        passthrough.PCIPassthroughDriver, 'mixed',
        spec({'vendor_id': '8086', 'address': '0000:6b:00.*'})))
    [deployable] = devices['0000:6b:00.0'].deployables
    assert handle_addresses(deployable) == ['0000:6b:00.1', '0000:6b:00.2']
    assert devices['0000:6b:00.0'].type == 'QAT'


def test_unknown_vendor_trait_spelling(tmp_path, driver_conf):
    virtio_gpu = sysfs.Function('0000:07:00.0', '1af4', '1050', '030000')
    root = sysfs.build(str(tmp_path), hosts.CHIPSET + [virtio_gpu])
    driver = passthrough.PCIPassthroughDriver(
        driver_conf(spec({'vendor_id': '1af4'})), pci.PCIReader(root))
    [device] = driver.discover()
    assert device.deployables[0].traits == ['CUSTOM_GPU_VENDOR_1AF4',
                                            'CUSTOM_GPU_PRODUCT_ID_1050']


A = inventory.PCIAddress.parse


@pytest.mark.parametrize('glob,address,matches', [
    ('0000:3b:00.0', '0000:3b:00.0', True),
    ('0000:3b:00.0', '0000:3b:00.1', False),
    ('*:3b:00.*', '0000:3b:00.5', True),
    (':3b:00.', '0000:3b:00.5', True),
    ('3b:00.1', '0000:3b:00.1', True),
    ('00.1', '0000:3b:00.1', True),
    ('0000:3b:0[0-1].*', '0000:3b:01.3', True),
    ('0000:3b:0[0-1].*', '0000:3b:02.0', False),
    ('*', '0001:ff:1f.7', True),
])
def test_address_globs(glob, address, matches):
    device_spec = passthrough.DeviceSpec({'address': glob})
    function = pci.PCIFunction(A(address), '8086', '1572', '020000')
    assert device_spec.matches(function) is matches


def test_address_regex_fields():
    device_spec = passthrough.DeviceSpec({
        'vendor_id': '0x8086',
        'address': {'domain': '0000', 'bus': '1[89]', 'slot': '.*',
                    'function': '[0-3]'}})
    assert device_spec.matches(pci.PCIFunction(A('0000:19:00.3'), '8086',
                                               '1572', '020000'))
    assert not device_spec.matches(pci.PCIFunction(A('0000:19:00.4'),
                                                   '8086', '1572', '020000'))
    assert not device_spec.matches(pci.PCIFunction(A('0000:18:00.0'),
                                                   '15b3', '1017', '020000'))


def test_a_line_may_hold_a_list_of_items():
    specs = passthrough.parse_device_spec(
        ['[{"vendor_id": "10de"}, {"vendor_id": "15b3"}]'])
    assert [s.vendor_id for s in specs] == ['10de', '15b3']


@pytest.mark.parametrize('line', [
    'not json', '"a string"', '{"vendor_id": "xyz"}',
    '{"devname": "eth0"}', '{"address": 5}',
    '{"address": {"bus": "("}}', '{"address": {"node": "1"}}',
    '{"address": "1:2:3:4.5"}'])
def test_bad_specs_are_refused_at_start(line, driver_conf, host_tree):
    with pytest.raises(passthrough.DeviceSpecError):
        passthrough.PCIPassthroughDriver(
            driver_conf({('pci', 'device_spec'): [line]}),
            pci.PCIReader(host_tree('mixed')))
