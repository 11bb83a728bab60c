"""What a playbook pair declares of its variables, and the check of the
values given for one run.

A pair is a directory holding ``setup.yml``, ``teardown.yml`` and
``variables.yml``; the last maps every variable the playbooks read to
its type::

    pci_address: {type: pci_address}
    num_vfs: {type: integer, min: 0, max: 2048}
    profile: {type: string, pattern: '[1-9]g\\.[0-9]+gb', max_length: 16}
    mode: {type: choice, values: [enabled, disabled]}
    persistent: {type: boolean}
    mig_devices: {type: counts, pattern: '[1-9]g\\.[0-9]+gb', max: 7}

A ``counts`` value maps names (each matching the pattern) to whole
numbers from 0 to its ``max``: how many of each, as a MIG layout.
Every declared variable must be given a value of its type, and nothing
undeclared may be given. ``sysfs_root`` and ``nvml_library`` are never
declared: the host's privileged side sets them from its own
configuration. A string never holds Jinja's delimiters, whatever its
pattern allows, so that Ansible cannot read a value as a template.
"""

import re

import yaml

PAIR_FILES = ('setup.yml', 'teardown.yml', 'variables.yml')
ACTIONS = ('setup', 'teardown')
# Set by the privileged side, never by the caller.
RESERVED = ('sysfs_root', 'nvml_library')
PAIR_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9_-]{0,254}')
VARIABLE_NAME = re.compile(r'[a-z_][a-z0-9_]{0,63}')
PCI_ADDRESS = re.compile(r'[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]')
MAX_LENGTH = 255
MAX_VARIABLES = 64
_TEMPLATE = re.compile(r'[{}%#]')
TYPES = ('integer', 'string', 'pci_address', 'choice', 'boolean', 'counts')
# The most names one counts value holds.
MAX_COUNTS = 32
_FIELDS = {
    'integer': {'min', 'max'},
    'string': {'pattern', 'max_length'},
    'pci_address': set(),
    'choice': {'values'},
    'boolean': set(),
    'counts': {'pattern', 'max'},
}


class Invalid(ValueError):
    """A declaration or a value that is refused, with the sentence why."""


def load(path):
    """The declaration in the file ``path``: {name: spec}."""
    try:
        with open(path) as f:
            text = f.read(64 * 1024)
        declared = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise Invalid('%s cannot be read: %s' % (path, exc))
    return check_declaration(declared, path)


def check_declaration(declared, where):
    """``declared`` if it is a well-formed declaration."""
    if not isinstance(declared, dict):
        raise Invalid('%s must map variable names to their types.' % where)
    if len(declared) > MAX_VARIABLES:
        raise Invalid('%s declares more than %d variables.'
                      % (where, MAX_VARIABLES))
    for name, spec in declared.items():
        what = '%s: variable %s' % (where, name)
        if not isinstance(name, str) or not VARIABLE_NAME.fullmatch(name):
            raise Invalid('%s: %r is not a variable name (lower-case '
                          'letters, digits and _).' % (where, name))
        if name in RESERVED:
            raise Invalid('%s is set by the host, not declared.' % what)
        if not isinstance(spec, dict) or spec.get('type') not in TYPES:
            raise Invalid('%s needs a type, one of %s.'
                          % (what, ', '.join(TYPES)))
        kind = spec['type']
        unknown = set(spec) - {'type'} - _FIELDS[kind]
        if unknown:
            raise Invalid('%s: a %s has no %s.'
                          % (what, kind, ', '.join(sorted(unknown))))
        _check_spec(what, kind, spec)
    return declared


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_spec(what, kind, spec):
    if kind == 'integer':
        for bound in ('min', 'max'):
            if bound in spec and not _is_int(spec[bound]):
                raise Invalid('%s: %s must be a whole number.'
                              % (what, bound))
    elif kind in ('string', 'counts'):
        pattern = spec.get('pattern')
        if not isinstance(pattern, str):
            raise Invalid('%s: a %s needs a pattern its %s must match.'
                          % (what, kind, 'values' if kind == 'string'
                             else 'names'))
        try:
            re.compile(pattern)
        except re.error as exc:
            raise Invalid('%s: the pattern is not a regular expression '
                          '(%s).' % (what, exc))
        if kind == 'counts':
            if not _is_int(spec.get('max')) or spec['max'] < 0:
                raise Invalid('%s: counts need a max, a whole number.'
                              % what)
            return
        length = spec.get('max_length', MAX_LENGTH)
        if not _is_int(length) or not 1 <= length <= MAX_LENGTH:
            raise Invalid('%s: max_length must be from 1 to %d.'
                          % (what, MAX_LENGTH))
    elif kind == 'choice':
        values = spec.get('values')
        if (not isinstance(values, list) or not values
                or not all(isinstance(v, str) and not _TEMPLATE.search(v)
                           for v in values)):
            raise Invalid('%s: a choice needs a list of plain strings.'
                          % what)


