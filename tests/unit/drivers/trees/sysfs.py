"""Write a sysfs tree, as the kernel lays it out, from a short description.

The description (``hosts.py``) lists PCI functions; this module writes what
the kernel would show for them under ``<root>/sys``: the device directories
nested below their bridges in ``sys/devices``, the ``sys/bus/pci/devices``
links, ``driver``/``physfn``/``virtfn<N>`` links, ``driver_override``, the
drivers' ``bind``/``unbind`` and the bus's ``drivers_probe`` (plain files
that keep what is written), mdev types and created mdevs, the vGPU type
files of NVIDIA VFs, a QAT gen4 device's ``qat/state`` and
``qat/cfg_services``, network interfaces and the FPGA class devices of the
OPAE and DFL drivers. Running it as a program writes one host for inspection:

    python -m tests.unit.drivers.trees.sysfs mixed /tmp/mixed
"""

import dataclasses
import os
import shutil
import sys
import threading


@dataclasses.dataclass(frozen=True)
class Mdev:
    type_id: str
    name: str
    available: int
    created: tuple[str, ...] = ()  # UUIDs of mdevs that exist


@dataclasses.dataclass(frozen=True)
class VFVGPU:
    """A VF that takes a vGPU type itself (NVIDIA's own VFIO framework,
    H100 and later): ``nvidia/creatable_vgpu_types`` lists the types it
    can still take, ``nvidia/current_vgpu_type`` holds its type's number,
    0 for none; writing a number there gives it that type."""

    creatable: tuple[tuple[int, str], ...]  # (number, name)
    current: int = 0


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
class QAT:
    """A QAT gen4 physical function's ``qat/state`` (up or down) and
    ``qat/cfg_services`` (the services it runs, sym;asym say)."""

    state: str = 'up'
    cfg_services: str = 'sym;asym'


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
    vgpu: VFVGPU | None = None
    net: tuple[str, ...] = ()
    fpga: OPAE | DFL | None = None
    qat: QAT | None = None
    # The kernel's reset methods ('flr'): the function then has its
    # write-only ``reset`` file.
    reset_method: str | None = None


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
        _write_function(root, function, path)
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
        if function.vgpu:
            _write_vf_vgpu(function.vgpu, path)
        if function.qat:
            _write(os.path.join(path, 'qat', 'state'), function.qat.state)
            _write(os.path.join(path, 'qat', 'cfg_services'),
                   function.qat.cfg_services)
        if isinstance(function.fpga, OPAE):
            _write_opae(sys_dir, function.fpga, path)
        elif isinstance(function.fpga, DFL):
            _write_dfl(sys_dir, function.fpga, path)

    if functions:
        _write_raw(os.path.join(sys_dir, 'bus/pci/drivers_probe'), '')
    if pci_ids is not None:
        _write(os.path.join(root, 'usr/share/hwdata/pci.ids'), pci_ids)
    return root


def _write_function(root, function, path):
    """What every function has at ``path``: its ids, NUMA node, an empty
    ``driver_override``, its driver's link and its bus entry."""
    os.makedirs(path, exist_ok=True)
    for name, value in (
            ('vendor', '0x' + function.vendor),
            ('device', '0x' + function.device),
            ('class', '0x' + function.class_code),
            ('subsystem_vendor', '0x' + function.subsystem[0]),
            ('subsystem_device', '0x' + function.subsystem[1]),
            ('numa_node', str(function.numa))):
        _write(os.path.join(path, name), value)
    _link(os.path.join(root, 'sys/bus/pci/devices', function.bdf), path)
    _write_raw(os.path.join(path, 'driver_override'), '(null)\n')
    if function.reset_method:
        _write(os.path.join(path, 'reset_method'), function.reset_method)
        _write_raw(os.path.join(path, 'reset'), '')
    if function.driver:
        _link(os.path.join(path, 'driver'),
              driver_directory(root, function.driver))


