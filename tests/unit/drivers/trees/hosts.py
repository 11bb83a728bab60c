"""Hosts to test discovery on, written as sysfs trees by ``sysfs.build``.

Ids and classes are those the hardware reports; addresses are chosen so
that every host fits into ``mixed`` without clashes. Buses below 0x80 are
on NUMA node 0, the others on node 1; the BMC's display reports -1 as it
does on many boards.
"""

import dataclasses
import json

from tests.unit.drivers.trees.sysfs import DFL
from tests.unit.drivers.trees.sysfs import OPAE
from tests.unit.drivers.trees.sysfs import QAT
from tests.unit.drivers.trees.sysfs import VFVGPU
from tests.unit.drivers.trees.sysfs import Function
from tests.unit.drivers.trees.sysfs import Mdev
from tests.unit.drivers.trees.sysfs import virtual_functions


def _numa(bdf):
    return 0 if int(bdf.split(':')[1], 16) < 0x80 else 1


def root_port(bdf, device='2030'):
    return Function(bdf, '8086', device, '060400', numa=_numa(bdf),
                    driver='pcieport')


def card(bdf, vendor, device, class_code, port, **kw):
    """A function on a card in the slot below root port ``port``."""
    kw.setdefault('numa', _numa(bdf))
    return Function(bdf, vendor, device, class_code, parent=port, **kw)


# Chipset and BMC: present on every host.
_host_bridge = Function('0000:00:00.0', '8086', '2020', '060000', numa=0)
_usb = Function('0000:00:14.0', '8086', 'a1af', '0c0330', numa=0,
                driver='xhci_hcd')
_smbus = Function('0000:00:1f.4', '8086', 'a1a3', '0c0500', numa=0,
                  driver='i801_smbus')
_bmc_port = root_port('0000:00:1c.0', 'a190')
_bmc_bridge = card('0000:02:00.0', '1a03', '1150', '060400', _bmc_port.bdf)
_bmc_vga = card('0000:03:00.0', '1a03', '2000', '030000', _bmc_bridge.bdf,
                numa=-1, driver='ast')
_boot_nvme_port = root_port('0000:00:1d.0', 'a198')
_boot_nvme = card('0000:01:00.0', '144d', 'a80a', '010802',
                  _boot_nvme_port.bdf, driver='nvme')
CHIPSET = [_host_bridge, _usb, _smbus, _bmc_port, _bmc_bridge, _bmc_vga,
           _boot_nvme_port, _boot_nvme]

# --- GPUs -----------------------------------------------------------------

# Tesla T4 cut into vGPUs: two nvidia-222 mdevs exist, so 14 of 16 are
# free and the other types are closed (one type per GPU at a time).
T4_MDEVS = ('6f3b6c3e-4a0e-4b8e-9a57-1f0e3c1a0001',
            '6f3b6c3e-4a0e-4b8e-9a57-1f0e3c1a0002')
_t4_port = root_port('0000:3a:00.0')
T4 = card('0000:3b:00.0', '10de', '1eb8', '030200', _t4_port.bdf,
          driver='nvidia', subsystem=('10de', '12a2'),
          mdev_types=(Mdev('nvidia-222', 'GRID T4-1B', 14, T4_MDEVS),
                      Mdev('nvidia-223', 'GRID T4-2B', 0),
                      Mdev('nvidia-230', 'GRID T4-16Q', 0)))

# A100 PCIe with SR-IOV: vGPUs live on its VFs, one per VF; the VF at
# af:00.5 already holds one.
A100_MDEV = '0d1b2c3d-5e6f-4a7b-8c9d-0e1f2a3b4c5d'
_a100_port = root_port('0000:ae:00.0')
A100 = card('0000:af:00.0', '10de', '20f1', '030200', _a100_port.bdf,
            driver='nvidia', subsystem=('10de', '145f'), sriov_totalvfs=16)


def _a100_vf_types(bdf):
    holds_one = bdf == '0000:af:00.5'
    return (Mdev('nvidia-472', 'GRID A100-10C', 0 if holds_one else 1,
                 (A100_MDEV,) if holds_one else ()),
            Mdev('nvidia-473', 'GRID A100-20C', 0 if holds_one else 1))


A100_VFS = [dataclasses.replace(vf, mdev_types=_a100_vf_types(vf.bdf))
            for vf in virtual_functions(
                A100, '20f1', ['0000:af:00.4', '0000:af:00.5',
                               '0000:af:00.6', '0000:af:00.7'],
                driver='nvidia')]

# H100 PCIe with SR-IOV vGPU under NVIDIA's own VFIO framework: each VF
# takes a vGPU type itself. The VF at 4e:00.5 holds an H100-20C; the
# free ones can still take it or an H100-10C (numbers illustrative).
# Not part of GPU_HOST: its discovery is not modelled yet.
H100_20C = (1062, 'NVIDIA H100-20C')
H100_10C = (1061, 'NVIDIA H100-10C')
_h100_port = root_port('0000:4d:00.0')
H100 = card('0000:4e:00.0', '10de', '2331', '030200', _h100_port.bdf,
            driver='nvidia', subsystem=('10de', '1626'), sriov_totalvfs=32)
