"""What a driver discovers and an agent reports: the host inventory.

A ``HostInventory`` is the whole truth about one host at one moment. It
travels over RPC as plain JSON (``to_dict``/``from_dict``) and the
conductor diffs it against the database. Every object has a natural key
that is stable across reports, so that an unchanged host yields an
unchanged snapshot.

The host, each device, deployable and attach handle carry a payload
version (``payload.py``): a conductor reads the report of an agent one
release older or newer, ignoring fields it does not know and defaulting
those the agent did not send.
"""

import copy
import dataclasses

from cyborg.objects import payload

# The payload version of each object below; bump the minor when adding
# a field with a default, the major when an older reader cannot cope.
VERSION = '1.0'

# Device types of the API (Device.type).
DEVICE_TYPES = ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD')
# What a VM or workload is given (AttachHandle.attach_type): a MIG
# instance of a GPU goes to a container or a host process by its UUID.
ATTACH_TYPES = ('PCI', 'MDEV', 'MIG', 'TEST_PCI')


# The resource classes of a MIG instance made on demand: a group asks
# for its slices by amount, and they make one accelerator, one ARQ.
MIG_COMPUTE_SLICE = 'CUSTOM_MIG_COMPUTE_SLICE'
MIG_MEMORY_SLICE = 'CUSTOM_MIG_MEMORY_SLICE'
MIG_MEDIA_ENGINE = 'CUSTOM_MIG_MEDIA_ENGINE'
SLICE_CLASSES = frozenset({MIG_COMPUTE_SLICE, MIG_MEMORY_SLICE,
                           MIG_MEDIA_ENGINE})


def accelerators_asked(group):
    """How many accelerators (ARQs) a device profile group asks for: one
    per unit of each resource, and one for all the slices of a MIG
    instance."""
    units, sliced = 0, False
    for key, value in group.items():
        if not key.startswith('resources:'):
            continue
        if key[len('resources:'):] in SLICE_CLASSES:
            sliced = True
        else:
            units += int(value)
    return units + sliced


def resources_asked(group):
    """{resource class: amount} of a device profile group's
    ``resources:`` keys."""
    return {key[len('resources:'):]: int(value)
            for key, value in group.items() if key.startswith('resources:')}


# A deployable attribute ``inventory:<resource class>`` = total: an
# inventory its provider offers beside its own resource class.
EXTRA_INVENTORY = 'inventory:'


def extra_inventories(attributes):
    """((resource class, total), ...) of ``attributes``, sorted."""
    return _counted(attributes, EXTRA_INVENTORY)


# A deployable attribute ``reserved:<resource class>`` = units: what its
# provider keeps out of scheduling although no allocation holds it (the
# slices a MIG card can no longer place, ``mig_fit.stranded``).
RESERVED_INVENTORY = 'reserved:'


def reserved_inventories(attributes):
    """((resource class, units), ...) of ``attributes``' ``reserved:``
    keys, sorted."""
    return tuple((rc, max(0, units))
                 for rc, units in _counted(attributes, RESERVED_INVENTORY))


def _counted(attributes, prefix):
    """((resource class, number), ...) of the ``<prefix><resource
    class>`` attributes whose value is a whole number, sorted."""
    counted = []
    for key, value in attributes.items():
        if str(key).startswith(prefix):
            try:
                number = int(str(value))
            except ValueError:
                continue
            counted.append((str(key)[len(prefix):], number))
    return tuple(sorted(counted))


@dataclasses.dataclass(frozen=True)
class PCIAddress:
    domain: str  # '0000'
    bus: str  # '0c'
    device: str  # '00'
    function: str  # '0'

    @classmethod
    def parse(cls, text):
        """From ``0000:0c:00.0``."""
        domain, bus, rest = text.lower().split(':')
        device, function = rest.split('.')
        return cls(domain, bus, device, function)

    def __str__(self):
        return '%s:%s:%s.%s' % (self.domain, self.bus, self.device,
                                self.function)

    def as_info(self):
        return dataclasses.asdict(self)


def address_text(info):
    """The PCI address an attach handle's info names, as text; the info
    itself where it names none."""
    try:
        return str(PCIAddress(info['domain'], info['bus'], info['device'],
                              info['function']))
    except (KeyError, TypeError):
        return repr(info)


