"""xilinx_fpga_driver: Xilinx Alveo cards, a management and a user PF.

The management function (``MGMT_TO_USER`` keys) is the control path and
the device; the user function next to it (same slot, next function, the
paired id) is what a VM gets. A card whose user function is missing is
reported without deployables.

A card that runs its factory (golden) image enumerates with an id of its
own (``GOLDEN_IMAGES``), management function only: it is reported as an
FPGA without deployables, ``vendor_board_info`` saying so, and nothing is
schedulable on it until a shell is flashed.

One deployable ``fpga_<management address>``, resource class ``FPGA``,
one PCI attach handle (the user function). Traits ``CUSTOM_FPGA_XILINX``
and ``CUSTOM_FPGA_PRODUCT_ID_<management id>``.

Programming loads an xclbin into the user partition with XRT's
``xbmgmt`` (the commands of XRT 2021.1 and later), addressed by the
management function::

    xbmgmt program --device 0000:d8:00.0 --user <file>.xclbin

A card that runs its factory image has no user partition to load into:
flashing a shell is an operator's job, not a bind's. See ``fpga/tool.py``
for how the tool runs as root.
"""

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.accelerator.drivers.fpga import tool
from cyborg.objects import inventory

VENDOR_ID = '10ee'
# Shells report their functions as processing accelerators or, on some
# older ones, as "memory controller, other".
FPGA_CLASSES = (pci.CLASS_PROCESSING_ACCELERATOR, '0580')
MGMT_TO_USER = {
    '5000': '5001',  # Alveo U200
    '5004': '5005',  # Alveo U250
    '500c': '500d',  # Alveo U280
    '5020': '5021',  # Alveo U50
    '505c': '505d',  # Alveo U55C
}
# The ids of the same cards running their factory image (pci.ids names
# them "Alveo <model> Golden Image").
GOLDEN_IMAGES = {
    'd000': 'Alveo U200',
    'd004': 'Alveo U250',
    'd00c': 'Alveo U280',
    'd020': 'Alveo U50',
}
GOLDEN_INFO = {
    'image': 'golden',
    'note': 'The card runs its factory image: nothing is schedulable on it '
            'until a shell is flashed.',
}


def _is_card(function, device_ids):
    return (function.vendor_id == VENDOR_ID
            and function.device_id in device_ids
            and function.pci_class in FPGA_CLASSES
            and not function.is_vf)


class XilinxFPGADriver(base.AcceleratorDriver):
    name = 'xilinx_fpga_driver'
    device_type = 'FPGA'

    def discover(self):
        functions = self.pci.functions()
        by_address = base.functions_by_address(functions)
        devices = []
        for function in functions:
            if _is_card(function, MGMT_TO_USER):
                devices.append(self._device(function, by_address))
            elif _is_card(function, GOLDEN_IMAGES):
                devices.append(base.pci_device('FPGA', function, [],
                                               **GOLDEN_INFO))
        return devices

    def _device(self, mgmt, by_address):
        address = mgmt.address
        user = by_address.get(inventory.PCIAddress(
            address.domain, address.bus, address.device,
            str(int(address.function) + 1)))
        if user is None or user.device_id != MGMT_TO_USER[mgmt.device_id]:
            return base.pci_device('FPGA', mgmt, [])
        deployable = inventory.Deployable(
            name=traits.deployable_name('fpga', address),
            num_accelerators=1,
            resource_class='FPGA',
            driver_name=self.name,
            traits=traits.device_traits('FPGA', mgmt),
            attach_handles=[base.pci_attach_handle(user.address)])
        return base.pci_device('FPGA', mgmt, [deployable],
                               user_function=str(user.address))

    bitstream_suffix = '.xclbin'

    def program(self, device, bitstream, metadata=None):
        address = inventory.PCIAddress(**device.controlpath_info)
        if not device.deployables:
            raise base.DriverError(
                'Cannot program Xilinx FPGA %s: it runs its factory image '
                'and has no user partition until a shell is flashed'
                % address)
        tool.run(['xbmgmt', 'program', '--device', str(address),
                  '--user', str(bitstream)], 'Xilinx FPGA %s' % address,
                 timeout=self.tool_timeout)
