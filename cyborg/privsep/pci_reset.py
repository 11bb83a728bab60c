"""Resetting a PCI function that a VM had, before the next one gets it.

The kernel resets a function when ``1`` is written to
``sys/bus/pci/devices/<address>/reset`` (by the first method of its
``reset_method`` that works: ``flr``, a function-level reset, where the
function has one). Only a function bound to ``vfio-pci``, or to no
driver, is reset: one given to VMs, never one the host itself uses (its
disks, its network, a GPU its own driver holds).
"""

import os

from cyborg.privsep import agent_pctxt
from cyborg.privsep import checks

# The driver of a function that VMs are given.
PASSTHROUGH_DRIVER = 'vfio-pci'


@agent_pctxt.entrypoint
def reset_function(pci_address):
    """Reset the function ``pci_address``; the kernel's reset methods for
    it (``reset_method``), '' where it does not say."""
    checks.pci_address(pci_address)
    root = checks.sysfs_root()
    what = 'reset of %s' % pci_address
    device = checks.pci_function(root, pci_address, what)
    driver = os.path.join(device, 'driver')
    bound = (os.path.basename(os.path.realpath(driver))
             if os.path.lexists(driver) else None)
    if bound not in (None, PASSTHROUGH_DRIVER):
        raise checks.InvalidArgument(
            '%s: the function is bound to %s, not %s: the host uses it, '
            'no VM had it' % (what, bound, PASSTHROUGH_DRIVER))
    reset = checks.control_file(device, 'reset', what)
    checks.write_control_file(reset, '1')
    try:
        with open(os.path.join(device, 'reset_method')) as methods:
            return methods.read().strip()
    except OSError:
        return ''
