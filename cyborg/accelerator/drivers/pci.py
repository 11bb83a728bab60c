"""The one reader of PCI functions in sysfs that every driver shares.

Drivers never open sysfs themselves: they ask ``PCIReader`` for plain
``PCIFunction`` records and decide from the class code, the vendor and the
data tables below. The reader works under a configurable root so that tests
run against recorded trees.

What the kernel exposes, and what is read here:

- ``sys/bus/pci/devices/<BDF>/``: ``vendor``, ``device``, ``class``,
  ``subsystem_vendor``, ``subsystem_device``, ``numa_node``,
  ``sriov_totalvfs``, ``sriov_numvfs``; links ``driver``, ``physfn``,
  ``virtfn<N>``; ``net/<ifname>`` for network functions.
- ``sys/class/mdev_bus/<BDF>/mdev_supported_types/<type>/``: ``name``,
  ``available_instances``, ``device_api``, ``devices/``.
- ``sys/class/fpga/*`` (OPAE ``intel-fpga`` driver) and
  ``sys/class/fpga_region/*`` (upstream DFL driver).
- ``usr/share/misc/pci.ids`` or ``usr/share/hwdata/pci.ids`` for names.
"""

import dataclasses
import logging
import os
import re

from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

PCI_IDS_PATHS = ('usr/share/misc/pci.ids', 'usr/share/hwdata/pci.ids')

# PCI class codes (base class + subclass, 4 hex digits) by what they are.
CLASS_VGA = '0300'
CLASS_3D = '0302'
CLASS_DISPLAY_OTHER = '0380'
DISPLAY_CLASSES = (CLASS_VGA, CLASS_3D, CLASS_DISPLAY_OTHER)
CLASS_NVME = '0108'
CLASS_ETHERNET = '0200'
CLASS_COPROCESSOR = '0b40'
CLASS_PROCESSING_ACCELERATOR = '1200'
CLASS_SIGNAL_PROCESSING_OTHER = '1180'

# Never accelerators, whoever claims them: bridges (base class 06, which
# includes NVSwitch), audio functions of a GPU, USB controllers and serial
# bus functions (the USB-C/UCSI functions of consumer GPUs), SMBus.
INFRASTRUCTURE_BASE_CLASSES = ('06', '08')
INFRASTRUCTURE_CLASSES = ('0401', '0403', '0c03', '0c05', '0c80')

# Server management (BMC) display controllers: VGA class, never offered.
BMC_DISPLAYS = (
    ('1a03', '2000'),  # ASPEED AST2x00
    ('102b', '0522'),  # Matrox G200e
    ('102b', '0532'),  # Matrox G200eW
    ('102b', '0533'),  # Matrox G200eH
    ('102b', '0534'),  # Matrox G200eR
    ('102b', '0536'),  # Matrox G200eW3
    ('102b', '0538'),  # Matrox G200eH3
)

# Vendor names as they appear in traits (CUSTOM_<TYPE>_<VENDOR>). Fixed
# here rather than taken from pci.ids so that traits are the same on
# every host whatever database it has installed.
VENDOR_TRAIT_NAMES = {
    '10de': 'NVIDIA',
    '8086': 'INTEL',
    '10ee': 'XILINX',
    '1bd4': 'INSPUR',
    '19e5': 'HUAWEI',
    '1002': 'AMD',
    '15b3': 'MELLANOX',
    '14e4': 'BROADCOM',
    '1172': 'ALTERA',
    '144d': 'SAMSUNG',
}

_BDF = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')


@dataclasses.dataclass(frozen=True)
class MdevType:
    """A mediated device type a PCI function offers."""

    type_id: str  # directory name, e.g. 'nvidia-222'
    name: str | None  # human name, e.g. 'GRID T4-2Q'
    available_instances: int
    device_api: str | None  # 'vfio-pci'
    devices: tuple[str, ...]  # UUIDs of mdevs already created

    @property
    def total_instances(self):
        """Instances the type offers in all: free plus already created.

        Creating an mdev moves one from the first count to the second, so
        the total stays put while VMs come and go.
        """
        return self.available_instances + len(self.devices)


@dataclasses.dataclass(frozen=True)
class PCIFunction:
    address: inventory.PCIAddress
    vendor_id: str  # 4 lower-case hex digits
    device_id: str
    class_code: str  # 6 hex digits: base class, subclass, programming i/f
    subsystem_vendor_id: str | None = None
    subsystem_device_id: str | None = None
    numa_node: int | None = None  # None when the kernel says -1
    kernel_driver: str | None = None
    physfn: inventory.PCIAddress | None = None
    virtfns: tuple[inventory.PCIAddress, ...] = ()
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    mdev_types: tuple[MdevType, ...] = ()
    net_interfaces: tuple[str, ...] = ()
    vendor_name: str | None = None
    device_name: str | None = None

    @property
    def is_vf(self):
        return self.physfn is not None

    @property
    def pci_class(self):
        """Base class and subclass, e.g. '0302'."""
        return self.class_code[:4]

    @property
    def is_infrastructure(self):
        """A function that is plumbing or a side function, never offered."""
        return (self.class_code[:2] in INFRASTRUCTURE_BASE_CLASSES
                or self.pci_class in INFRASTRUCTURE_CLASSES
                or (self.vendor_id, self.device_id) in BMC_DISPLAYS)

    def mdev_type(self, type_id):
        for mdev_type in self.mdev_types:
            if mdev_type.type_id == type_id:
                return mdev_type
        return None


