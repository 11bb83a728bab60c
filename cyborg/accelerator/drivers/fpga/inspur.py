"""inspur_fpga_driver: Inspur FPGA cards (vendor 1bd4).

Any physical function of vendor 1bd4 with an FPGA class (Inspur's NVMe
SSDs share the vendor and belong to inspur_nvme_ssd_driver). One
deployable ``fpga_<address>``, resource class ``FPGA``; attach handles are
the VFs when SR-IOV is on, else the card. Traits ``CUSTOM_FPGA_INSPUR``
and ``CUSTOM_FPGA_PRODUCT_ID_<id>``.

Programming is refused: Inspur documents no tool for loading a bitstream
from the host, so binding a device profile that asks for one fails
clearly rather than binding an FPGA that holds something else.
"""

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.objects import inventory

VENDOR_ID = '1bd4'
FPGA_CLASSES = (pci.CLASS_PROCESSING_ACCELERATOR,
                pci.CLASS_SIGNAL_PROCESSING_OTHER)


def _is_card(function):
    return (function.vendor_id == VENDOR_ID
            and function.pci_class in FPGA_CLASSES
            and not function.is_vf)


class InspurFPGADriver(base.AcceleratorDriver):
    name = 'inspur_fpga_driver'
    device_type = 'FPGA'

    def discover(self):
        devices = []
        for card in self.pci.functions():
            if not _is_card(card):
                continue
            handles = [base.pci_attach_handle(address)
                       for address in card.virtfns or [card.address]]
            deployable = inventory.Deployable(
                name=traits.deployable_name('fpga', card.address),
                num_accelerators=len(handles),
                resource_class='FPGA',
                driver_name=self.name,
                traits=traits.device_traits('FPGA', card),
                attach_handles=handles)
            devices.append(base.pci_device('FPGA', card, [deployable]))
        return devices

    def program(self, device, bitstream, metadata=None):
        raise base.OperationNotSupported(
            'Driver %s cannot program FPGA %s: no programming tool is known '
            'for Inspur cards' % (self.name, inventory.PCIAddress(
                **device.controlpath_info)))