def controlpath_address(controlpath_type, controlpath_info):
    """How a device is named in observations and metrics: its PCI address
    (``0000:0c:00.0``), or the text of another kind of control path."""
    info = controlpath_info or {}
    if controlpath_type == 'PCI':
        try:
            return str(PCIAddress(info['domain'], info['bus'],
                                  info['device'], info['function']))
        except (KeyError, TypeError):
            pass
    return str(info)


@dataclasses.dataclass
class AttachHandle:
    """Something a VM can be given: a PCI function or a mediated device."""

    attach_type: str
    # Strings only: domain, bus, device, function for PCI; plus
    # physical_network for NICs; asked_type and vgpu_mark for MDEV; the
    # GPU's address, gi_id, ci_id, start and mig_uuid for MIG.
    attach_info: dict

    @property
    def key(self):
        return (self.attach_type, tuple(sorted(self.attach_info.items())))

    def to_dict(self):
        return _dump(self)

    @classmethod
    def from_dict(cls, data):
        return _load(cls, data)


@dataclasses.dataclass
class Deployable:
    """The unit Placement sees: one resource provider with one inventory."""

    name: str  # unique on the host; the RP is "<host>_<name>"
    num_accelerators: int
    resource_class: str  # 'FPGA', 'PGPU', 'VGPU', 'CUSTOM_QAT', ...
    driver_name: str
    traits: list = dataclasses.field(default_factory=list)
    attach_handles: list = dataclasses.field(default_factory=list)
    # Extra key/value facts (bitstream, function, region, ...).
    attributes: dict = dataclasses.field(default_factory=dict)
    # Name of the parent deployable on the same device, for nested ones
    # (an FPGA region inside its board); None for a root.
    parent: str | None = None

    def to_dict(self):
        return _dump(self, 'attach_handles')

    @classmethod
    def from_dict(cls, data):
        return _load(cls, data, 'attach_handles', AttachHandle)


@dataclasses.dataclass
class Device:
    """A physical accelerator, addressed through its control path."""

    type: str
    vendor: str  # PCI vendor id, e.g. '10de'
    model: str
    # How the host addresses the device: ('PCI', PCI address info).
    controlpath_type: str
    controlpath_info: dict
    std_board_info: dict = dataclasses.field(default_factory=dict)
    vendor_board_info: dict = dataclasses.field(default_factory=dict)
    deployables: list = dataclasses.field(default_factory=list)

    @property
    def key(self):
        return (self.controlpath_type,
                tuple(sorted(self.controlpath_info.items())))

    @property
    def address(self):
        return controlpath_address(self.controlpath_type,
                                   self.controlpath_info)

    def to_dict(self):
        return _dump(self, 'deployables')

    @classmethod
    def from_dict(cls, data):
        return _load(cls, data, 'deployables', Deployable)


@dataclasses.dataclass
class HostInventory:
    hostname: str
    devices: list = dataclasses.field(default_factory=list)

    def to_dict(self):
        return _dump(self, 'devices')

    @classmethod
    def from_dict(cls, data):
        """A report of any 1.x agent, versioned or not."""
        return _load(cls, data, 'devices', Device)


_KINDS = {cls: payload.Kind.of_dataclass(name, VERSION, cls)
          for cls, name in ((HostInventory, 'host inventory'),
                            (Device, 'device'),
                            (Deployable, 'deployable'),
                            (AttachHandle, 'attach handle'))}


def _dump(obj, nested=None):
    """The versioned payload of a dataclass: its fields copied as
    ``dataclasses.asdict`` copies them, the child objects of list field
    ``nested`` as their own payloads."""
    fields = {f.name: copy.deepcopy(getattr(obj, f.name))
              for f in dataclasses.fields(obj) if f.name != nested}
    if nested is not None:
        fields[nested] = [child.to_dict() for child in getattr(obj, nested)]
    return _KINDS[type(obj)].dump(fields)


def _load(cls, data, nested=None, child_cls=None):
    """``cls`` read from its payload; list field ``nested`` holds
    ``child_cls`` payloads."""
    fields = _KINDS[cls].load(data)
    if nested is not None:
        fields[nested] = [child_cls.from_dict(entry)
                          for entry in _entries(fields, nested)]
    return cls(**fields)


def _entries(fields, name):
    entries = fields[name]
    if not isinstance(entries, list):
        raise payload.PayloadError('%s is a list, not %r.' % (name, entries))
    return entries