@dataclasses.dataclass(frozen=True)
class FPGAPort:
    """An accelerator slot of an FPGA and the function loaded in it."""

    name: str
    afu_id: str | None  # None when nothing is loaded


@dataclasses.dataclass(frozen=True)
class FPGARegion:
    """A programmable FPGA as the FPGA class of the kernel shows it."""

    pci_address: inventory.PCIAddress
    name: str  # e.g. 'intel-fpga-dev.0' or 'region0'
    interface_id: str | None  # what a partial bitstream must be built for
    bitstream_id: str | None
    ports: tuple[FPGAPort, ...] = ()


def _hex_id(text, width):
    """'0x10de' -> '10de'; None stays None."""
    if text is None:
        return None
    value = text.strip().lower()
    if value.startswith('0x'):
        value = value[2:]
    return value.zfill(width)


def _int_or_none(text):
    try:
        return int(text.strip())
    except (AttributeError, ValueError):
        return None


def _normalise_uuid(text):
    """OPAE prints AFU ids as 32 hex digits; DFL as a UUID. Keep digits."""
    if text is None:
        return None
    value = text.strip().lower().replace('-', '')
    if not value or set(value) == {'0'}:
        return None
    return value


class PCIReader:
    """Reads PCI functions, mdev types and FPGA regions below ``root``."""

    def __init__(self, root='/'):
        self.root = root
        self._names = None
        # address -> kernel driver at the last read of the function:
        # what health observations compare the driver bound now with.
        self._drivers_seen = {}

    def _path(self, *parts):
        return os.path.join(self.root, *parts)

    @staticmethod
    def _read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return None

    @staticmethod
    def _link_name(path):
        try:
            return os.path.basename(os.readlink(path))
        except OSError:
            return None

    def functions(self):
        """Every PCI function of the host, sorted by address."""
        devices_dir = self._path('sys/bus/pci/devices')
        try:
            entries = sorted(os.listdir(devices_dir))
        except OSError:
            LOG.warning('No PCI devices under %s', devices_dir)
            return []
        return [function for entry in entries if _BDF.match(entry)
                for function in [self.function(entry)] if function]

    def domains(self):
        """The PCI domains this host's functions are in ('0000', ...):
        names only, no file read."""
        try:
            entries = os.listdir(self._path('sys/bus/pci/devices'))
        except OSError:
            return set()
        return {entry.partition(':')[0] for entry in entries}

    def function(self, address):
        """One PCI function by address, or None if it is not there."""
        bdf = str(address)
        base = self._path('sys/bus/pci/devices', bdf)
        vendor = self._read(os.path.join(base, 'vendor'))
        device = self._read(os.path.join(base, 'device'))
        class_code = self._read(os.path.join(base, 'class'))
        if not (vendor and device and class_code):
            return None

        def attribute(name):
            return self._read(os.path.join(base, name))

        physfn = self._link_name(os.path.join(base, 'physfn'))
        virtfns = []
        for entry in os.listdir(base):
            if entry.startswith('virtfn') and entry[6:].isdigit():
                target = self._link_name(os.path.join(base, entry))
                if target:
                    virtfns.append((int(entry[6:]), target))
        try:
            net = tuple(sorted(os.listdir(os.path.join(base, 'net'))))
        except OSError:
            net = ()
        vendor_id = _hex_id(vendor, 4)
        device_id = _hex_id(device, 4)
        numa_node = _int_or_none(attribute('numa_node'))
        vendor_name, device_name = self.names(vendor_id, device_id)
        kernel_driver = self._link_name(os.path.join(base, 'driver'))
        self._drivers_seen[bdf] = kernel_driver
        return PCIFunction(
            address=inventory.PCIAddress.parse(bdf),
            vendor_id=vendor_id,
            device_id=device_id,
            class_code=_hex_id(class_code, 6),
            subsystem_vendor_id=_hex_id(attribute('subsystem_vendor'), 4),
            subsystem_device_id=_hex_id(attribute('subsystem_device'), 4),
            numa_node=numa_node if numa_node is not None and numa_node >= 0
            else None,
            kernel_driver=kernel_driver,
            physfn=inventory.PCIAddress.parse(physfn) if physfn else None,
            virtfns=tuple(inventory.PCIAddress.parse(target)
                          for _, target in sorted(virtfns)),
            sriov_totalvfs=_int_or_none(attribute('sriov_totalvfs')),
            sriov_numvfs=_int_or_none(attribute('sriov_numvfs')),
            mdev_types=self._mdev_types(bdf),
            net_interfaces=net,
            vendor_name=vendor_name,
            device_name=device_name,
        )

    def function_dir(self, address):
        """The sysfs directory of the function at ``address``."""
        return self._path('sys/bus/pci/devices', str(address))

    def discovered_driver(self, address):
        """(seen, kernel driver) as the last read of ``address`` found
        them; seen is False when discovery never read it."""
        bdf = str(address)
        return bdf in self._drivers_seen, self._drivers_seen.get(bdf)

    def _mdev_types(self, bdf):
        types_dir = self._path('sys/class/mdev_bus', bdf,
                               'mdev_supported_types')
        try:
            entries = sorted(os.listdir(types_dir))
        except OSError:
            return ()
        types = []
        for type_id in entries:
            type_dir = os.path.join(types_dir, type_id)
            try:
                devices = tuple(sorted(
                    os.listdir(os.path.join(type_dir, 'devices'))))
            except OSError:
                devices = ()
            types.append(MdevType(
                type_id=type_id,
                name=self._read(os.path.join(type_dir, 'name')),
                available_instances=_int_or_none(self._read(
                    os.path.join(type_dir, 'available_instances'))) or 0,
                device_api=self._read(os.path.join(type_dir, 'device_api')),
                devices=devices))
        return tuple(types)

    def fpga_regions(self):
        """FPGAs the kernel's FPGA class knows, sorted by PCI address."""
        regions = []
        for class_dir, reader in (('sys/class/fpga', self._opae_region),
                                  ('sys/class/fpga_region',
                                   self._dfl_region)):
            try:
                entries = sorted(os.listdir(self._path(class_dir)))
            except OSError:
                continue
            for name in entries:
                path = self._path(class_dir, name)
                address = self._pci_parent(path)
                if address is None:
                    LOG.warning('FPGA %s is not below a PCI function', path)
                    continue
                regions.append(reader(path, name, address))
        return sorted(regions, key=lambda r: (str(r.pci_address), r.name))

    def _pci_parent(self, path):
        """The nearest PCI function above a class device in /sys/devices."""
        for part in reversed(os.path.realpath(path).split(os.sep)):
            if _BDF.match(part):
                return inventory.PCIAddress.parse(part)
        return None

    def _opae_region(self, path, name, address):
        # intel-fpga-dev.N/{intel-fpga-fme.N, intel-fpga-port.N}
        entries = sorted(os.listdir(path))
        fme = next((os.path.join(path, e) for e in entries
                    if e.startswith('intel-fpga-fme.')), None)
        ports = self._fpga_ports(path, entries, 'intel-fpga-port.')
        return FPGARegion(
            pci_address=address,
            name=name,
            interface_id=_normalise_uuid(self._read(
                os.path.join(fme, 'pr', 'interface_id'))) if fme else None,
            bitstream_id=self._read(os.path.join(fme, 'bitstream_id'))
            if fme else None,
            ports=ports)

    def _fpga_ports(self, directory, entries, prefix):
        """The ports among ``entries`` of ``directory``, with the function
        (AFU) each has loaded."""
        return tuple(
            FPGAPort(e, _normalise_uuid(
                self._read(os.path.join(directory, e, 'afu_id'))))
            for e in entries if e.startswith(prefix))

    def _dfl_region(self, path, name, address):
        # The ports of a DFL card are dfl-port.N below its PCI function.
        pci_dir = self._path('sys/bus/pci/devices', str(address))
        try:
            entries = sorted(os.listdir(pci_dir))
        except OSError:
            entries = []
        ports = self._fpga_ports(pci_dir, entries, 'dfl-port.')
        return FPGARegion(
            pci_address=address,
            name=name,
            interface_id=_normalise_uuid(
                self._read(os.path.join(path, 'compat_id'))),
            bitstream_id=None,
            ports=ports)

    def names(self, vendor_id, device_id):
        """(vendor name, device name) from pci.ids, None where unknown."""
        if self._names is None:
            self._names = self._load_pci_ids()
        vendors, devices = self._names
        return vendors.get(vendor_id), devices.get((vendor_id, device_id))

    def _load_pci_ids(self):
        vendors, devices = {}, {}
        for relative in PCI_IDS_PATHS:
            path = self._path(relative)
            if os.path.exists(path):
                break
        else:
            return vendors, devices
        vendor = None
        with open(path, encoding='utf-8', errors='replace') as f:
            for line in f:
                if line.startswith('C '):
                    break  # the device classes section follows the ids
                if not line.strip() or line.startswith('#'):
                    continue
                if not line.startswith('\t'):
                    vendor, _, name = line.strip().partition('  ')
                    vendors[vendor] = name.strip()
                elif not line.startswith('\t\t') and vendor:
                    device, _, name = line.strip().partition('  ')
                    devices[(vendor, device)] = name.strip()
        return vendors, devices
