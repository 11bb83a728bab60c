"""fake_driver: a fixed FPGA for CI and tempest.

One FPGA at ffff:0c:00.0 (vendor abcd; see ``address`` for the domain)
with one deployable, ``FakeDevice``, of 16 ``TEST_PCI`` attach handles
that Nova's libvirt driver ignores, and the attribute ``region_uuid``. The
handles are addressed like the VFs of the card (0c:00.1 to 0c:02.0) so
that each is distinct. It reads nothing but the names of the host's PCI
functions, to keep its address off theirs.

Programming it checks that the bitstream file exists, takes
``[fake_driver] program_seconds`` and remembers, in memory, the
``function_uuid`` of the bitstream's metadata: from then on the
deployable also carries the trait ``CUSTOM_FPGA_FUNCTION_ID_<uuid>`` and
the attribute ``function_uuid``, as a real FPGA that was programmed does.
A bitstream without a function leaves it with none. An agent that
restarts forgets what was programmed, as a card that is power-cycled does.

Observed, it is always healthy and reports no usage: there is nothing to
read. It holds no tenant data, so it is not scrubbed, unless tests say
otherwise with ``[fake_driver] scrub`` (passing, failing or hanging
scrubs, each ``scrub_seconds`` long; a passing one with every Nth failing
or hanging, ``scrub_fail_every`` / ``scrub_hang_every``). Tests that play
tenants give it ``memory_dir``: a file per handle that the tenant writes
and the scrub empties, so the next tenant can see whether anything was
left.
"""

import dataclasses
import os
import threading
import time

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import traits
from cyborg.conf import fake_driver as fake_driver_conf
from cyborg.objects import inventory

# The card must never have the address of a real function: a host report
# that holds one control path twice is refused whole. No four-digit PCI
# domain is reserved for that. Linux names domains after the firmware's
# segment groups (ACPI _SEG: 0, and a few small numbers on multi-segment
# servers), numbers them from 0 up where the firmware gives none
# (device-tree hosts), puts Intel VMD domains above ffff (five digits,
# which neither the PCI reader here nor Nova or libvirt accept), and
# takes Hyper-V's from the device's instance GUID (any 16-bit value). So
# the card takes the top domain, ffff, and steps down past every domain
# this host's sysfs shows (``address``): a plain PCI address as every
# reader of addresses wants it (4 hex digits of domain, bus 00-ff, device
# 00-1f, function 0-7), and never a real function's.
ADDRESS = inventory.PCIAddress('ffff', '0c', '00', '0')
VENDOR_ID = 'abcd'
HANDLES = 16
TRAIT = 'CUSTOM_FAKE_DEVICE'
DEPLOYABLE_NAME = 'FakeDevice'
# The fake card's one reconfigurable region, named the way the Intel
# driver reports a real one, so that bitstream matching has a region.
REGION_UUID = 'f4c6a1b2-7d3e-4c58-9a0b-1e2f3d4c5b6a'
SCRUB_METHOD = 'fake'


def function_id(function_uuid):
    """A function UUID as FPGA traits spell it: 32 lower-case hex digits."""
    return str(function_uuid).strip().lower().replace('-', '')


