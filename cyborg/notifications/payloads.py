"""The payloads of versioned notifications, and their JSON Schemas.

A notification's payload says what it is, as Nova's do::

    {"cyborg_object.name": "AcceleratorRequestPayload",
     "cyborg_object.namespace": "cyborg",
     "cyborg_object.version": "1.0",
     "cyborg_object.data": {"uuid": ..., ...}}

A minor version adds fields; a major one changes or removes some, so a
consumer checks the major it reads. Each payload kind is a frozen
dataclass here; its schema (``schema``) is generated from the dataclass
and kept in ``schemas/<name>.json`` for consumers, the drift test
checking that the two agree (regenerate with
``tools/gen-notification-schemas``).
"""

import collections.abc
import dataclasses
import inspect
import pathlib
import types
import typing

from cyborg import states
from cyborg.accelerator.drivers import health
from cyborg.device_config import kinds
from cyborg.device_config import status as config_status

NAMESPACE = 'cyborg'
PREFIX = 'cyborg_object.'
SCHEMA_DIALECT = 'https://json-schema.org/draft/2020-12/schema'
SCHEMA_DIR = pathlib.Path(__file__).parent / 'schemas'
DEVICE_STATUSES = ('enabled', 'maintaining')

_JSON_TYPES = {str: 'string', int: 'integer', float: 'number',
               bool: 'boolean', dict: 'object', list: 'array'}


def _field(doc, *, enum=None, uuid=False):
    """A payload field with its description (``doc``) for the schema and
    the reference; ``enum`` lists its values, ``uuid`` says it is one."""
    return dataclasses.field(metadata={'doc': doc, 'enum': enum,
                                       'uuid': uuid})


class Payload:
    """What every payload kind shares; subclasses are frozen dataclasses
    with ``NAME`` and ``VERSION``."""

    NAME = None
    VERSION = None

    def __post_init__(self):
        # A payload off its schema is refused here, where the code that
        # built it is named, rather than sent for consumers to trip on.
        for name, annotation in typing.get_type_hints(type(self)).items():
            value = getattr(self, name)
            allowed = typing.get_args(annotation) or (annotation,)
            if (not isinstance(value, allowed)
                    or isinstance(value, bool) and bool not in allowed):
                raise TypeError('%s.%s must be %s, not %r' % (
                    self.NAME, name,
                    ' or '.join(t.__name__ for t in allowed), value))

    def to_primitive(self):
        """The payload as it is sent."""
        return {PREFIX + 'name': self.NAME,
                PREFIX + 'namespace': NAMESPACE,
                PREFIX + 'version': self.VERSION,
                PREFIX + 'data': dataclasses.asdict(self)}

    @classmethod
    def from_fields(cls, source, **values):
        """The payload of ``source`` (a mapping or an object with the
        fields as attributes), ``values`` taking precedence; a field
        ``source`` lacks is None."""
        return cls(**{f.name: values[f.name] if f.name in values
                      else value_of(source, f.name)
                      for f in dataclasses.fields(cls)})


def value_of(source, name):
    """``source[name]`` of a mapping, ``source.name`` of anything else
    (a database row); None if it has none."""
    if isinstance(source, collections.abc.Mapping):
        return source.get(name)
    return getattr(source, name, None)


@dataclasses.dataclass(frozen=True)
class AcceleratorRequestPayload(Payload):
    """An accelerator request (ARQ): one accelerator for one instance."""

    NAME = 'AcceleratorRequestPayload'
    VERSION = '1.0'

    uuid: str = _field('The ARQ.', uuid=True)
    state: str = _field('Its state once the event happened (for a delete: '
                        'the state it was deleted in).', enum=states.STATES)
    device_profile_name: str = _field('The device profile it was made '
                                      'from.')
    device_profile_group_id: int = _field('The index of the profile\'s '
                                          'group it requests.')
    project_id: str | None = _field('The project it belongs to.')
    hostname: str | None = _field('The compute host it is bound to (for an '
                                  'unbind: was bound to).')
    device_rp_uuid: str | None = _field(
        'The resource provider of the device Nova chose.', uuid=True)
    instance_uuid: str | None = _field('The instance it is bound to (for an '
                                       'unbind: was bound to).', uuid=True)
    attach_handle_type: str | None = _field(
        'How the instance attaches the device (PCI, MDEV, ...), once '
        'bound.')
    attach_handle_uuid: str | None = _field('The attach handle, once bound.',
                                            uuid=True)


@dataclasses.dataclass(frozen=True)
class AcceleratorRequestErrorPayload(AcceleratorRequestPayload):
    """An accelerator request whose bind failed, with why."""

    NAME = 'AcceleratorRequestErrorPayload'
    VERSION = '1.0'

    reason: str = _field('Why the bind failed, as a sentence.')


@dataclasses.dataclass(frozen=True)
class DevicePayload(Payload):
    """An accelerator device of a host."""

    NAME = 'DevicePayload'
    VERSION = '1.0'

    uuid: str = _field('The device.', uuid=True)
    type: str = _field('Its kind: GPU, FPGA, QAT, NIC, SSD, AICHIP, ...')
    vendor: str = _field('Its PCI vendor id.')
    model: str = _field('Its model.')
    hostname: str = _field('The host it is in.')
    status: str = _field('enabled, or maintaining once an operator '
                         'disabled it.', enum=DEVICE_STATUSES)