H100_VFS = [dataclasses.replace(vf, vgpu=VFVGPU(
    () if vf.bdf == '0000:4e:00.5' else (H100_10C, H100_20C),
    current=H100_20C[0] if vf.bdf == '0000:4e:00.5' else 0))
    for vf in virtual_functions(
        H100, '2331', ['0000:4e:00.4', '0000:4e:00.5', '0000:4e:00.6'],
        driver='nvidia')]
H100_HOST = CHIPSET + [_h100_port, H100, *H100_VFS]


def h100s(addresses):
    """The recorded H100 (no VFs) at each of ``addresses``, each behind a
    root port of its own on the bus before it."""
    functions = []
    for address in addresses:
        bus = int(address.split(':')[1], 16)
        port = root_port('0000:%02x:00.0' % (bus - 1))
        functions += [port, dataclasses.replace(H100, bdf=address,
                                                parent=port.bdf)]
    return functions

# A workstation GPU with its audio, USB and USB-C (UCSI) functions.
_rtx_port = root_port('0000:5d:00.0')
RTX = card('0000:5e:00.0', '10de', '1e07', '030000', _rtx_port.bdf,
           driver='nvidia')
RTX_SIDE_FUNCTIONS = [
    card('0000:5e:00.1', '10de', '10f7', '040300', _rtx_port.bdf,
         driver='snd_hda_intel'),
    card('0000:5e:00.2', '10de', '1ad6', '0c0330', _rtx_port.bdf,
         driver='xhci_hcd'),
    card('0000:5e:00.3', '10de', '1ad7', '0c8000', _rtx_port.bdf,
         driver='nvidia-gpu'),
]
NVSWITCH = Function('0000:c0:00.0', '10de', '1af1', '068000', numa=1,
                    driver='nvidia-nvswitch')

GPU_HOST = CHIPSET + [_t4_port, T4, _a100_port, A100, *A100_VFS, _rtx_port,
                      RTX, *RTX_SIDE_FUNCTIONS, NVSWITCH]

# --- FPGAs ----------------------------------------------------------------

PAC_INTERFACE_ID = 'ce489693-98f0-5f33-946d-560708be108a'
PAC_AFU_ID = 'd8424dc4a4a3c413f89e433683f9040b'
_pac_port = root_port('0000:12:00.0')
PAC = card('0000:13:00.0', '8086', '09c4', '120000', _pac_port.bdf,
           driver='intel-fpga-pci', subsystem=('8086', '0000'),
           sriov_totalvfs=1,
           fpga=OPAE(PAC_INTERFACE_ID, '0x123000200000185',
                     (PAC_AFU_ID,)))
PAC_VFS = virtual_functions(PAC, '09c5', ['0000:13:00.1'],
                            driver='intel-fpga-pci')
# A D5005 whose FPGA driver is not loaded: no FPGA class device.
_d5005_port = root_port('0000:85:00.0')
D5005 = card('0000:86:00.0', '8086', '0b2b', '120000', _d5005_port.bdf)
# An N6000 under the upstream DFL driver with a blank port.
N6000_COMPAT_ID = '1a2b3c4d5e6f70819a8b7c6d5e4f3a2b'
_n6000_port = root_port('0000:99:00.0')
N6000 = card('0000:9a:00.0', '8086', 'bcce', '120000', _n6000_port.bdf,
             driver='dfl-pci',
             fpga=DFL(N6000_COMPAT_ID, ('0' * 32,)))

_u250_port = root_port('0000:d7:00.0')
U250_MGMT = card('0000:d8:00.0', '10ee', '5004', '120000', _u250_port.bdf,
                 driver='xclmgmt')
U250_USER = card('0000:d8:00.1', '10ee', '5005', '120000', _u250_port.bdf,
                 driver='xocl')
# A U200 running its factory image: the management function only.
_u200_port = root_port('0000:64:00.0')
U200_GOLDEN = card('0000:65:00.0', '10ee', '5000', '120000',
                   _u200_port.bdf)

# The device id of this Inspur board is illustrative.
_inspur_fpga_port = root_port('0000:6e:00.0')
INSPUR_FPGA = card('0000:6f:00.0', '1bd4', '0021', '120000',
                   _inspur_fpga_port.bdf)

FPGA_HOST = CHIPSET + [_pac_port, PAC, *PAC_VFS, _d5005_port, D5005,
                       _n6000_port, N6000, _u250_port, U250_MGMT, U250_USER,
                       _u200_port, U200_GOLDEN, _inspur_fpga_port,
                       INSPUR_FPGA]

# --- QAT, NICs, SSDs, NPUs ------------------------------------------------

# C62x: three endpoints on the PCH, VFs enabled on the first only.
_qat_port = root_port('0000:3c:00.0')
QAT_C62X = card('0000:3d:00.0', '8086', '37c8', '0b4000', _qat_port.bdf,
                driver='c6xx', sriov_totalvfs=16)
QAT_C62X_VFS = virtual_functions(
    QAT_C62X, '37c9', ['0000:3d:01.0', '0000:3d:01.1', '0000:3d:01.2',
                       '0000:3d:01.3'], driver='vfio-pci')