class FakeDriver(base.AcceleratorDriver):
    name = 'fake_driver'
    device_type = 'FPGA'

    def __init__(self, conf, pci_reader):
        super().__init__(conf, pci_reader)
        if conf is not None:
            fake_driver_conf.register_opts(conf)
        self._lock = threading.Lock()
        self._function = None  # function id loaded by program()
        self._hung = threading.Event()  # a 'hang' scrub waits on it
        self._scrubs = 0  # scrubs asked of this driver

    @property
    def program_seconds(self):
        if self.conf is None:
            return 0
        return self.conf.fake_driver.program_seconds

    def address(self):
        """``ADDRESS`` in the highest domain that no PCI function of this
        host is in."""
        taken = self.pci.domains() if self.pci is not None else set()
        for number in range(int(ADDRESS.domain, 16), -1, -1):
            domain = '%04x' % number
            if domain not in taken:
                return dataclasses.replace(ADDRESS, domain=domain)
        raise base.DriverError('No PCI domain is free for the fake FPGA')

    def discover(self):
        card = self.address()
        handles = []
        for index in range(1, HANDLES + 1):
            address = dataclasses.replace(
                card, device='%02x' % (index // 8), function=str(index % 8))
            handles.append(inventory.AttachHandle('TEST_PCI',
                                                  address.as_info()))
        device_traits = [TRAIT]
        attributes = {'region_uuid': REGION_UUID}
        with self._lock:
            function = self._function
        if function:
            device_traits.append(traits.custom('FPGA_FUNCTION_ID', function))
            attributes['function_uuid'] = function
        deployable = inventory.Deployable(
            name=DEPLOYABLE_NAME,
            num_accelerators=HANDLES,
            resource_class='FPGA',
            driver_name=self.name,
            traits=device_traits,
            attach_handles=handles,
            attributes=attributes)
        return [inventory.Device(
            type='FPGA',
            vendor=VENDOR_ID,
            model='FakeFPGA',
            controlpath_type='PCI',
            controlpath_info=card.as_info(),
            std_board_info={'vendor_id': VENDOR_ID, 'product_id': 'abcd'},
            deployables=[deployable])]

    def _scrub(self):
        if self.conf is None:
            return 'none', 0
        return self.conf.fake_driver.scrub, self.conf.fake_driver.scrub_seconds

    def scrub_method(self, deployable):
        return None if self._scrub()[0] == 'none' else SCRUB_METHOD

    def memory_of(self, handle):
        """The file that stands for ``handle``'s memory (``[fake_driver]
        memory_dir``), or None."""
        directory = self.conf.fake_driver.memory_dir if self.conf else None
        if not directory:
            return None
        address = inventory.PCIAddress(**handle.attach_info)
        return os.path.join(directory, str(address))

    def _fault(self):
        """'fail', 'hang' or None for this scrub, by its number."""
        options = self.conf.fake_driver
        with self._lock:
            self._scrubs += 1
            number = self._scrubs
        if options.scrub_fail_every and (
                number % options.scrub_fail_every == 0):
            return 'fail'
        if options.scrub_hang_every and (
                number % options.scrub_hang_every == 0):
            return 'hang'
        return None

    def scrub_attach_handle(self, device, handle, uuid, method):
        behaviour, seconds = self._scrub()
        if method != SCRUB_METHOD or behaviour == 'none':
            raise base.OperationNotSupported(
                'The fake FPGA scrubs by %s only, when [fake_driver] scrub '
                'says so' % SCRUB_METHOD)
        fault = self._fault() if behaviour == 'pass' else behaviour
        if behaviour == 'hang':
            self._hung.wait()  # until ``end_hung_scrubs``
        elif fault == 'hang':
            self._hung.wait(self.conf.fake_driver.scrub_hang_seconds)
        memory = self.memory_of(handle)
        if memory is not None and fault != 'fail':
            with open(memory, 'w'):
                pass  # emptied
        time.sleep(seconds)
        left = (os.path.getsize(memory)
                if memory is not None and os.path.exists(memory) else 0)
        if fault == 'fail' or left:
            raise base.ScrubFailed('verify', 'handle %s still holds data '
                                   'of its last tenant (%d bytes)'
                                   % (uuid, left))
        return ['clear', 'verify']

    def end_hung_scrubs(self):
        """Let 'hang' scrubs return (tests, at their end)."""
        self._hung.set()

    def observe_device(self, device):
        return health.Observation.of(
            str(inventory.PCIAddress(**device.controlpath_info)),
            [health.Finding(health.HEALTHY,
                            'a fake device is always healthy')])

    def program(self, device, bitstream, metadata=None):
        # Nothing to load into, but the bitstream must exist: the binding
        # flow is tested end to end against this driver.
        if not os.path.isfile(bitstream):
            raise base.DriverError('No bitstream at %s' % bitstream)
        time.sleep(self.program_seconds)
        function_uuid = (metadata or {}).get('function_uuid')
        with self._lock:
            self._function = (function_id(function_uuid) if function_uuid
                              else None)
