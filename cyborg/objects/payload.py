"""Versioned payloads: the plain JSON that crosses RPC between releases.

During a rolling upgrade an agent of one release talks to a conductor of
another, so every structured payload says which shape it has: a
``version`` key, ``MAJOR.MINOR``. A minor bump adds optional fields; a
major bump is a shape an older reader cannot use. A reader therefore

- takes any version of its own major, older or newer;
- ignores the fields it does not know (a newer writer's additions),
  saying so once at debug level;
- fills the optional fields it knows but the writer left out (an older
  writer) with their defaults;
- refuses another major with an error that says which side to upgrade.

A payload without ``version`` comes from a release before payloads were
versioned and is read as 1.0.

Each payload is described once by a ``Kind``; ``dump`` stamps a dict
with the kind's version and ``load`` reads one back. Maps whose keys are
data rather than fields (attach info, attributes, board info) are values
of a field and carry no version of their own.
"""

import copy
import dataclasses
import logging
import threading

from cyborg import exception

LOG = logging.getLogger(__name__)

# What a payload without a version is: the shape before versions.
UNVERSIONED = '1.0'


class PayloadError(exception.Invalid):
    code = 'cyborg.payload_invalid'


class PayloadVersionError(PayloadError):
    code = 'cyborg.payload_version_unsupported'


def parse_version(text):
    """``(major, minor)`` of ``'1.3'``; PayloadError for anything else."""
    try:
        major, minor = str(text).split('.')
        return int(major), int(minor)
    except ValueError:
        raise PayloadError('A payload version is MAJOR.MINOR, not %r.'
                           % (text,)) from None


_unknown_seen = set()
_unknown_seen_lock = threading.Lock()


def _first_time(key):
    with _unknown_seen_lock:
        if key in _unknown_seen:
            return False
        _unknown_seen.add(key)
        return True


class Kind:
    """One payload's shape: its ``name`` for messages, the ``version``
    this release writes, the ``required`` fields and the ``optional``
    ones with their defaults (a callable default is called per read).
    """

    def __init__(self, name, version, required=(), optional=None):
        self.name = name
        self.version = version
        self.major = parse_version(version)[0]
        self.required = tuple(required)
        self.optional = dict(optional or {})

    @classmethod
    def of_dataclass(cls, name, version, dataclass):
        """The kind of a dataclass: fields without a default are required."""
        required, optional = [], {}
        for field in dataclasses.fields(dataclass):
            if field.default is not dataclasses.MISSING:
                optional[field.name] = field.default
            elif field.default_factory is not dataclasses.MISSING:
                optional[field.name] = field.default_factory
            else:
                required.append(field.name)
        return cls(name, version, required, optional)

    def dump(self, fields):
        """``fields`` (a dict) stamped with this release's version."""
        return {**fields, 'version': self.version}

    def load(self, data):
        """The fields of ``data`` that this release knows, every optional
        one present. Raises ``PayloadError`` (a 400) for something that
        is not this payload, ``PayloadVersionError`` for another major.
        """
        if not isinstance(data, dict):
            raise PayloadError('The %s payload is a JSON object, not %r.'
                               % (self.name, data))
        version = data.get('version', UNVERSIONED)
        major, _minor = parse_version(version)
        if major != self.major:
            newer = major > self.major
            raise PayloadVersionError(
                'The %s payload of version %s cannot be read by this service, '
                'which reads %d.x: upgrade %s.'
                % (self.name, version, self.major,
                   'this service to the sender\'s release' if newer
                   else 'the sender'))
        missing = [name for name in self.required if name not in data]
        if missing:
            raise PayloadError('The %s payload of version %s lacks %s.'
                               % (self.name, version, ', '.join(missing)))
        known = set(self.required) | set(self.optional) | {'version'}
        unknown = tuple(sorted(set(data) - known))
        if unknown and _first_time((self.name, version, unknown)):
            LOG.debug('Ignoring fields %s of a %s payload of version %s '
                      '(this release writes %s)', ', '.join(unknown),
                      self.name, version, self.version)
        fields = {name: data[name] for name in self.required}
        for name, default in self.optional.items():
            if name in data:
                fields[name] = data[name]
            elif callable(default):
                fields[name] = default()
            else:
                fields[name] = copy.copy(default)
        return fields
