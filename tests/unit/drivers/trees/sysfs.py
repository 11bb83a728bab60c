"""Write a sysfs tree, as the kernel lays it out, from a short description.

The description (``hosts.py``) lists PCI functions; this module writes what
the kernel would show for them under ``<root>/sys``: the device directories
nested below their bridges in ``sys/devices``, the ``sys/bus/pci/devices``
links, ``driver``/``physfn``/``virtfn<N>`` links, mdev types and created
mdevs, network interfaces and the FPGA class devices of the OPAE and DFL
drivers. Running it as a program writes one host for inspection:

    python -m tests.unit.drivers.trees.sysfs mixed /tmp/mixed
"""

import dataclasses
import os
import shutil
import sys


@dataclasses.dataclass(frozen=True)
class Mdev:
    type_id: str
    name: str
    available: int
    created: tuple[str, ...] = ()  # UUIDs of mdevs that exist


@dataclasses.dataclass(frozen=True)
class OPAE:
    """The out-of-tree intel-fpga driver: /sys/class/fpga/intel-fpga-dev.N"""

    interface_id: str
    bitstream_id: str
    afu_ids: tuple[str, ...] = ()  # one per port; all zeros when blank


@dataclasses.dataclass(frozen=True)
class DFL:
    """The upstream DFL driver: /sys/class/fpga_region/regionN."""

    compat_id: str
    afu_ids: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Function:
    bdf: str
    vendor: str
    device: str
    class_code: str  # 6 hex digits
    parent: str | None = None  # upstream bridge; None on a root bus
    numa: int = -1
    driver: str | None = None
    subsystem: tuple[str, str] = ('0000', '0000')
    physfn: str | None = None  # set on VFs
    sriov_totalvfs: int | None = None
    mdev_types: tuple[Mdev, ...] = ()
    net: tuple[str, ...] = ()
    fpga: OPAE | DFL | None = None


def virtual_functions(pf, device, addresses, driver=None):
    """The VFs of ``pf`` at ``addresses``, same parent and NUMA node."""
    return [Function(bdf, pf.vendor, device, pf.class_code,
                     parent=pf.parent, numa=pf.numa, driver=driver,
                     subsystem=pf.subsystem, physfn=pf.bdf)
            for bdf in addresses]


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text + '\n')


def _link(link, target):
    """A relative symlink at ``link`` to the absolute path ``target``."""
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(os.path.relpath(target, os.path.dirname(link)), link)


def build(root, functions, pci_ids=None):
    """Write ``functions`` below ``root``; return ``root``."""
    by_bdf = {f.bdf: f for f in functions}
    sys_dir = os.path.join(root, 'sys')
    paths = {}

    def device_dir(bdf):
        if bdf not in paths:
            function = by_bdf[bdf]
            if function.parent:
                base = device_dir(function.parent)
            else:
                domain, bus = bdf.split(':')[:2]
                base = os.path.join(sys_dir, 'devices',
                                    'pci%s:%s' % (domain, bus))
            paths[bdf] = os.path.join(base, bdf)
        return paths[bdf]

    vfs = {}
    for function in functions:
        if function.physfn:
            vfs.setdefault(function.physfn, []).append(function.bdf)

    for function in functions:
        path = device_dir(function.bdf)
        os.makedirs(path, exist_ok=True)
        for name, value in (
                ('vendor', '0x' + function.vendor),
                ('device', '0x' + function.device),
                ('class', '0x' + function.class_code),
                ('subsystem_vendor', '0x' + function.subsystem[0]),
                ('subsystem_device', '0x' + function.subsystem[1]),
                ('numa_node', str(function.numa))):
            _write(os.path.join(path, name), value)
        _link(os.path.join(sys_dir, 'bus/pci/devices', function.bdf), path)
        if function.driver:
            driver_dir = os.path.join(sys_dir, 'bus/pci/drivers',
                                      function.driver)
            os.makedirs(driver_dir, exist_ok=True)
            _link(os.path.join(path, 'driver'), driver_dir)
        if function.physfn:
            _link(os.path.join(path, 'physfn'), device_dir(function.physfn))
        if function.sriov_totalvfs is not None:
            _write(os.path.join(path, 'sriov_totalvfs'),
                   str(function.sriov_totalvfs))
            _write(os.path.join(path, 'sriov_numvfs'),
                   str(len(vfs.get(function.bdf, ()))))
        # VF n sits at the PF's routing id + offset + n * stride: the
        # index follows the address.
        for index, vf in enumerate(sorted(vfs.get(function.bdf, ()))):
            _link(os.path.join(path, 'virtfn%d' % index), device_dir(vf))
        for interface in function.net:
            _write(os.path.join(path, 'net', interface, 'ifindex'), '1')
        if function.mdev_types:
            _write_mdev_types(sys_dir, function, path)
        if isinstance(function.fpga, OPAE):
            _write_opae(sys_dir, function.fpga, path)
        elif isinstance(function.fpga, DFL):
            _write_dfl(sys_dir, function.fpga, path)

    if pci_ids is not None:
        _write(os.path.join(root, 'usr/share/hwdata/pci.ids'), pci_ids)
    return root