_qat2_port = root_port('0000:3e:00.0')
QAT_C62X_NO_VFS = card('0000:3f:00.0', '8086', '37c8', '0b4000',
                       _qat2_port.bdf, driver='c6xx', sriov_totalvfs=16)
# A 4xxx (gen4): brought down and up through qat/state, running the
# crypto services.
_qat4_port = root_port('0000:6a:00.0')
QAT_4XXX = card('0000:6b:00.0', '8086', '4940', '0b4000', _qat4_port.bdf,
                driver='4xxx', sriov_totalvfs=16,
                qat=QAT('up', 'sym;asym'))
QAT_4XXX_VFS = virtual_functions(QAT_4XXX, '4941',
                                 ['0000:6b:00.1', '0000:6b:00.2'],
                                 driver='vfio-pci')

_x710_port = root_port('0000:17:00.0')
X710_P0 = card('0000:18:00.0', '8086', '1572', '020000', _x710_port.bdf,
               driver='i40e', sriov_totalvfs=64, net=('eth2',))
X710_P0_VFS = virtual_functions(
    X710_P0, '154c', ['0000:18:02.0', '0000:18:02.1', '0000:18:02.2',
                      '0000:18:02.3'], driver='iavf')
X710_P1 = card('0000:18:00.1', '8086', '1572', '020000', _x710_port.bdf,
               driver='i40e', sriov_totalvfs=64, net=('eth3',))
_e810_port = root_port('0000:b5:00.0')
E810 = card('0000:b6:00.0', '8086', '1592', '020000', _e810_port.bdf,
            driver='ice', sriov_totalvfs=128, net=('ens801f0',))
E810_VFS = virtual_functions(E810, '1889', ['0000:b6:01.0', '0000:b6:01.1'],
                             driver='iavf')
_cx5_port = root_port('0000:59:00.0')
CONNECTX5 = card('0000:5a:00.0', '15b3', '1017', '020000', _cx5_port.bdf,
                 driver='mlx5_core', net=('ens2f0',))

_inspur_ssd_port = root_port('0000:b0:00.0')
INSPUR_SSD = card('0000:b1:00.0', '1bd4', '1001', '010802',
                  _inspur_ssd_port.bdf, driver='vfio-pci')

_ascend_ports = [root_port('0000:81:00.0'), root_port('0000:83:00.0'),
                 root_port('0000:89:00.0')]
ASCEND_910 = [card('0000:82:00.0', '19e5', 'd801', '120000',
                   _ascend_ports[0].bdf, driver='devdrv_device_driver'),
              card('0000:84:00.0', '19e5', 'd801', '120000',
                   _ascend_ports[1].bdf, driver='devdrv_device_driver')]
ASCEND_310P = card('0000:8a:00.0', '19e5', 'd500', '120000',
                   _ascend_ports[2].bdf, driver='devdrv_device_driver')

IO_HOST = CHIPSET + [
    _qat_port, QAT_C62X, *QAT_C62X_VFS, _qat2_port, QAT_C62X_NO_VFS,
    _qat4_port, QAT_4XXX, *QAT_4XXX_VFS,
    _x710_port, X710_P0, *X710_P0_VFS, X710_P1, _e810_port, E810, *E810_VFS,
    _cx5_port, CONNECTX5, _inspur_ssd_port, INSPUR_SSD, *_ascend_ports,
    *ASCEND_910, ASCEND_310P]

HOSTS = {
    'chipset_only': CHIPSET,
    'gpu': GPU_HOST,
    'fpga': FPGA_HOST,
    'io': IO_HOST,
    'mixed': list({f.bdf: f for f in GPU_HOST + FPGA_HOST + IO_HOST}
                  .values()),
}

# The driver options that make every device of ``mixed`` offer something
# where it can, as ``{(group, option): value}``.
MIXED_OPTIONS = {
    ('gpu_devices', 'enabled_vgpu_types'): ['nvidia-222', 'nvidia-472'],
    ('vgpu_nvidia-222', 'device_addresses'): ['0000:3b:00.0'],
    ('vgpu_nvidia-472', 'device_addresses'): ['0000:af:00.4',
                                              '0000:af:00.5'],
    ('intel_nic', 'physical_device_mappings'): ['physnet1:eth2'],
    # The Mellanox port, and the BMC display that must still be refused.
    ('pci', 'device_spec'): [json.dumps({'vendor_id': '15b3'}),
                             json.dumps({'vendor_id': '1a03'})],
}

# The lines of pci.ids that name some of the functions above; the others
# fall back to their ids.
PCI_IDS = '''\
# excerpt of the PCI ID database
10de  NVIDIA Corporation
\t1eb8  TU104GL [Tesla T4]
\t\t10de 12a2  Tesla T4
\t20f1  GA100 [A100 PCIe 40GB]
8086  Intel Corporation
\t1572  Ethernet Controller X710 for 10GbE SFP+
\t37c8  C62x Chipset QuickAssist Technology
C 03  Display controller
\t00  VGA compatible controller
'''
