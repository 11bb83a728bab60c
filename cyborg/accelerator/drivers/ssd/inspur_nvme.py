"""inspur_nvme_ssd_driver: Inspur NVMe SSDs offered to VMs.

Only NVMe controllers (class 0108) of the vendors in ``VENDOR_IDS``: every
server boots from some NVMe drive, and offering the host's own disk to a
VM would be a disaster, so other makes are left to pci_driver's explicit
list. One deployable ``ssd_<address>``, resource class ``CUSTOM_SSD``;
attach handles are the VFs of an SR-IOV controller, else the controller.
Traits ``CUSTOM_SSD_INSPUR`` and ``CUSTOM_SSD_PRODUCT_ID_<id>``.
"""

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.objects import inventory

VENDOR_IDS = ('1bd4',)
RESOURCE_CLASS = 'CUSTOM_SSD'


def _is_controller(function):
    return (function.vendor_id in VENDOR_IDS
            and function.pci_class == pci.CLASS_NVME
            and not function.is_vf)


class InspurNVMeSSDDriver(base.AcceleratorDriver):
    name = 'inspur_nvme_ssd_driver'
    device_type = 'SSD'

    def discover(self):
        devices = []
        for controller in self.pci.functions():
            if not _is_controller(controller):
                continue
            handles = [base.pci_attach_handle(address) for address
                       in controller.virtfns or [controller.address]]
            deployable = inventory.Deployable(
                name=traits.deployable_name('ssd', controller.address),
                num_accelerators=len(handles),
                resource_class=RESOURCE_CLASS,
                driver_name=self.name,
                traits=traits.device_traits('SSD', controller),
                attach_handles=handles)
            devices.append(base.pci_device('SSD', controller, [deployable]))
        return devices
