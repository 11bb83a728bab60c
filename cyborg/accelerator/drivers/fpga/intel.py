"""intel_fpga_driver: Intel programmable acceleration cards (PAC).

A card is a physical function of vendor 8086, processing-accelerator
class, with an id in ``PAC_DEVICE_IDS``. It has something to offer only
once the kernel's FPGA class shows it (``/sys/class/fpga`` with the OPAE
driver, ``/sys/class/fpga_region`` with DFL): without that the card cannot
be programmed and its shell is unknown.

One deployable ``fpga_<address>``, resource class ``FPGA``; the attach
handles are the VFs (ports) when SR-IOV is on, else the card itself.
Traits: ``CUSTOM_FPGA_INTEL``, ``CUSTOM_FPGA_PRODUCT_ID_<id>``,
``CUSTOM_FPGA_REGION_<interface id>`` for the shell and
``CUSTOM_FPGA_FUNCTION_ID_<afu id>`` for each function loaded; the same ids
as the attributes ``region_uuid`` and ``function_uuid`` (comma-separated
when several ports hold functions).

Programming loads a green bitstream (GBS) into the card's port with OPAE's
``fpgaconf``, the card chosen by its PCI address::

    fpgaconf --bus 0x13 --device 0x00 --function 0x0 <file>.gbs

(``--segment`` too, for a PCI domain other than 0: older OPAE releases do
not know the option). ``fpgaconf`` checks that the bitstream was built for
the card's region; the function it loads shows as the port's AFU id at the
next discovery. See ``fpga/tool.py`` for how it runs as root.

A card of one handle is scrubbed between tenants by ``fpga-base-image``
(``fpga/scrub.py``): its base image loaded again and its function
checked. The agent runs it: the load takes the agent's programming path.
"""

import logging

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.accelerator.drivers.fpga import scrub
from cyborg.accelerator.drivers.fpga import tool
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

VENDOR_ID = '8086'
FPGA_CLASSES = (pci.CLASS_PROCESSING_ACCELERATOR,)
PAC_DEVICE_IDS = (
    '09c4',  # PAC with Arria 10 GX
    '0b2b',  # PAC D5005 (Stratix 10 SX)
    '0b30',  # PAC N3000
    'bcce',  # N6000/N6001 (DFL)
)


def _is_pac(function):
    return (function.vendor_id == VENDOR_ID
            and function.device_id in PAC_DEVICE_IDS
            and function.pci_class in FPGA_CLASSES
            and not function.is_vf)


class IntelFPGADriver(base.AcceleratorDriver):
    name = 'intel_fpga_driver'
    device_type = 'FPGA'

    def discover(self):
        regions = {}
        for region in self.pci.fpga_regions():
            regions.setdefault(region.pci_address, region)
        return [self._device(card, regions.get(card.address))
                for card in self.pci.functions() if _is_pac(card)]

    def _device(self, card, region):
        if region is None:
            LOG.info('Intel FPGA %s has no FPGA class device: nothing to '
                     'offer until its driver is loaded', card.address)
            return base.pci_device('FPGA', card, [])
        card_traits = traits.device_traits('FPGA', card)
        attributes = {}
        if region.interface_id:
            card_traits.append(traits.custom('FPGA_REGION',
                                             region.interface_id))
            attributes['region_uuid'] = region.interface_id
        functions = sorted({port.afu_id for port in region.ports
                            if port.afu_id})
        card_traits.extend(traits.custom('FPGA_FUNCTION_ID', afu_id)
                           for afu_id in functions)
        if functions:
            attributes['function_uuid'] = ','.join(functions)
        handles = [base.pci_attach_handle(address)
                   for address in card.virtfns or [card.address]]
        deployable = inventory.Deployable(
            name=traits.deployable_name('fpga', card.address),
            num_accelerators=len(handles),
            resource_class='FPGA',
            driver_name=self.name,
            traits=card_traits,
            attach_handles=handles,
            attributes=attributes)
        return base.pci_device('FPGA', card, [deployable],
                               fpga_region=region.name)

    bitstream_suffix = '.gbs'

    def program(self, device, bitstream, metadata=None):
        address = inventory.PCIAddress(**device.controlpath_info)
        if not device.deployables:
            raise base.DriverError(
                'Cannot program Intel FPGA %s: the kernel shows no FPGA '
                'region for it (is its OPAE or DFL driver loaded?)'
                % address)
        tool.run(fpgaconf_command(address, bitstream), 'Intel FPGA %s'
                 % address, timeout=self.tool_timeout)

    def scrub_method(self, deployable):
        return scrub.scrub_method(deployable)


def fpgaconf_command(address, bitstream):
    argv = ['fpgaconf']
    if int(address.domain, 16):
        argv += ['--segment', '0x' + address.domain]
    return argv + ['--bus', '0x' + address.bus,
                   '--device', '0x' + address.device,
                   '--function', '0x' + address.function,
                   str(bitstream)]
