"""Scrubbing an FPGA between tenants: its memory cleared by a clearing
image, then its base image loaded again.

What a tenant leaves on an FPGA is the logic it had loaded and what that
logic wrote to the card's on-board memory (DDR). The ``fpga-base-image``
scrub of a released handle:

- ``clear``, where the card's ``fpga_base_image`` configuration names a
  ``clear_bitstream_uuid``: that image is loaded with the vendor tool,
  as any image is, and the card must then report its function. It is an
  image that writes the card's memory over when it starts (the way some
  clouds clear a card between tenants); Cyborg cannot read the card's
  memory to check it, only that the image that clears it was loaded.

- ``reload``: the card's base image (the Glance image that its
  ``fpga_base_image`` device configuration applied) is loaded again,
  even where the agent believes the card holds it: the tenant had the
  card meanwhile. The conductor names the image, as it keeps the
  device's configuration; the agent downloads it, its hashes checked,
  and has the driver's vendor tool load it, as when the configuration
  was applied. A card with no base image applied fails here: there is
  nothing known to be clean to put back.
- ``verify``: discovered again, the card still offers the handle and
  reports the base image's function (its ``function_uuid``). An image
  that names no function cannot be checked, and fails.

Without a clearing image the card's memory is not cleared: no vendor
tool documents a command for it. OPAE reaches card memory only through
test AFUs loaded in place of the base image (``fpgabist``'s DMA AFU,
``mem_tg``); XRT documents ``xbutil mem --write`` in its legacy command
set only, at addresses of the memory banks of the xclbin loaded. Data a
tenant's logic left in card memory then stays until other logic
overwrites it.

A card whose region holds several handles is not scrubbed this way:
loading it again would take the function from under the tenants of the
others.
"""

import uuid

from cyborg import exception
from cyborg.accelerator.drivers import base
from cyborg.objects import inventory

FPGA_BASE_IMAGE = 'fpga-base-image'
CLEAR = 'clear'
RELOAD = 'reload'
VERIFY = 'verify'

_address = inventory.address_text


def scrub_method(deployable):
    """FPGA_BASE_IMAGE for a deployable of one PCI attach handle (the
    card, or its one port), else None."""
    handles = deployable.attach_handles
    if len(handles) == 1 and handles[0].attach_type == 'PCI':
        return FPGA_BASE_IMAGE
    return None


def no_base_image(driver_name, address):
    """Why a card without a base image cannot be scrubbed, and what the
    operator may do."""
    return ('FPGA %s has no base image to load again: configure one for '
            'it (a device configuration policy of kind fpga_base_image), '
            'or stop scrubbing the devices of %s ([scrub] '
            'disabled_drivers)' % (address, driver_name))


def scrub(driver, device, handle, image_id, load, clear_image_id=None):
    """The FPGA_BASE_IMAGE scrub of ``handle`` of ``device``: the steps
    done. ``image_id`` is the card's base image (None: none applied),
    ``clear_image_id`` its clearing image (None: none);
    ``load(image_id, step)`` programs one, whatever the card is believed
    to hold, and answers its Glance properties. Raises ``ScrubFailed``
    naming the step that failed."""
    address = _address(device.controlpath_info)
    if not image_id:
        raise base.ScrubFailed(RELOAD, no_base_image(driver.name, address))
    steps = []
    if clear_image_id:
        _load_and_check(driver, device, handle, clear_image_id, load, CLEAR)
        steps.append(CLEAR)
    _load_and_check(driver, device, handle, image_id, load, RELOAD)
    return steps + [RELOAD, VERIFY]


def _load_and_check(driver, device, handle, image_id, load, step):
    try:
        properties = load(image_id, step)
    except base.ScrubFailed:
        raise
    except exception.CyborgError as e:
        raise base.ScrubFailed(step, e.message) from e
    verify(driver, device, handle, image_id,
           (properties or {}).get('function_uuid'),
           step=VERIFY if step == RELOAD else step)


def verify(driver, device, handle, image_id, function_uuid, step=VERIFY):
    """Raise ``ScrubFailed`` at ``step`` unless ``driver`` discovers the
    card of ``device`` again with ``handle`` and running
    ``function_uuid``, the function of image ``image_id``."""
    address = _address(device.controlpath_info)
    wanted = _uuid_hex(function_uuid)
    if not wanted:
        raise base.ScrubFailed(
            step, 'image %s names no function_uuid: what FPGA %s runs '
                  'after the load cannot be checked' % (image_id, address))
    deployables = [deployable for found in driver.discover()
                   if found.controlpath_info == device.controlpath_info
                   for deployable in found.deployables]
    if not any(h.attach_type == handle.attach_type
               and h.attach_info == handle.attach_info
               for deployable in deployables
               for h in deployable.attach_handles):
        raise base.ScrubFailed(
            step, 'FPGA %s no longer offers %s once image %s was loaded'
                  % (address, _address(handle.attach_info), image_id))
    reported = sorted(_functions(deployables))
    if wanted not in reported:
        raise base.ScrubFailed(
            step, 'FPGA %s reports function %s once image %s was loaded, '
                  'not the image\'s function %s'
                  % (address, ', '.join(reported) or 'none', image_id,
                     wanted))


def runs_function(deployables, function_uuid):
    """Whether one of ``deployables`` reports running ``function_uuid``
    (compared as UUIDs: case and dashes do not matter)."""
    return _uuid_hex(function_uuid) in _functions(deployables)


def _functions(deployables):
    """The functions ``deployables`` report: each one's ``function_uuid``
    attribute, a comma-separated list, as UUID hex where it is a UUID."""
    return {_uuid_hex(f) for deployable in deployables
            for f in str((deployable.attributes or {}).get(
                'function_uuid') or '').split(',') if f}


def _uuid_hex(value):
    text = str(value or '').strip().lower()
    try:
        return uuid.UUID(text).hex
    except ValueError:
        return text
