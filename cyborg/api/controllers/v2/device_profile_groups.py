"""The request groups of a device profile: what each key may say.

A group maps ``resources:<class>`` to a count, ``trait:<name>`` to
``required`` or ``forbidden`` and ``accel:<key>`` to a value of the type
the device profile spec gives that key. Class and trait names may be
written in lower case and with hyphens; they are stored normalised.
"""

import re

import os_resource_classes
import os_traits

from cyborg import exception
from cyborg.api import request_body
from cyborg.api import uuids
from cyborg.db.api import arqs as arqs_db
from cyborg.objects import inventory

RESOURCES = 'resources:'
TRAIT = 'trait:'
ACCEL = 'accel:'

# \Z, not $: '$' also matches before a trailing newline.
_CUSTOM_NAME = re.compile(r'^CUSTOM_[A-Z0-9_]+\Z')
_COUNT = re.compile(r'\A[1-9][0-9]*\Z')
# One accelerator request per unit: a profile asking for more than one
# request may create could never be used.
MAX_UNITS = arqs_db.MAX_ARQS_PER_REQUEST
_NAME_VALUE = re.compile(r'^[A-Za-z0-9_.-]{1,255}\Z')
_STANDARD_CLASSES = frozenset(os_resource_classes.STANDARDS)
_STANDARD_TRAITS = frozenset(os_traits.get_traits())
_TRAIT_VALUES = ('required', 'forbidden')
_ATTACH_TARGETS = ('VM', 'host', 'none')


def _uuid_value(key, value):
    checked = uuids.canonical(value)
    if checked is None:
        raise _invalid('The value of %s must be a UUID, not %r.'
                       % (key, value))
    return checked


def _name_value(key, value):
    if not _NAME_VALUE.match(value):
        raise _invalid('The value of %s may hold only letters, digits, '
                       '".", "-" and "_" (1 to 255 of them), not %r.'
                       % (key, value))
    return value


def _attach_target(key, value):
    if value not in _ATTACH_TARGETS:
        raise _invalid('The value of %s must be one of %s, not %r.'
                       % (key, ', '.join(_ATTACH_TARGETS), value))
    return value


# The accel: keys of the device profile spec and how each value is checked.
ACCEL_KEYS = {
    'bitstream_id': _uuid_value,
    'bitstream_name': _name_value,
    'function_id': _uuid_value,
    'function_name': _name_value,
    'attach_target': _attach_target,
}


def _invalid(message):
    return exception.Invalid(message, code='cyborg.device_profile.group')


def normalise_name(name):
    """Placement spelling of a class or trait name: upper case, no hyphens."""
    return name.upper().replace('-', '_')


def _resource(key, name, value):
    rc = normalise_name(name)
    if rc not in _STANDARD_CLASSES and not _CUSTOM_NAME.match(rc):
        raise _invalid('%s names no resource class: use a standard class '
                       'such as FPGA or PGPU, or CUSTOM_<NAME>.' % key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not _COUNT.match(value):
        raise _invalid('The value of %s must be a positive whole number, '
                       'not %s.' % (key, _shown(value)))
    # Compared as text first: no huge number is ever built.
    if len(value) > len(str(MAX_UNITS)) or int(value) > MAX_UNITS:
        raise _invalid('The value of %s may be at most %d, not %s: a '
                       'request makes at most %d accelerator requests.'
                       % (key, MAX_UNITS, _shown(value), MAX_UNITS))
    return RESOURCES + rc, value


def _trait(key, name, value):
    trait = normalise_name(name)
    if trait not in _STANDARD_TRAITS and not _CUSTOM_NAME.match(trait):
        raise _invalid('%s names no trait: use a standard trait or '
                       'CUSTOM_<NAME>.' % key)
    if value not in _TRAIT_VALUES:
        raise _invalid('The value of %s must be "required" or "forbidden", '
                       'not %s.' % (key, _shown(value)))
    return TRAIT + trait, value


def _accel(key, name, value):
    check = ACCEL_KEYS.get(name)
    if check is None:
        raise _invalid('%s is not a known accel: key; the known ones are %s.'
                       % (key, ', '.join(sorted(ACCEL_KEYS))))
    if not isinstance(value, str):
        raise _invalid('The value of %s must be a string, not %s.'
                       % (key, _shown(value)))
    return ACCEL + name, check(key, value)


_PREFIXES = ((RESOURCES, _resource), (TRAIT, _trait), (ACCEL, _accel))


def _shown(value):
    if isinstance(value, str):
        return repr(value)
    return request_body.json_type(value)


def _group(index, group):
    if not isinstance(group, dict):
        raise _invalid('Group %d must be a JSON object, not %s.'
                       % (index, request_body.json_type(group)))
    if not group:
        raise _invalid('Group %d is empty; a group asks for at least one '
                       'resource, trait or accel: property.' % index)
    checked = {}
    for key, value in group.items():
        for prefix, check in _PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                new_key, new_value = check(key, key[len(prefix):], value)
                break
        else:
            raise _invalid('Group %d has the key %r: every key starts with '
                           'resources:, trait: or accel: followed by a name.'
                           % (index, key))
        if new_key in checked:
            raise _invalid('Group %d names %s twice.' % (index, new_key))
        checked[new_key] = new_value
    return checked


def check_groups(groups):
    """The groups, checked and normalised, in their order; or Invalid."""
    if not isinstance(groups, list):
        raise _invalid('groups must be a JSON array of objects, not %s.'
                       % request_body.json_type(groups))
    if not groups:
        raise _invalid('groups is empty; a device profile needs at least one '
                       'group.')
    checked = [_group(i, g) for i, g in enumerate(groups)]
    units = sum(inventory.accelerators_asked(group) for group in checked)
    if units > MAX_UNITS:
        raise _invalid('The groups ask for %d accelerators in all; a device '
                       'profile may ask for at most %d, as a request makes '
                       'at most %d accelerator requests.'
                       % (units, MAX_UNITS, MAX_UNITS))
    return checked
