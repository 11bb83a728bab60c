"""Scrubs of released attach handles that drivers share.

- ``FLR``: a PCI function a VM had whole. The kernel resets it (a
  function-level reset where it has one, through the privileged helper,
  which resets only functions bound to ``vfio-pci``); then it must still
  be on the bus with its vendor id and no unhealthy PCI-level finding
  (its AER counters, its link).
- ``MDEV_DESTROY``: a mediated device (vGPU). Its release removed it; the
  scrub removes it again if it is still there (idempotent), then checks
  that the kernel no longer shows it and that its type offers an
  instance again on the parent: the parent's capacity came back. What
  the vGPU held goes with it: the host driver clears a vGPU's framebuffer
  before it gives the memory to another.

Each step that fails raises ``base.ScrubFailed`` naming it.
"""

import time

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import health
from cyborg.privsep import mdev as privsep_mdev
from cyborg.privsep import pci_reset

FLR = 'flr'
MDEV_DESTROY = 'mdev-destroy'
# Seconds a removed mdev may take to go: the vendor driver tears it down.
MDEV_SETTLE = 5


def reset_function(pci_health, address, vendor_id):
    """The FLR scrub of the function at ``address`` (a PCIAddress) of
    ``vendor_id``: the steps done."""
    try:
        with base.privileged('Cannot reset %s' % address):
            pci_reset.reset_function(str(address))
    except base.DriverError as e:
        raise base.ScrubFailed('reset', e.message) from e
    if not pci_health.present(address):
        raise base.ScrubFailed('verify', '%s did not come back on the PCI '
                                         'bus after its reset' % address)
    found = pci_health.reader.function(address)
    if found is None or found.vendor_id != vendor_id:
        raise base.ScrubFailed('verify', '%s answers with vendor %s after '
                               'its reset, not %s' % (
                                   address, getattr(found, 'vendor_id', None),
                                   vendor_id))
    unhealthy = [f.reason for f in pci_health.findings(
        address, judge_link_speed=False) if f.state == health.UNHEALTHY]
    if unhealthy:
        raise base.ScrubFailed('verify', '%s after its reset: %s' % (
            address, '; '.join(unhealthy)))
    return ['reset', 'verify']


def destroy_mdev(pci_reader, parent, type_id, uuid, settle=None):
    """The MDEV_DESTROY scrub of mdev ``uuid`` of ``type_id`` on the
    function ``parent`` (a PCIAddress): the steps done. The mdev must be
    gone within ``settle`` seconds of its removal."""
    try:
        with base.privileged('Cannot remove mdev %s of type %s on %s'
                             % (uuid, type_id, parent)):
            privsep_mdev.remove_mdev(uuid, str(parent), type_id)
    except base.DriverError as e:
        raise base.ScrubFailed('destroy', e.message) from e
    settle = MDEV_SETTLE if settle is None else settle
    deadline = time.monotonic() + settle
    while True:
        function = pci_reader.function(parent)
        offered = (function.mdev_type(type_id) if function is not None
                   else None)
        if offered is None:
            raise base.ScrubFailed('verify', '%s no longer offers the vGPU '
                                             'type %s' % (parent, type_id))
        if uuid not in offered.devices:
            break
        if time.monotonic() >= deadline:
            raise base.ScrubFailed('verify', 'mdev %s is still on %s %d s '
                                             'after its removal'
                                   % (uuid, parent, settle))
        time.sleep(0.1)
    if offered.available_instances < 1:
        raise base.ScrubFailed('verify', '%s offers no instance of %s once '
                                         'mdev %s is gone' % (parent, type_id,
                                                              uuid))
    return ['destroy', 'verify']
