"""The shared PCI reader on recorded trees."""

from cyborg.accelerator.drivers import pci
from cyborg.objects import inventory
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

A = inventory.PCIAddress.parse


def _function(reader, bdf):
    return next(f for f in reader.functions() if str(f.address) == bdf)


def test_functions_are_every_pci_function_sorted(host_tree):
    reader = pci.PCIReader(host_tree('gpu'))
    addresses = [str(f.address) for f in reader.functions()]
    assert addresses == sorted(addresses)
    assert {'0000:00:00.0', '0000:03:00.0', '0000:3b:00.0', '0000:af:00.7',
            '0000:5e:00.3', '0000:c0:00.0'} <= set(addresses)
    assert addresses == sorted(f.bdf for f in hosts.GPU_HOST)


def test_ids_class_numa_and_driver(host_tree):
    t4 = _function(pci.PCIReader(host_tree('gpu')), '0000:3b:00.0')
    assert (t4.vendor_id, t4.device_id, t4.class_code) == (
        '10de', '1eb8', '030200')
    assert (t4.subsystem_vendor_id, t4.subsystem_device_id) == (
        '10de', '12a2')
    assert t4.pci_class == '0302'
    assert t4.numa_node == 0
    assert t4.kernel_driver == 'nvidia'


def test_numa_node_minus_one_is_unknown(host_tree):
    bmc = _function(pci.PCIReader(host_tree('gpu')), '0000:03:00.0')
    assert bmc.numa_node is None


def test_several_numa_nodes(host_tree):
    reader = pci.PCIReader(host_tree('mixed'))
    nodes = {f.numa_node for f in reader.functions()}
    assert {0, 1} <= nodes


def test_sriov_links_both_ways(host_tree):
    reader = pci.PCIReader(host_tree('gpu'))
    a100 = _function(reader, '0000:af:00.0')
    assert a100.virtfns == (A('0000:af:00.4'), A('0000:af:00.5'),
                            A('0000:af:00.6'), A('0000:af:00.7'))
    assert (a100.sriov_totalvfs, a100.sriov_numvfs) == (16, 4)
    assert not a100.is_vf
    vf = _function(reader, '0000:af:00.6')
    assert vf.is_vf and vf.physfn == A('0000:af:00.0')
    assert vf.virtfns == ()


def test_virtfn_links_in_numeric_order(host_tree):
    # virtfn10 sorts before virtfn2 as text; the VF index is a number.
    reader = pci.PCIReader(host_tree('io'))
    x710 = _function(reader, '0000:18:00.0')
    assert [str(a) for a in x710.virtfns] == [
        '0000:18:02.0', '0000:18:02.1', '0000:18:02.2', '0000:18:02.3']
    assert x710.net_interfaces == ('eth2',)


def test_mdev_types_partly_used(host_tree):
    t4 = _function(pci.PCIReader(host_tree('gpu')), '0000:3b:00.0')
    assert [t.type_id for t in t4.mdev_types] == [
        'nvidia-222', 'nvidia-223', 'nvidia-230']
    used = t4.mdev_type('nvidia-222')
    assert used.name == 'GRID T4-1B'
    assert used.device_api == 'vfio-pci'
    assert used.available_instances == 14
    assert len(used.devices) == 2
    assert used.total_instances == 16
    assert t4.mdev_type('nvidia-999') is None


def test_no_mdev_types_without_mdev_bus(host_tree):
    rtx = _function(pci.PCIReader(host_tree('gpu')), '0000:5e:00.0')
    assert rtx.mdev_types == ()


def test_names_from_pci_ids_and_fallback(host_tree):
    reader = pci.PCIReader(host_tree('gpu'))
    t4 = _function(reader, '0000:3b:00.0')
    assert t4.vendor_name == 'NVIDIA Corporation'
    assert t4.device_name == 'TU104GL [Tesla T4]'
    rtx = _function(reader, '0000:5e:00.0')
    assert (rtx.vendor_name, rtx.device_name) == ('NVIDIA Corporation', None)
    bmc = _function(reader, '0000:03:00.0')
    assert (bmc.vendor_name, bmc.device_name) == (None, None)


def test_no_pci_ids_means_no_names(tmp_path):
    root = sysfs.build(str(tmp_path), hosts.HOSTS['gpu'])
    t4 = _function(pci.PCIReader(root), '0000:3b:00.0')
    assert (t4.vendor_name, t4.device_name) == (None, None)


def test_infrastructure_functions(host_tree):
    reader = pci.PCIReader(host_tree('mixed'))
    infrastructure = {str(f.address) for f in reader.functions()
                      if f.is_infrastructure}
    # Bridges, the BMC display, the GPU's audio/USB/UCSI, chipset USB and
    # SMBus, the NVSwitch.
    assert {'0000:00:00.0', '0000:00:1c.0', '0000:02:00.0', '0000:03:00.0',
            '0000:5e:00.1', '0000:5e:00.2', '0000:5e:00.3', '0000:00:14.0',
            '0000:00:1f.4', '0000:c0:00.0', '0000:3a:00.0'} <= infrastructure
    for bdf in ('0000:3b:00.0', '0000:5e:00.0', '0000:13:00.0',
                '0000:3d:00.0', '0000:18:00.0', '0000:b1:00.0'):
        assert bdf not in infrastructure


def test_fpga_regions_of_both_kernel_drivers(host_tree):
    regions = pci.PCIReader(host_tree('fpga')).fpga_regions()
    assert [(str(r.pci_address), r.name) for r in regions] == [
        ('0000:13:00.0', 'intel-fpga-dev.0'), ('0000:9a:00.0', 'region0')]
    opae, dfl = regions
    assert opae.interface_id == 'ce48969398f05f33946d560708be108a'
    assert opae.bitstream_id == '0x123000200000185'
    assert opae.ports == (pci.FPGAPort(
        'intel-fpga-port.0', 'd8424dc4a4a3c413f89e433683f9040b'),)
    assert dfl.interface_id == '1a2b3c4d5e6f70819a8b7c6d5e4f3a2b'
    # An all-zero AFU id is a blank port.
    assert dfl.ports == (pci.FPGAPort('dfl-port.0', None),)


def test_missing_root_reads_as_empty_host(tmp_path):
    reader = pci.PCIReader(str(tmp_path / 'nothing'))
    assert reader.functions() == []
    assert reader.fpga_regions() == []
    assert reader.function(A('0000:3b:00.0')) is None