@dataclasses.dataclass(frozen=True)
class DeviceHealthChangePayload(DevicePayload):
    """A device whose observed health changed."""

    NAME = 'DeviceHealthChangePayload'
    VERSION = '1.0'

    old_health: str = _field('Its health before.', enum=health.STATES)
    new_health: str = _field('Its health now.', enum=health.STATES)
    reason: str | None = _field('Why it is in its new health, as the agent '
                                'observed it.')


@dataclasses.dataclass(frozen=True)
class DeviceConfigPolicyPayload(Payload):
    """An operator's device configuration policy."""

    NAME = 'DeviceConfigPolicyPayload'
    VERSION = '1.0'

    uuid: str = _field('The policy.', uuid=True)
    name: str = _field('Its name.')
    priority: int = _field('Its priority: where two policies select one '
                           'device, the higher wins.')
    hosts: list = _field('The host names or fnmatch patterns it selects.')
    devices: dict = _field('Its device selector: any of driver, vendor_id, '
                           'product_id and pci_addresses.')
    kind: str = _field('The kind of its settings.', enum=kinds.KINDS)
    settings: dict = _field('The wanted settings, of its kind.')
    restore_on_delete: bool = _field('Whether deleting it puts its devices '
                                     'back as discovered.')


@dataclasses.dataclass(frozen=True)
class DeviceConfigStatusPayload(Payload):
    """Where one device stands with the policy that wins it."""

    NAME = 'DeviceConfigStatusPayload'
    VERSION = '1.0'

    device_uuid: str = _field('The device.', uuid=True)
    hostname: str = _field('The host it is in.')
    policy_uuid: str = _field('The policy that wins it (or won it, once '
                              'state is null).', uuid=True)
    policy_name: str = _field('That policy\'s name.')
    old_state: str | None = _field('Its configuration state before; null '
                                   'when the policy just selected it.',
                                   enum=config_status.STATES)
    state: str | None = _field('Its configuration state now; null when no '
                               'policy selects it any more.',
                               enum=config_status.STATES)
    wanted_settings: dict | None = _field(
        'The settings the policy wants of it; null while it is put back '
        'as discovered (its policy deleted with restore_on_delete).')


@dataclasses.dataclass(frozen=True)
class AttachHandleScrubPayload(Payload):
    """The scrub of an attach handle that an instance let go, before
    another may have it."""

    NAME = 'AttachHandleScrubPayload'
    VERSION = '1.0'

    uuid: str = _field('The attach handle.', uuid=True)
    attach_type: str = _field('How instances attach it (PCI, MDEV, MIG, '
                              '...).')
    hostname: str = _field('The host it is in.')
    device_uuid: str = _field('Its device, quarantined when the scrub '
                              'failed.', uuid=True)
    driver_name: str = _field('The driver that scrubs it.')
    method: str = _field('The driver\'s scrub method (flr, mdev-destroy, '
                         '...).')
    result: str = _field('passed, or failed: the handle stays dirty and '
                         'is scrubbed again later.',
                         enum=('passed', 'failed'))
    step: str | None = _field('The step that failed (reset, destroy, '
                              'verify, timeout, ...); null when it '
                              'passed.')
    reason: str | None = _field('Why it failed, as a sentence; null when '
                                'it passed.')
    seconds: float = _field('How long the scrub took, or how long the '
                            'conductor waited for it.')


KINDS = (AcceleratorRequestPayload, AcceleratorRequestErrorPayload,
         DevicePayload, DeviceHealthChangePayload, DeviceConfigPolicyPayload,
         DeviceConfigStatusPayload, AttachHandleScrubPayload)


# -- schemas -------------------------------------------------------------

def _property(field, annotation):
    nullable = (isinstance(annotation, types.UnionType)
                and type(None) in typing.get_args(annotation))
    base, = [a for a in typing.get_args(annotation) or (annotation,)
             if a is not type(None)]
    prop = {'description': field.metadata['doc'],
            'type': [_JSON_TYPES[base], 'null'] if nullable
            else _JSON_TYPES[base]}
    if field.metadata['uuid']:
        prop['format'] = 'uuid'
    if field.metadata['enum']:
        prop['enum'] = list(field.metadata['enum']) + (
            [None] if nullable else [])
    return prop


def schema(kind):
    """The JSON Schema (draft 2020-12) of payload ``kind`` as sent."""
    hints = typing.get_type_hints(kind)
    fields = dataclasses.fields(kind)
    return {
        '$schema': SCHEMA_DIALECT,
        '$id': 'urn:cyborg:notification-payload:%s:%s' % (kind.NAME,
                                                          kind.VERSION),
        'title': kind.NAME,
        'description': inspect.getdoc(kind),
        'type': 'object',
        'required': [PREFIX + key for key in
                     ('name', 'namespace', 'version', 'data')],
        'additionalProperties': False,
        'properties': {
            PREFIX + 'name': {'const': kind.NAME},
            PREFIX + 'namespace': {'const': NAMESPACE},
            PREFIX + 'version': {'const': kind.VERSION},
            PREFIX + 'data': {
                'type': 'object',
                'required': [f.name for f in fields],
                'additionalProperties': False,
                'properties': {f.name: _property(f, hints[f.name])
                               for f in fields},
            },
        },
    }


def schema_path(kind):
    return SCHEMA_DIR / ('%s.json' % kind.NAME)
