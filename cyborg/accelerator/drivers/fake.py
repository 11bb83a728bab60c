"""fake_driver: a fixed FPGA for CI and tempest; reads nothing.

One FPGA at 0000:0c:00.0 (vendor abcd) with one deployable, ``FakeDevice``,
of 16 ``TEST_PCI`` attach handles that Nova's libvirt driver ignores, and
the attribute ``region_uuid``. The
handles are addressed like the VFs of the card (0c:00.1 to 0c:02.0) so
that each is distinct.
"""

import os

from cyborg.accelerator.drivers import base
from cyborg.objects import inventory

ADDRESS = inventory.PCIAddress('0000', '0c', '00', '0')
VENDOR_ID = 'abcd'
HANDLES = 16
TRAIT = 'CUSTOM_FAKE_DEVICE'
DEPLOYABLE_NAME = 'FakeDevice'
# The fake card's one reconfigurable region, named the way the Intel
# driver reports a real one, so that bitstream matching has a region.
REGION_UUID = 'f4c6a1b2-7d3e-4c58-9a0b-1e2f3d4c5b6a'


class FakeDriver(base.AcceleratorDriver):
    name = 'fake_driver'
    device_type = 'FPGA'

    def discover(self):
        handles = []
        for index in range(1, HANDLES + 1):
            address = inventory.PCIAddress(
                ADDRESS.domain, ADDRESS.bus, '%02x' % (index // 8),
                str(index % 8))
            handles.append(inventory.AttachHandle('TEST_PCI',
                                                  address.as_info()))
        deployable = inventory.Deployable(
            name=DEPLOYABLE_NAME,
            num_accelerators=HANDLES,
            resource_class='FPGA',
            driver_name=self.name,
            traits=[TRAIT],
            attach_handles=handles,
            attributes={'region_uuid': REGION_UUID})
        return [inventory.Device(
            type='FPGA',
            vendor=VENDOR_ID,
            model='FakeFPGA',
            controlpath_type='PCI',
            controlpath_info=ADDRESS.as_info(),
            std_board_info={'vendor_id': VENDOR_ID, 'product_id': 'abcd'},
            deployables=[deployable])]

    def program(self, device, bitstream):
        # Nothing to load into, but the bitstream must exist: the binding
        # flow is tested end to end against this driver.
        if not os.path.isfile(bitstream):
            raise base.DriverError('No bitstream at %s' % bitstream)
