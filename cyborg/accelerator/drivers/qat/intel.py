"""intel_qat_driver: Intel QuickAssist (crypto and compression) VFs.

A QAT endpoint is a physical function of vendor 8086, co-processor class,
with an id in ``QAT_DEVICE_IDS``. The host keeps the physical function;
each of its enabled VFs is one deployable ``qat_<VF address>``, resource
class ``CUSTOM_QAT``, with the VF as its one attach handle. An endpoint
without VFs is reported with nothing to offer. Traits
``CUSTOM_QAT_INTEL`` and ``CUSTOM_QAT_PRODUCT_ID_<physical function id>``.
"""

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.objects import inventory

VENDOR_ID = '8086'
RESOURCE_CLASS = 'CUSTOM_QAT'
QAT_CLASSES = (pci.CLASS_COPROCESSOR, pci.CLASS_PROCESSING_ACCELERATOR)
QAT_DEVICE_IDS = (
    '0435',  # DH895xCC
    '37c8',  # C62x (Lewisburg PCH)
    '19e2',  # C3xxx
    '6f54',  # D15xx
    '18ee',  # 200xx
    '4940',  # 4xxx (Sapphire Rapids)
    '4942',  # 401xx
    '4944',  # 402xx
    '4946',  # 420xx
)


def _is_endpoint(function):
    return (function.vendor_id == VENDOR_ID
            and function.device_id in QAT_DEVICE_IDS
            and function.pci_class in QAT_CLASSES
            and not function.is_vf)


class IntelQATDriver(base.AcceleratorDriver):
    name = 'intel_qat_driver'
    device_type = 'QAT'

    def discover(self):
        return [self._device(endpoint) for endpoint in self.pci.functions()
                if _is_endpoint(endpoint)]

    def _device(self, endpoint):
        endpoint_traits = traits.device_traits('QAT', endpoint)
        deployables = [
            inventory.Deployable(
                name=traits.deployable_name('qat', vf),
                num_accelerators=1,
                resource_class=RESOURCE_CLASS,
                driver_name=self.name,
                traits=list(endpoint_traits),
                attach_handles=[base.pci_attach_handle(vf)])
            for vf in endpoint.virtfns]
        return base.pci_device('QAT', endpoint, deployables)
