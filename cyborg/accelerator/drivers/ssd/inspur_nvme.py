"""inspur_nvme_ssd_driver: Inspur NVMe SSDs offered to VMs.

Only NVMe controllers (class 0108) of the vendors in ``VENDOR_IDS``: every
server boots from some NVMe drive, and offering the host's own disk to a
VM would be a disaster, so other makes are left to pci_driver's explicit
list. One deployable ``ssd_<address>``, resource class ``CUSTOM_SSD``;
attach handles are the VFs of an SR-IOV controller, else the controller.
Traits ``CUSTOM_SSD_INSPUR`` and ``CUSTOM_SSD_PRODUCT_ID_<id>``.

Every handle is scrubbed between tenants by ``nvme-sanitize``
(``cyborg.accelerator.drivers.nvme_scrub``): the whole controller by the
strongest sanitize or format it offers, a VF by a format of its own
namespaces. Both need the function bound to the host's ``nvme`` driver
when the scrub runs (libvirt gives a managed device back to it): one still
bound to ``vfio-pci`` fails its scrub, and stays dirty and quarantined,
rather than reach the next tenant unerased.
"""

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import nvme_scrub
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

    # The method stays the same whatever the function is bound to now: a
    # managed device moves between nvme and vfio-pci with its VM.
    def scrub_method(self, deployable):
        kinds = {h.attach_type for h in deployable.attach_handles}
        return nvme_scrub.NVME_SANITIZE if kinds == {'PCI'} else None

    def scrub_attach_handle(self, device, handle, uuid, method):
        if (method == nvme_scrub.NVME_SANITIZE
                and handle.attach_type == 'PCI'):
            info = handle.attach_info
            address = inventory.PCIAddress(info['domain'], info['bus'],
                                           info['device'], info['function'])
            function = self.pci.function(address)
            if function is None:
                raise base.ScrubFailed('identify', '%s is no longer on the '
                                                   'PCI bus' % address)
            return nvme_scrub.scrub(address, whole=not function.is_vf)
        return super().scrub_attach_handle(device, handle, uuid, method)