def _write_raw(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def driver_directory(root, driver):
    """``sys/bus/pci/drivers/<driver>`` below ``root``, with its ``bind``
    and ``unbind``, made if the driver has none yet (it is loaded)."""
    path = os.path.join(root, 'sys/bus/pci/drivers', driver)
    for name in ('bind', 'unbind'):
        if not os.path.exists(os.path.join(path, name)):
            _write_raw(os.path.join(path, name), '')
    return path


def _write_vf_vgpu(vgpu, path):
    lines = ['ID    : vGPU Name'] + ['%-5d : %s' % (number, name)
                                     for number, name in vgpu.creatable]
    _write(os.path.join(path, 'nvidia', 'creatable_vgpu_types'),
           '\n'.join(lines))
    _write(os.path.join(path, 'nvidia', 'current_vgpu_type'),
           str(vgpu.current))


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


def _take(path):
    """What ``path`` holds, emptied; '' if there is no such file."""
    if not os.path.isfile(path):
        return ''
    with open(path, 'r+') as f:
        text = f.read().strip()
        if text:
            f.seek(0)
            f.truncate()
    return text


def kernel_binds(root, own):
    """What the kernel does with an address written to a driver's
    ``unbind`` (the function loses its ``driver`` link) or to the bus's
    ``drivers_probe`` (an unbound function is linked to the driver its
    ``driver_override`` names, else to its own, ``own[address]``), each
    file emptied once read. Returns [(file, address)] as handled."""
    sys_dir = os.path.join(root, 'sys')
    devices = os.path.join(sys_dir, 'bus/pci/devices')
    drivers = os.path.join(sys_dir, 'bus/pci/drivers')
    handled = []
    for driver in sorted(os.listdir(drivers)):
        address = _take(os.path.join(drivers, driver, 'unbind'))
        if address:
            link = os.path.join(devices, address, 'driver')
            if (os.path.islink(link)
                    and os.path.basename(os.readlink(link)) == driver):
                os.unlink(link)
            handled.append(('%s/unbind' % driver, address))
    address = _take(os.path.join(sys_dir, 'bus/pci/drivers_probe'))
    if address:
        device = os.path.realpath(os.path.join(devices, address))
        with open(os.path.join(device, 'driver_override')) as f:
            override = f.read().strip()
        driver = (own.get(address) if override in ('', '(null)')
                  else override)
        if driver and not os.path.lexists(os.path.join(device, 'driver')):
            _link(os.path.join(device, 'driver'),
                  driver_directory(root, driver))
        handled.append(('drivers_probe', address))
    return handled


class _Watching:
    """A kernel stand-in that acts every few milliseconds while in use
    (``_pass``), as the kernel acts on each write as it is made, and
    once more on the way out. An error in a pass fails the test on the
    way out."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._failure = None

    def _run(self):
        try:
            while not self._stop.wait(0.005):
                self._pass()
        except Exception as exc:  # the test fails with it, in __exit__
            self._failure = exc

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self._failure is not None:
            raise self._failure
        self._pass()


class Binder(_Watching):
    """``kernel_binds`` every few milliseconds while in use, as the
    kernel acts on each write as it is made; ``writes`` lists them in
    order, with what each function's ``driver_override`` came to hold."""

    def __init__(self, root, own):
        self.root = root
        self.own = own
        self.writes = []
        super().__init__()
        self._overrides = self._read_overrides()

    def _read_overrides(self):
        found = {}
        for address in self.own:
            path = os.path.join(self.root, 'sys/bus/pci/devices', address,
                                'driver_override')
            with open(path) as f:
                found[address] = f.read().strip()
        return found

    def _pass(self):
        overrides = self._read_overrides()
        for address, text in overrides.items():
            if text != self._overrides[address]:
                self.writes.append(('driver_override', text))
        self._overrides = overrides
        self.writes += kernel_binds(self.root, self.own)


def kernel_makes_vfs(root, pf, count, vf_device, vf_driver, offset):
    """What the kernel does once ``count`` is written to ``sriov_numvfs``
    of ``pf`` (a ``Function``): the VFs it had are gone, with their
    links, and ``count`` VFs of device id ``vf_device`` are made beside
    it, bound to ``vf_driver`` (None: to no driver), VF n at the PF's
    routing id + ``offset`` + n. Returns their addresses."""
    sys_dir = os.path.join(root, 'sys')
    pf_dir = os.path.realpath(os.path.join(sys_dir, 'bus/pci/devices',
                                           pf.bdf))
    for entry in os.listdir(pf_dir):
        if entry.startswith('virtfn') and entry[6:].isdigit():
            link = os.path.join(pf_dir, entry)
            vf_dir = os.path.realpath(link)
            os.unlink(os.path.join(sys_dir, 'bus/pci/devices',
                                   os.path.basename(vf_dir)))
            shutil.rmtree(vf_dir)
            os.unlink(link)
    domain, bus, slot_function = pf.bdf.split(':')
    slot, function = slot_function.split('.')
    first = int(slot, 16) * 8 + int(function) + offset
    addresses = ['%s:%s:%02x.%d' % (domain, bus, devfn // 8, devfn % 8)
                 for devfn in range(first, first + count)]
    for index, vf in enumerate(virtual_functions(pf, vf_device, addresses,
                                                 driver=vf_driver)):
        path = os.path.join(os.path.dirname(pf_dir), vf.bdf)
        _write_function(root, vf, path)
        _link(os.path.join(path, 'physfn'), pf_dir)
        _link(os.path.join(pf_dir, 'virtfn%d' % index), path)
    return addresses


class VFKernel(_Watching):
    """The kernel's part in a PF's VF count, while in use: every few
    milliseconds it reads the PF's ``sriov_numvfs`` and, on a QAT gen4
    device, ``qat/state`` and ``qat/cfg_services``. ``writes`` lists each
    change in order as (attribute, value); a new count makes the VFs
    (``kernel_makes_vfs``). ``refused`` lists the writes the kernel
    refuses: a count changed other than from 0, services changed while
    the device is up. (The kernel acts on each write as it is made; the
    tasks of a playbook are far more than a few milliseconds apart.)"""

    ATTRIBUTES = ('sriov_numvfs', 'qat/state', 'qat/cfg_services')

    def __init__(self, root, pf, vf_device, vf_driver, offset):
        self.root = root
        self.pf = pf
        self.vf_device = vf_device
        self.vf_driver = vf_driver
        self.offset = offset
        self.writes = []
        self.refused = []
        super().__init__()
        self._seen = self._read()

    def _read(self):
        found = {}
        for name in self.ATTRIBUTES:
            path = os.path.join(self.root, 'sys/bus/pci/devices',
                                self.pf.bdf, name)
            if os.path.exists(path):
                with open(path) as f:
                    found[name] = f.read().strip()
        return found

    def _pass(self):
        now = self._read()
        for name, value in now.items():
            before = self._seen[name]
            if not value:
                # Truncated, not yet written: the write is under way.
                now[name] = before
                continue
            if value == before:
                continue
            self.writes.append((name, value))
            if name == 'sriov_numvfs':
                if before != '0' and value != '0':
                    self.refused.append((name, value))
                kernel_makes_vfs(self.root, self.pf, int(value),
                                 self.vf_device, self.vf_driver,
                                 self.offset)
            elif name == 'qat/cfg_services' and now['qat/state'] == 'up':
                self.refused.append((name, value))
        self._seen = now



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
