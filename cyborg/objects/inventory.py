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
# What a VM is given (AttachHandle.attach_type).
ATTACH_TYPES = ('PCI', 'MDEV', 'TEST_PCI')


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


@dataclasses.dataclass
class AttachHandle:
    """Something a VM can be given: a PCI function or a mediated device."""

    attach_type: str
    # Strings only: domain, bus, device, function for PCI; plus
    # physical_network for NICs; asked_type and vgpu_mark for MDEV.
    attach_info: dict

    @property
    def key(self):
        return (self.attach_type, tuple(sorted(self.attach_info.items())))

    def to_dict(self):
        return _KINDS[AttachHandle].dump(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data):
        return cls(**_KINDS[AttachHandle].load(data))


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
        fields = _fields_but(self, 'attach_handles')
        fields['attach_handles'] = [h.to_dict() for h in self.attach_handles]
        return _KINDS[Deployable].dump(fields)

    @classmethod
    def from_dict(cls, data):
        fields = _KINDS[Deployable].load(data)
        fields['attach_handles'] = [AttachHandle.from_dict(h) for h in
                                    _entries(fields, 'attach_handles')]
        return cls(**fields)


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

    def to_dict(self):
        fields = _fields_but(self, 'deployables')
        fields['deployables'] = [d.to_dict() for d in self.deployables]
        return _KINDS[Device].dump(fields)

    @classmethod
    def from_dict(cls, data):
        fields = _KINDS[Device].load(data)
        fields['deployables'] = [Deployable.from_dict(d) for d in
                                 _entries(fields, 'deployables')]
        return cls(**fields)


@dataclasses.dataclass
class HostInventory:
    hostname: str
    devices: list = dataclasses.field(default_factory=list)

    def to_dict(self):
        return _KINDS[HostInventory].dump({
            'hostname': self.hostname,
            'devices': [d.to_dict() for d in self.devices]})

    @classmethod
    def from_dict(cls, data):
        """A report of any 1.x agent, versioned or not."""
        fields = _KINDS[HostInventory].load(data)
        fields['devices'] = [Device.from_dict(d) for d in
                             _entries(fields, 'devices')]
        return cls(**fields)


_KINDS = {cls: payload.Kind.of_dataclass(name, VERSION, cls)
          for cls, name in ((HostInventory, 'host inventory'),
                            (Device, 'device'),
                            (Deployable, 'deployable'),
                            (AttachHandle, 'attach handle'))}


def _fields_but(obj, nested):
    """The fields of a dataclass but ``nested`` (its child objects),
    copied as ``dataclasses.asdict`` copies them."""
    return {f.name: copy.deepcopy(getattr(obj, f.name))
            for f in dataclasses.fields(obj) if f.name != nested}


def _entries(fields, name):
    entries = fields[name]
    if not isinstance(entries, list):
        raise payload.PayloadError('%s is a list, not %r.' % (name, entries))
    return entries
