"""huawei_ascend_driver: Huawei Ascend NPUs.

An NPU is a physical function of vendor 19e5, processing-accelerator
class, with an id in ``ASCEND_DEVICE_IDS``; a card with several chips
shows one function per chip, and each chip is one deployable
``npu_<address>`` with itself as the attach handle.

Resource class ``CUSTOM_AICHIP`` for every model: like ``CUSTOM_QAT`` or
``CUSTOM_NIC`` it is named after the device type, and the model is asked
for with the traits ``CUSTOM_AICHIP_HUAWEI`` and
``CUSTOM_AICHIP_PRODUCT_ID_<id>`` (``..._D801`` for a 910).
"""

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.objects import inventory

VENDOR_ID = '19e5'
RESOURCE_CLASS = 'CUSTOM_AICHIP'
NPU_CLASSES = (pci.CLASS_PROCESSING_ACCELERATOR,)
ASCEND_DEVICE_IDS = (
    'd100',  # Ascend 310
    'd105',  # Ascend 310 (Atlas 200)
    'd500',  # Ascend 310P
    'd801',  # Ascend 910
    'd802',  # Ascend 910B
    'd803',  # Ascend 910C
)


def _is_npu(function):
    return (function.vendor_id == VENDOR_ID
            and function.device_id in ASCEND_DEVICE_IDS
            and function.pci_class in NPU_CLASSES
            and not function.is_vf)


class HuaweiAscendDriver(base.AcceleratorDriver):
    name = 'huawei_ascend_driver'
    device_type = 'AICHIP'

    def discover(self):
        devices = []
        for npu in self.pci.functions():
            if not _is_npu(npu):
                continue
            deployable = inventory.Deployable(
                name=traits.deployable_name('npu', npu.address),
                num_accelerators=1,
                resource_class=RESOURCE_CLASS,
                driver_name=self.name,
                traits=traits.device_traits('AICHIP', npu),
                attach_handles=[base.pci_attach_handle(npu.address)])
            devices.append(base.pci_device('AICHIP', npu, [deployable]))
        return devices
