"""pci_driver: any PCI function the operator lists, offered whole.

The list is ``[pci] device_spec`` in Nova's format. A matched physical
function is one device with one deployable (``pci_<address>``, resource
class ``CUSTOM_PCI``). When virtual functions of it match, they are the
attach handles and the physical function itself is not offered; a VF is
never a device of its own. The device type follows the PCI class
(``CLASS_DEVICE_TYPES``); a function of a class with no device type is
left out with a warning, as are bridges, audio, USB and BMC displays.
"""

import fnmatch
import json
import logging
import re

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

RESOURCE_CLASS = 'CUSTOM_PCI'

# Device type by PCI class (4 hex digits), then by base class (2).
CLASS_DEVICE_TYPES = {
    pci.CLASS_NVME: 'SSD',
    pci.CLASS_COPROCESSOR: 'QAT',
    '02': 'NIC',
    '03': 'GPU',
    '11': 'AICHIP',
    '12': 'AICHIP',
}

_ADDRESS_FIELDS = ('domain', 'bus', 'slot', 'function')


def _fields(address):
    return (address.domain, address.bus, address.device, address.function)


class DeviceSpecError(base.DriverError):
    code = 'cyborg.invalid_device_spec'


class DeviceSpec:
    """One item of ``[pci] device_spec``."""

    def __init__(self, item):
        unknown = set(item) - {'vendor_id', 'product_id', 'address'}
        if unknown:
            raise DeviceSpecError('Unsupported keys in device_spec: %s'
                                  % ', '.join(sorted(unknown)))
        self.vendor_id = self._hex(item.get('vendor_id', '*'))
        self.product_id = self._hex(item.get('product_id', '*'))
        address = item.get('address', '*')
        if isinstance(address, dict):
            self._address = self._regex_matcher(address)
        elif isinstance(address, str):
            self._address = self._glob_matcher(address)
        else:
            raise DeviceSpecError('address must be a string or an object')

    @staticmethod
    def _hex(value):
        value = str(value).strip().lower()
        if value.startswith('0x'):
            value = value[2:]
        if value != '*' and not re.fullmatch(r'[0-9a-f]{1,4}', value):
            raise DeviceSpecError('Not a PCI id: %r' % value)
        return value if value == '*' else value.zfill(4)

    @staticmethod
    def _glob_matcher(text):
        # [[[domain]:]bus]:][slot][.function]; a part left out matches all.
        text = text.strip().lower()
        left, dot, function = text.rpartition('.')
        if not dot:
            left, function = text, '*'
        parts = left.split(':')
        if len(parts) > 3:
            raise DeviceSpecError('Not a PCI address glob: %r' % text)
        parts = ['*'] * (3 - len(parts)) + parts
        patterns = [p or '*' for p in parts] + [function or '*']

        def match(address):
            pairs = zip(_fields(address), patterns, strict=True)
            return all(fnmatch.fnmatchcase(v, p) for v, p in pairs)
        return match

    @staticmethod
    def _regex_matcher(fields):
        unknown = set(fields) - set(_ADDRESS_FIELDS)
        if unknown:
            raise DeviceSpecError('Unsupported address keys: %s'
                                  % ', '.join(sorted(unknown)))
        try:
            patterns = [re.compile(fields.get(key, '.*'), re.IGNORECASE)
                        for key in _ADDRESS_FIELDS]
        except re.error as e:
            raise DeviceSpecError('Bad address expression: %s' % e)

        def match(address):
            pairs = zip(_fields(address), patterns, strict=True)
            return all(p.fullmatch(v) for v, p in pairs)
        return match

    def matches(self, function):
        return (self.vendor_id in ('*', function.vendor_id)
                and self.product_id in ('*', function.device_id)
                and self._address(function.address))


def parse_device_spec(lines):
    specs = []
    for line in lines:
        try:
            items = json.loads(line)
        except ValueError as e:
            raise DeviceSpecError('device_spec is not JSON: %s' % e)
        for item in items if isinstance(items, list) else [items]:
            if not isinstance(item, dict):
                raise DeviceSpecError('device_spec items are objects')
            specs.append(DeviceSpec(item))
    return specs


def device_type(function):
    return (CLASS_DEVICE_TYPES.get(function.pci_class)
            or CLASS_DEVICE_TYPES.get(function.class_code[:2]))


class PCIPassthroughDriver(base.AcceleratorDriver):
    name = 'pci_driver'
    device_type = None  # typed by PCI class, device by device

    def __init__(self, conf, pci_reader):
        super().__init__(conf, pci_reader)
        # A malformed list fails the agent at start, not every cycle.
        self.specs = parse_device_spec(conf.pci.device_spec)

    def _wanted(self, function):
        return (not function.is_infrastructure
                and any(spec.matches(function) for spec in self.specs))

    def discover(self):
        if not self.specs:
            return []
        functions = self.pci.functions()
        by_address = base.functions_by_address(functions)
        # Matched functions grouped under their physical function.
        groups = {}
        for function in functions:
            if self._wanted(function):
                root = function.physfn or function.address
                groups.setdefault(root, []).append(function)
        devices = []
        for root_address in sorted(groups, key=str):
            physical = by_address.get(root_address)
            if physical is None:
                LOG.warning('VFs of %s match device_spec but %s is gone',
                            root_address, root_address)
                continue
            kind = device_type(physical)
            if kind is None:
                LOG.warning('%s matches device_spec but class %s is not '
                            'an accelerator type', root_address,
                            physical.class_code)
                continue
            members = groups[root_address]
            vfs = [f for f in members if f.is_vf]
            handles = [base.pci_attach_handle(f.address)
                       for f in (vfs or members)]
            deployable = inventory.Deployable(
                name=traits.deployable_name('pci', root_address),
                num_accelerators=len(handles),
                resource_class=RESOURCE_CLASS,
                driver_name=self.name,
                traits=traits.device_traits(kind, physical),
                attach_handles=handles)
            devices.append(base.pci_device(kind, physical, [deployable]))
        return devices
