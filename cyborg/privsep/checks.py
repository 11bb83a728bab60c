"""The checks every privileged entry point makes before it acts.

An argument comes from the unprivileged agent, and through it from an RPC
message: it is accepted only in its one canonical form, and a path built
from it is resolved (symlinks followed) and must stay below the daemon's
sysfs root. What fails a check raises ``InvalidArgument`` and nothing is
touched.
"""

import os
import re
import stat
import threading

from oslo_config import cfg

from cyborg.conf import device_config as device_config_conf
from cyborg.conf import gpu_devices as gpu_devices_conf
from cyborg.conf import pci as pci_conf

_UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}')
PCI_ADDRESS = re.compile(r'[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]')
# Kernel mdev type ids: nvidia-222, i915-GVTg_V5_4, mlx5_core-local.
_MDEV_TYPE = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}')
# MIG profiles: 3g.40gb, 1g.10gb+me.
_MIG_PROFILE = re.compile(r'[1-9]\d*g\.[1-9]\d*gb(\+me)?', re.ASCII)

_conf_lock = threading.Lock()


class InvalidArgument(ValueError):
    """An argument of a privileged call that is refused."""


def uuid(value):
    """``value`` if it is a UUID in canonical form (lower case, dashes)."""
    if not isinstance(value, str) or not _UUID.fullmatch(value):
        raise InvalidArgument('%r is not a UUID in canonical form '
                              '(8-4-4-4-12 lower-case hex digits)' % (value,))
    return value


def pci_address(value):
    """``value`` if it is a PCI address ``dddd:bb:dd.f`` in lower case."""
    if not isinstance(value, str) or not PCI_ADDRESS.fullmatch(value):
        raise InvalidArgument('%r is not a PCI address (dddd:bb:dd.f, lower-'
                              'case hex digits)' % (value,))
    return value


def mdev_type_name(value):
    """``value`` if it can name an mdev type (no path separator, no dot
    first)."""
    if not isinstance(value, str) or not _MDEV_TYPE.fullmatch(value):
        raise InvalidArgument('%r is not an mdev type name' % (value,))
    return value


def mig_profile_name(value):
    """``value`` if it can name a MIG profile (``3g.40gb``,
    ``1g.10gb+me``)."""
    if not isinstance(value, str) or not _MIG_PROFILE.fullmatch(value):
        raise InvalidArgument('%r is not a MIG profile name (such as '
                              '3g.40gb or 1g.10gb+me)' % (value,))
    return value


def one_of(value, allowed, what):
    """``value`` if it is one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgument('%r is not a %s (%s)'
                              % (value, what, ', '.join(allowed)))
    return value


def count(value, what):
    """``value`` if it is a whole number, 0 or more (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument('%s %r is not a whole number' % (what, value))
    return value


def daemon_conf():
    """The daemon's configuration: oslo.privsep's ``cfg.CONF``, parsed by
    privsep-helper from the files it was given, with ``[pci]``,
    ``[device_config]`` and ``[gpu_devices]`` known."""
    conf = cfg.CONF
    with _conf_lock:
        if 'pci' not in conf:
            pci_conf.register_opts(conf)
        if device_config_conf.GROUP not in conf:
            device_config_conf.register_opts(conf)
        if gpu_devices_conf.GROUP not in conf:
            gpu_devices_conf.register_opts(conf)
    return conf


def sysfs_root():
    """The daemon's ``[pci] sysfs_root``, symlinks resolved."""
    return os.path.realpath(daemon_conf().pci.sysfs_root)


def within(path, top):
    """Whether the resolved ``path`` is ``top`` or below it."""
    return os.path.commonpath([path, top]) == top


def resolve(root, path, what):
    """The real path of ``path``, which must exist and lie below
    ``root/sys/devices``, where the kernel keeps every device."""
    try:
        real = os.path.realpath(path, strict=True)
    except OSError as exc:
        raise InvalidArgument('%s: %s does not exist (%s)'
                              % (what, path, exc.strerror))
    devices = os.path.join(root, 'sys', 'devices')
    if not within(real, devices):
        raise InvalidArgument('%s: %s leads to %s, outside %s'
                              % (what, path, real, devices))
    return real


def pci_function(root, address, what):
    """The real sysfs directory of the PCI function ``address`` (checked
    already) under ``root``: it must be that function's own, not a link
    to another."""
    device = resolve(
        root, os.path.join(root, 'sys/bus/pci/devices', address), what)
    if os.path.basename(device) != address:
        raise InvalidArgument('%s: %s is not the function %s'
                              % (what, device, address))
    return device


def control_file(directory, name, what):
    """``directory/name`` if it is a regular file, not a link."""
    path = os.path.join(directory, name)
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        raise InvalidArgument('%s: no %s (%s)' % (what, path, exc.strerror))
    if not stat.S_ISREG(mode):
        raise InvalidArgument('%s: %s is not a regular file' % (what, path))
    return path


def write_control_file(path, text):
    """Write ``text`` to the control file ``path``; a link that replaced
    it since it was checked is not followed. (sysfs ignores O_TRUNC; a
    recorded tree keeps what was written, as the tests read it.)"""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW
                 | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode('ascii'))
    finally:
        os.close(fd)
