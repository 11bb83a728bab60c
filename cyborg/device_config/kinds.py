"""The kinds of device settings a policy holds, and how each is checked.

``check(kind, settings)`` answers the settings in their stored form, or
raises ``exception.Invalid`` with a sentence that says what is wrong.
What a device reports (its VF limit, its vGPU types, its MIG table) is
checked in ``device_checks``.
"""

import re

from cyborg import exception

SRIOV_VFS = 'sriov_vfs'
DRIVER_BINDING = 'driver_binding'
VGPU_TYPE = 'vgpu_type'
FPGA_BASE_IMAGE = 'fpga_base_image'
MIG_LAYOUT = 'mig_layout'
PLAYBOOK = 'playbook'
KINDS = (SRIOV_VFS, DRIVER_BINDING, VGPU_TYPE, FPGA_BASE_IMAGE, MIG_LAYOUT,
         PLAYBOOK)
# Kinds whose teardown has nothing to undo (a bitstream is replaced whole
# by the next one loaded): a policy deleted with restore_on_delete leaves
# their devices as they are at once.
NOTHING_TO_UNDO = (FPGA_BASE_IMAGE,)

# The drivers a function may be bound to: vfio-pci for passthrough, or
# "own" for the driver the kernel would pick for the device.
DRIVERS = ('vfio-pci', 'own')
# Far above what PFs offer (256 for the largest NICs known), so that a
# typo is caught where the device's sriov_totalvfs is not known yet.
MAX_VFS = 2048
# An mdev type's directory name: its parent driver, a dash, its name
# (``nvidia-35``, ``i915-GVTg_V5_4``).
MDEV_TYPE = re.compile(r'\A[A-Za-z0-9_]+-[A-Za-z0-9_.]+\Z')
# A MIG profile name as nvidia-smi and mig-parted write it.
MIG_PROFILE = re.compile(r'\A[1-9]\d*g\.[1-9]\d*gb(\+me)?\Z')
PLAYBOOK_NAME = re.compile(r'\A[A-Za-z0-9][A-Za-z0-9_-]*\Z')
VARIABLE_NAME = re.compile(r'\A[A-Za-z_][A-Za-z0-9_]*\Z')
MAX_TEXT = 255
MAX_VARIABLES = 64
UUID = re.compile(r'\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                  r'[0-9a-f]{12}\Z')


def _invalid(message):
    return exception.Invalid(message, code='cyborg.device_config.invalid')


def _fields(kind, settings, required, optional=()):
    if not isinstance(settings, dict):
        raise _invalid('The settings of a %s policy must be a JSON object.'
                       % kind)
    unknown = sorted(set(settings) - set(required) - set(optional))
    if unknown:
        raise _invalid('The settings of a %s policy have no field %s; they '
                       'hold %s.' % (kind, ', '.join(unknown), ', '.join(
                           list(required) + list(optional))))
    for name in required:
        if name not in settings:
            raise _invalid('The settings of a %s policy need the field %s.'
                           % (kind, name))


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _sriov_vfs(settings):
    _fields(SRIOV_VFS, settings, ('num_vfs',))
    num_vfs = settings['num_vfs']
    if not _count(num_vfs) or not 0 <= num_vfs <= MAX_VFS:
        raise _invalid('num_vfs must be a whole number from 0 to %d, not '
                       '%s.' % (MAX_VFS, _shown(num_vfs)))
    return {'num_vfs': num_vfs}


def _driver_binding(settings):
    _fields(DRIVER_BINDING, settings, ('driver',))
    if settings['driver'] not in DRIVERS:
        raise _invalid('driver must be vfio-pci or own (the device\'s own '
                       'driver), not %s.' % _shown(settings['driver']))
    return {'driver': settings['driver']}


def _vgpu_type(settings):
    _fields(VGPU_TYPE, settings, ('mdev_type',))
    value = settings['mdev_type']
    if (not isinstance(value, str) or len(value) > MAX_TEXT
            or not MDEV_TYPE.match(value)):
        raise _invalid('mdev_type must name a mediated device type as '
                       'sysfs does, <driver>-<type> (nvidia-35, say), not '
                       '%s.' % _shown(value))
    return {'mdev_type': value}


def _fpga_base_image(settings):
    _fields(FPGA_BASE_IMAGE, settings, ('bitstream_uuid',),
            ('clear_bitstream_uuid',))
    checked = {}
    for name in ('bitstream_uuid', 'clear_bitstream_uuid'):
        if name not in settings:
            continue
        value = settings[name]
        # The API turns the other forms of a uuid into this one.
        if not isinstance(value, str) or not UUID.match(value):
            raise _invalid('%s must be the uuid of a bitstream image, not '
                           '%s.' % (name, _shown(value)))
        checked[name] = value
    return checked


def _mig_layout(settings):
    _fields(MIG_LAYOUT, settings, ('mig_enabled',), ('mig_devices',))
    enabled = settings['mig_enabled']
    if not isinstance(enabled, bool):
        raise _invalid('mig_enabled must be true or false, not %s.'
                       % _shown(enabled))
    devices = settings.get('mig_devices', {})
    if not isinstance(devices, dict):
        raise _invalid('mig_devices must be an object of MIG profile names '
                       'and counts ({"1g.10gb": 7}, say), not %s.'
                       % _shown(devices))
    if devices and not enabled:
        raise _invalid('mig_devices needs mig_enabled true: a GPU out of '
                       'MIG mode has no MIG instances.')
    for name, count in devices.items():
        if not MIG_PROFILE.match(name):
            raise _invalid('%s is not a MIG profile name such as 1g.10gb or '
                           '3g.40gb.' % _shown(name))
        if not _count(count) or count < 0:
            raise _invalid('The count of MIG profile %s must be a whole '
                           'number of 0 or more, not %s.'
                           % (name, _shown(count)))
    return {'mig_enabled': enabled,
            'mig_devices': {n: c for n, c in devices.items() if c}}


def _playbook(settings):
    _fields(PLAYBOOK, settings, ('playbook',), ('variables',))
    name = settings['playbook']
    if (not isinstance(name, str) or len(name) > MAX_TEXT
            or not PLAYBOOK_NAME.match(name)):
        raise _invalid('playbook must name a playbook pair by letters, '
                       'digits, _ and -, not %s.' % _shown(name))
    variables = settings.get('variables', {})
    if not isinstance(variables, dict):
        raise _invalid('variables must be a JSON object, not %s.'
                       % _shown(variables))
    if len(variables) > MAX_VARIABLES:
        raise _invalid('A playbook policy takes at most %d variables.'
                       % MAX_VARIABLES)
    for key, value in variables.items():
        if not VARIABLE_NAME.match(key):
            raise _invalid('%s is not a variable name: letters, digits and '
                           '_, not starting with a digit.' % _shown(key))
        if not (isinstance(value, (str, int, float, bool)) or value is None):
            raise _invalid('The variable %s must be a string, number, '
                           'boolean or null, not %s.'
                           % (key, _shown(value)))
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise _invalid('The variable %s is longer than %d characters.'
                           % (key, MAX_TEXT))
    return {'playbook': name, 'variables': dict(variables)}


_CHECKS = {
    SRIOV_VFS: _sriov_vfs,
    DRIVER_BINDING: _driver_binding,
    VGPU_TYPE: _vgpu_type,
    FPGA_BASE_IMAGE: _fpga_base_image,
    MIG_LAYOUT: _mig_layout,
    PLAYBOOK: _playbook,
}


def check_kind(kind):
    if not isinstance(kind, str) or kind not in _CHECKS:
        raise _invalid('kind must be one of %s, not %s.'
                       % (', '.join(KINDS), _shown(kind)))
    return kind


def check(kind, settings):
    """``settings`` of ``kind`` as stored; Invalid if they are not."""
    return _CHECKS[check_kind(kind)](settings)


def _shown(value):
    """``value`` as a sentence names it."""
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, dict):
        return 'an object'
    if isinstance(value, list):
        return 'an array'
    return (repr(value) if isinstance(value, str) else str(value))[:80]
