"""How discovered devices are named in Placement: traits and names.

Traits (all upper case, ``CUSTOM_`` prefix, Placement's alphabet):

- ``CUSTOM_<TYPE>_<VENDOR>``: ``TYPE`` is the device type of the inventory
  (``GPU``, ``FPGA``, ``QAT``, ``NIC``, ``SSD``, ``AICHIP``) and ``VENDOR``
  the name in ``pci.VENDOR_TRAIT_NAMES`` or, for a vendor not listed,
  ``VENDOR_<id>``: ``CUSTOM_GPU_NVIDIA``, ``CUSTOM_NIC_VENDOR_1AF4``.
- ``CUSTOM_<TYPE>_PRODUCT_ID_<id>``: the PCI device id in upper-case hex,
  ``CUSTOM_GPU_PRODUCT_ID_20B0``.
- ``CUSTOM_VGPU_TYPE_<type>``: the mdev type a VGPU provider hands out,
  ``CUSTOM_VGPU_TYPE_NVIDIA_222``.
- ``CUSTOM_FPGA_REGION_<interface id>`` and
  ``CUSTOM_FPGA_FUNCTION_ID_<afu id>``: 32 upper-case hex digits, what a
  bitstream's ``region_uuid`` and ``function_uuid`` are matched against.
- ``CUSTOM_PHYSNET_<name>`` and ``CUSTOM_NIC_FUNCTION_<name>``: from the
  NIC mappings in the configuration.

Deployable names are ``<kind>_<PCI address>`` (``pgpu_0000:3b:00.0``,
``qat_0000:1a:01.2``): unique on a host, because no two drivers offer the
same function, and stable, because the address is.
"""

import re

from cyborg.accelerator.drivers import pci

_NOT_TRAIT_CHARACTERS = re.compile(r'[^A-Z0-9_]')


def custom(*parts):
    """``CUSTOM_`` and the parts, upper-cased, anything else as '_'."""
    name = '_'.join(str(part) for part in parts).upper()
    return 'CUSTOM_' + _NOT_TRAIT_CHARACTERS.sub('_', name)


def vendor_trait(device_type, vendor_id):
    vendor = pci.VENDOR_TRAIT_NAMES.get(vendor_id.lower(),
                                        'VENDOR_' + vendor_id)
    return custom(device_type, vendor)


def product_trait(device_type, device_id):
    return custom(device_type, 'PRODUCT_ID', device_id)


def device_traits(device_type, function):
    """The vendor and product traits every PCI accelerator carries."""
    return [vendor_trait(device_type, function.vendor_id),
            product_trait(device_type, function.device_id)]


def deployable_name(kind, address):
    return '%s_%s' % (kind, address)
