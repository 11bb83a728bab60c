"""Creating and removing mediated devices (vGPUs) through sysfs.

The kernel makes an mdev when its UUID is written to
``sys/class/mdev_bus/<PCI address>/mdev_supported_types/<type>/create``
and shows it as ``sys/bus/mdev/devices/<uuid>``, a link to its directory
below the parent device, holding the link ``mdev_type`` and the file
``remove`` (write 1 to remove it).

Both calls are idempotent, so that a bind or a release repeated after a
crash ends as the first would have: creating an mdev that exists with the
type and parent asked for answers False, removing one that is gone
answers False.

An mdev's UUID is the name of the allocation it was made for (the attach
handle's UUID of one bind), never reused. Removing one also names the
parent and type it was made with: an mdev of that UUID elsewhere is not
the caller's to remove, and is refused (MdevConflict) untouched.
"""

import os

from cyborg.privsep import agent_pctxt
from cyborg.privsep import checks


class MdevConflict(Exception):
    """An mdev of the UUID asked for exists with another type or parent."""


def _mdev_dir(root, uuid):
    """The directory of mdev ``uuid`` below ``root/sys/devices``; None if
    the kernel shows no such mdev."""
    link = os.path.join(root, 'sys/bus/mdev/devices', uuid)
    if not os.path.lexists(link):
        return None
    real = checks.resolve(root, link, 'mdev %s' % uuid)
    if os.path.basename(real) != uuid:
        raise checks.InvalidArgument('mdev %s: %s leads to %s, which is not '
                                     'an mdev' % (uuid, link, real))
    return real


def _parent_and_type(root, mdev_dir, uuid):
    """(parent device directory, type id) of the mdev in ``mdev_dir``,
    whose ``mdev_type`` must be a type its parent offers."""
    what = 'mdev %s' % uuid
    type_dir = checks.resolve(root, os.path.join(mdev_dir, 'mdev_type'),
                              what)
    parent = os.path.dirname(mdev_dir)
    if os.path.dirname(type_dir) != os.path.join(parent,
                                                 'mdev_supported_types'):
        raise checks.InvalidArgument('%s: its type %s is not a type of its '
                                     'parent %s' % (what, type_dir, parent))
    return parent, os.path.basename(type_dir)


def _type_dir(root, pci_address, mdev_type, what):
    """``.../<pci_address>/mdev_supported_types/<mdev_type>``, which the
    device must offer."""
    parent = checks.resolve(
        root, os.path.join(root, 'sys/class/mdev_bus', pci_address), what)
    if os.path.basename(parent) != pci_address:
        raise checks.InvalidArgument('%s: %s is not the device %s'
                                     % (what, parent, pci_address))
    types_dir = os.path.join(parent, 'mdev_supported_types')
    try:
        offered = sorted(os.listdir(types_dir))
    except OSError:
        offered = []
    if mdev_type not in offered:
        raise checks.InvalidArgument(
            '%s: the device offers no mdev type %s (it offers: %s)'
            % (what, mdev_type, ', '.join(offered) or 'none'))
    type_dir = os.path.join(types_dir, mdev_type)
    if checks.resolve(root, type_dir, what) != type_dir:
        raise checks.InvalidArgument('%s: %s is a link' % (what, type_dir))
    return parent, type_dir


def _exists(root, uuid, parent, mdev_type):
    """Whether mdev ``uuid`` exists as asked; MdevConflict if it exists
    otherwise."""
    mdev_dir = _mdev_dir(root, uuid)
    if mdev_dir is None:
        return False
    existing_parent, existing_type = _parent_and_type(root, mdev_dir, uuid)
    if existing_type != mdev_type:
        raise MdevConflict('mdev %s exists with type %s, not %s'
                           % (uuid, existing_type, mdev_type))
    if existing_parent != parent:
        raise MdevConflict('mdev %s exists on %s, not on %s'
                           % (uuid, os.path.basename(existing_parent),
                              os.path.basename(parent)))
    return True


@agent_pctxt.entrypoint
def create_mdev(pci_address, mdev_type, uuid):
    """Create mdev ``uuid`` of ``mdev_type`` on the PCI function
    ``pci_address``; True if made now, False if it existed already."""
    checks.pci_address(pci_address)
    checks.mdev_type_name(mdev_type)
    checks.uuid(uuid)
    root = checks.sysfs_root()
    what = 'mdev %s of type %s on %s' % (uuid, mdev_type, pci_address)
    parent, type_dir = _type_dir(root, pci_address, mdev_type, what)
    create = checks.control_file(type_dir, 'create', what)
    if _exists(root, uuid, parent, mdev_type):
        return False
    try:
        checks.write_control_file(create, uuid)
    except FileExistsError:
        # Made between the look and the write.
        if _exists(root, uuid, parent, mdev_type):
            return False
        raise
    return True


@agent_pctxt.entrypoint
def remove_mdev(uuid, pci_address, mdev_type):
    """Remove mdev ``uuid``, made of ``mdev_type`` on the PCI function
    ``pci_address``; False if there was none, MdevConflict (nothing
    written) if it exists with another parent or type."""
    checks.uuid(uuid)
    checks.pci_address(pci_address)
    checks.mdev_type_name(mdev_type)
    root = checks.sysfs_root()
    mdev_dir = _mdev_dir(root, uuid)
    if mdev_dir is None:
        return False
    # An mdev, not another device, and the one this caller made.
    parent, existing_type = _parent_and_type(root, mdev_dir, uuid)
    if (os.path.basename(parent), existing_type) != (pci_address,
                                                     mdev_type):
        raise MdevConflict('mdev %s is of type %s on %s, not of type %s on '
                           '%s: not removed' % (
                               uuid, existing_type, os.path.basename(parent),
                               mdev_type, pci_address))
    remove = checks.control_file(mdev_dir, 'remove', 'mdev %s' % uuid)
    try:
        checks.write_control_file(remove, '1')
    except (FileNotFoundError, ProcessLookupError):
        return False  # removed between the look and the write
    return True
