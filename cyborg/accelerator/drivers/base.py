"""The contract between the agent and an accelerator driver.

A driver is a class registered under the stevedore namespace
``cyborg.accelerator.driver`` with its ``name`` as the entry point name. The
agent builds it with the configuration object and the shared
``pci.PCIReader`` and then:

- ``discover()`` on every inventory cycle: the devices this driver owns,
  as ``inventory.Device`` objects. Discovery reads, never changes the host,
  and gives the same answer for the same host.
- ``prepare_attach_handle()`` / ``release_attach_handle()`` around the life
  of an ARQ bound to one of the driver's attach handles (for a vGPU: create
  and remove the mdev). A PCI function needs nothing: the defaults do
  nothing.
- ``program()`` to load a bitstream into an FPGA, with the bitstream's
  Glance properties as ``metadata``. Drivers of other devices refuse it.
  Once programmed, the next ``discover()`` reports the loaded function as
  the trait ``CUSTOM_FPGA_FUNCTION_ID_<function uuid>``.

The agent calls these from several threads (the periodic report and RPC
requests): a driver that keeps state guards it.
"""

import abc
import pathlib
from typing import ClassVar

from oslo_config import cfg

from cyborg import exception
from cyborg.accelerator.drivers import pci
from cyborg.objects import inventory

NAMESPACE = 'cyborg.accelerator.driver'


class DriverError(exception.CyborgError):
    code = 'cyborg.driver_error'


class OperationNotSupported(DriverError):
    status = 409
    code = 'cyborg.driver_operation_not_supported'


# A vendor tool's time limit without the agent's options (tests).
TOOL_TIMEOUT = 180


class AcceleratorDriver(abc.ABC):
    """One kind of accelerator: how to find it and how to prepare it."""

    name: ClassVar[str]  # the entry point name
    # One of inventory.DEVICE_TYPES; None when it depends on the device.
    device_type: ClassVar[str | None]

    def __init__(self, conf: cfg.ConfigOpts, pci_reader: pci.PCIReader):
        self.conf = conf
        self.pci = pci_reader

    @abc.abstractmethod
    def discover(self) -> list[inventory.Device]:
        """The devices of this driver on the host, in a stable order."""

    def prepare_attach_handle(self, device: inventory.Device,
                              handle: inventory.AttachHandle,
                              uuid: str) -> None:
        """Make ``handle`` ready to be given to a VM as ``uuid``."""
        return None  # a whole PCI function is ready as it is

    def release_attach_handle(self, device: inventory.Device,
                              handle: inventory.AttachHandle,
                              uuid: str) -> None:
        """Undo ``prepare_attach_handle``; harmless if already undone."""
        return None

    # How a bitstream file is named for the driver's programming tool.
    bitstream_suffix: ClassVar[str] = '.bin'

    @property
    def tool_timeout(self) -> int:
        """Seconds a vendor programming tool may run: ``[agent]
        program_tool_timeout`` when the agent's options are there."""
        try:
            return self.conf.agent.program_tool_timeout
        except (AttributeError, cfg.NoSuchOptError):
            return TOOL_TIMEOUT

    def program(self, device: inventory.Device, bitstream: pathlib.Path,
                metadata: dict | None = None) -> None:
        """Load the file ``bitstream`` into the FPGA ``device``.

        ``metadata`` holds the bitstream's Glance image properties
        (``bs-uuid``, ``vendor``, ``board``, ``region_uuid``,
        ``function_uuid``, ...). Raises ``DriverError`` on failure.
        """
        raise OperationNotSupported(
            'Driver %s cannot program devices' % self.name)


# Building blocks for drivers of PCI devices.

def pci_attach_handle(address: inventory.PCIAddress,
                      **extra: str) -> inventory.AttachHandle:
    """A PCI function given whole to a VM."""
    return inventory.AttachHandle('PCI', {**address.as_info(), **extra})


def pci_device(device_type: str, function: pci.PCIFunction,
               deployables: list[inventory.Deployable],
               **vendor_board_info: str) -> inventory.Device:
    """A device whose control path is the PCI physical function."""
    std_board_info = {
        'vendor_id': function.vendor_id,
        'product_id': function.device_id,
        'class_code': function.class_code,
    }
    if function.subsystem_vendor_id:
        std_board_info['subsystem_vendor_id'] = function.subsystem_vendor_id
        std_board_info['subsystem_product_id'] = (
            function.subsystem_device_id or '')
    if function.numa_node is not None:
        std_board_info['numa_node'] = str(function.numa_node)
    if function.vendor_name:
        vendor_board_info.setdefault('vendor_name', function.vendor_name)
    return inventory.Device(
        type=device_type,
        vendor=function.vendor_id,
        model=function.device_name or function.device_id,
        controlpath_type='PCI',
        controlpath_info=function.address.as_info(),
        std_board_info=std_board_info,
        vendor_board_info=vendor_board_info,
        deployables=deployables)


def functions_by_address(functions):
    return {function.address: function for function in functions}