def _write_mdev_types(sys_dir, function, path):
    _link(os.path.join(sys_dir, 'class/mdev_bus', function.bdf), path)
    for mdev in function.mdev_types:
        type_dir = os.path.join(path, 'mdev_supported_types', mdev.type_id)
        _write(os.path.join(type_dir, 'name'), mdev.name)
        _write(os.path.join(type_dir, 'available_instances'),
               str(mdev.available))
        _write(os.path.join(type_dir, 'device_api'), 'vfio-pci')
        os.makedirs(os.path.join(type_dir, 'devices'), exist_ok=True)
        # Writing a UUID here is how an mdev is created.
        _write(os.path.join(type_dir, 'create'), '')
        for uuid in mdev.created:
            _write_mdev(sys_dir, path, type_dir, uuid)


def _write_mdev(sys_dir, parent, type_dir, uuid):
    mdev_dir = os.path.join(parent, uuid)
    _write(os.path.join(mdev_dir, 'remove'), '')
    _link(os.path.join(mdev_dir, 'mdev_type'), type_dir)
    _link(os.path.join(type_dir, 'devices', uuid), mdev_dir)
    _link(os.path.join(sys_dir, 'bus/mdev/devices', uuid), mdev_dir)
    return mdev_dir


def kernel_creates_mdev(root, parent, type_id):
    """What the kernel does when a UUID is written to the ``create`` file
    of ``type_id`` on ``parent``: the mdev's directory below its parent,
    with ``remove`` and ``mdev_type``, linked from the type's ``devices``
    and from ``sys/bus/mdev/devices``. Returns the directory."""
    sys_dir = os.path.join(root, 'sys')
    parent_dir = os.path.realpath(os.path.join(sys_dir, 'class/mdev_bus',
                                               parent))
    type_dir = os.path.join(parent_dir, 'mdev_supported_types', type_id)
    with open(os.path.join(type_dir, 'create')) as f:
        uuid = f.read().strip()
    return _write_mdev(sys_dir, parent_dir, type_dir, uuid)


def kernel_removes_mdev(root, mdev_dir):
    """What the kernel does once ``1`` is written to an mdev's
    ``remove``: the directory and its links are gone."""
    uuid = os.path.basename(mdev_dir)
    type_dir = os.path.realpath(os.path.join(mdev_dir, 'mdev_type'))
    os.unlink(os.path.join(type_dir, 'devices', uuid))
    os.unlink(os.path.join(root, 'sys/bus/mdev/devices', uuid))
    shutil.rmtree(mdev_dir)


def _write_opae(sys_dir, fpga, path):
    index = len(os.listdir(os.path.join(sys_dir, 'class/fpga'))) if \
        os.path.isdir(os.path.join(sys_dir, 'class/fpga')) else 0
    dev_dir = os.path.join(path, 'fpga', 'intel-fpga-dev.%d' % index)
    fme = os.path.join(dev_dir, 'intel-fpga-fme.%d' % index)
    _write(os.path.join(fme, 'pr', 'interface_id'), fpga.interface_id)
    _write(os.path.join(fme, 'bitstream_id'), fpga.bitstream_id)
    for port, afu_id in enumerate(fpga.afu_ids, start=index):
        _write(os.path.join(dev_dir, 'intel-fpga-port.%d' % port, 'afu_id'),
               afu_id)
    _link(os.path.join(dev_dir, 'device'), path)
    _link(os.path.join(sys_dir, 'class/fpga', os.path.basename(dev_dir)),
          dev_dir)


def _write_dfl(sys_dir, fpga, path):
    class_dir = os.path.join(sys_dir, 'class/fpga_region')
    index = len(os.listdir(class_dir)) if os.path.isdir(class_dir) else 0
    region = os.path.join(path, 'dfl-fme.%d' % index, 'fpga_region',
                          'region%d' % index)
    _write(os.path.join(region, 'compat_id'), fpga.compat_id)
    for port, afu_id in enumerate(fpga.afu_ids, start=index):
        _write(os.path.join(path, 'dfl-port.%d' % port, 'afu_id'), afu_id)
    _link(os.path.join(class_dir, os.path.basename(region)), region)


if __name__ == '__main__':
    # Through the package, not __main__, so that the classes hosts.py
    # uses are the ones build() checks for.
    from tests.unit.drivers.trees import hosts
    from tests.unit.drivers.trees import sysfs
    name, target = sys.argv[1:3]
    sysfs.build(target, hosts.HOSTS[name], pci_ids=hosts.PCI_IDS)
    print(target)