def check_values(declared, values):
    """``values`` (a dict from the caller) if each is declared and of
    its declared type, and every declared one is given."""
    if not isinstance(values, dict):
        raise Invalid('The variables of a playbook run must be a mapping.')
    undeclared = sorted(set(values) - set(declared))
    if undeclared:
        raise Invalid('The playbooks declare no variable %s.'
                      % ', '.join(str(name) for name in undeclared))
    missing = sorted(set(declared) - set(values))
    if missing:
        raise Invalid('The playbooks need the variable %s.'
                      % ', '.join(missing))
    for name, value in values.items():
        _check_value(name, declared[name], value)
    return values


def _shown(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + '...'


def _check_value(name, spec, value):
    kind = spec['type']
    if kind == 'integer':
        if (not _is_int(value) or value < spec.get('min', value)
                or value > spec.get('max', value)):
            raise Invalid('%s must be a whole number%s, not %s.' % (
                name, _range(spec), _shown(value)))
    elif kind == 'boolean':
        if not isinstance(value, bool):
            raise Invalid('%s must be true or false, not %s.'
                          % (name, _shown(value)))
    elif kind == 'pci_address':
        if not isinstance(value, str) or not PCI_ADDRESS.fullmatch(value):
            raise Invalid('%s must be a PCI address (dddd:bb:dd.f, lower-'
                          'case hex digits), not %s.' % (name, _shown(value)))
    elif kind == 'counts':
        _check_counts(name, spec, value)
    elif kind == 'choice':
        if value not in spec['values']:
            raise Invalid('%s must be one of %s, not %s.' % (
                name, ', '.join(spec['values']), _shown(value)))
    else:
        if (not isinstance(value, str)
                or len(value) > spec.get('max_length', MAX_LENGTH)
                or _TEMPLATE.search(value)
                or not re.fullmatch(spec['pattern'], value)):
            raise Invalid('%s must match %s (at most %d characters, no '
                          'template delimiters), not %s.' % (
                              name, spec['pattern'],
                              spec.get('max_length', MAX_LENGTH),
                              _shown(value)))


def _check_counts(name, spec, value):
    if not isinstance(value, dict) or len(value) > MAX_COUNTS:
        raise Invalid('%s must map at most %d names to counts, not %s.'
                      % (name, MAX_COUNTS, _shown(value)))
    for key, count in value.items():
        if (not isinstance(key, str) or len(key) > MAX_LENGTH
                or _TEMPLATE.search(key)
                or not re.fullmatch(spec['pattern'], key)):
            raise Invalid('The names in %s must match %s (no template '
                          'delimiters), not %s.' % (name, spec['pattern'],
                                                    _shown(key)))
        if not _is_int(count) or not 0 <= count <= spec['max']:
            raise Invalid('The count of %s in %s must be a whole number '
                          'from 0 to %d, not %s.' % (key, name, spec['max'],
                                                     _shown(count)))


def _range(spec):
    if 'min' in spec and 'max' in spec:
        return ' from %d to %d' % (spec['min'], spec['max'])
    if 'min' in spec:
        return ' of at least %d' % spec['min']
    if 'max' in spec:
        return ' of at most %d' % spec['max']
    return ''
