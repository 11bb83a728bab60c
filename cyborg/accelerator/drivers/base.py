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
  and remove the mdev; for a slot of MIG instances on demand: create the
  instance the bind's request names and answer what it is, destroy it
  again from that answer). A PCI function needs nothing: the defaults do
  nothing.
- ``scrub_method()`` / ``scrub_attach_handle()``: whether a deployable's
  handles are scrubbed between tenants, and the scrub of one released
  handle, verified (a GPU passed through: a function-level reset, then a
  check that it came back; an mdev or a MIG instance: a check that it is
  gone). A handle the driver scrubs is given to no one between its
  release and a verified scrub.
- ``program()`` to load a bitstream into an FPGA, with the bitstream's
  Glance properties as ``metadata``. Drivers of other devices refuse it.
  Once programmed, the next ``discover()`` reports the loaded function as
  the trait ``CUSTOM_FPGA_FUNCTION_ID_<function uuid>``.

The agent runs as an unprivileged user: what needs root (writing sysfs
control files, running a vendor's tool) a driver asks of the entry points
of ``cyborg.privsep``, inside ``privileged()``, never by itself.

- ``observe()`` every few seconds: the health and usage of devices that
  ``discover()`` returned, as ``health.Observation`` objects. It reads
  only the few files (and vendor library calls) each device needs, never
  rediscovers, and never raises for a device: what cannot be read is
  ``unknown`` with the reason. Drivers of PCI devices get the PCI level
  (``pci_health``, a ``health.PCIHealth``) for free and add their
  vendor's view in ``observe_vendor()``. Some checks compare with the previous
  observation (AER counters, the kernel driver discovery saw): the first
  observation of a device is their baseline.

The agent calls these from several threads (the periodic report and RPC
requests): a driver that keeps state guards it.
"""

import abc
import contextlib
import logging
import pathlib
import threading
from typing import ClassVar

from oslo_config import cfg
from oslo_privsep import comm as privsep_comm
from oslo_privsep import daemon as privsep_daemon

from cyborg import exception
from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import pci
from cyborg.objects import inventory
from cyborg.privsep import checks as privsep_checks
from cyborg.privsep import fpga_tool as privsep_tool
from cyborg.privsep import mdev as privsep_mdev

LOG = logging.getLogger(__name__)

NAMESPACE = 'cyborg.accelerator.driver'


class DriverError(exception.CyborgError):
    code = 'cyborg.driver_error'


class OperationNotSupported(DriverError):
    status = 409
    code = 'cyborg.driver_operation_not_supported'


class ScrubFailed(DriverError):
    """A scrub that did not end with a verified clean handle: ``step``
    names what failed."""

    status = 409
    code = 'cyborg.scrub_failed'

    def __init__(self, step, message=None):
        if message is None:  # rebuilt from its text: 'step: message'
            step, _, message = step.partition(': ')
        self.step = step
        self.reason = message  # without the step, which ``step`` names
        super().__init__('%s: %s' % (step, message))


# What a privileged call may raise: its arguments refused, the host
# refusing the write, or no privileged helper to ask.
_PRIVILEGED_FAILURES = (privsep_checks.InvalidArgument,
                        privsep_mdev.MdevConflict, privsep_tool.ToolError,
                        OSError, privsep_comm.PrivsepTimeout,
                        privsep_daemon.FailedToDropPrivileges,
                        privsep_daemon.ProtocolError)


@contextlib.contextmanager
def privileged(failure):
    """Around calls of ``cyborg.privsep`` entry points: their failures
    become a ``DriverError`` that starts with ``failure``."""
    try:
        yield
    except privsep_daemon.FailedToDropPrivileges as exc:
        raise DriverError(
            '%s: the privileged helper did not start (%s); check '
            '[privsep_agent] helper_command and that sudo lets the '
            "agent's user run privsep-helper" % (failure, exc))
    except _PRIVILEGED_FAILURES as exc:
        raise DriverError('%s: %s' % (failure, exc))


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
                              uuid: str,
                              request: dict | None = None) -> dict | None:
        """Make ``handle`` ready to be given to a VM as ``uuid``.

        ``request`` says what to make where the handle is a slot for
        something made at bind (a MIG instance: its profile); the answer
        then says what was made, and comes back as ``details`` at
        release. None where nothing is made."""
        return None  # a whole PCI function is ready as it is

    def release_attach_handle(self, device: inventory.Device,
                              handle: inventory.AttachHandle,
                              uuid: str,
                              details: dict | None = None) -> dict | None:
        """Undo ``prepare_attach_handle``, whose answer ``details`` is;
        harmless if already undone."""
        return None

    def scrub_method(self, deployable: inventory.Deployable) -> str | None:
        """How the handles of ``deployable`` are scrubbed between tenants
        (reported as its attribute ``scrub_method``); None: they are not,
        and are free again as soon as released."""
        return None

    def scrub_attach_handle(self, device: inventory.Device,
                            handle: inventory.AttachHandle, uuid: str,
                            method: str) -> list[str]:
        """Scrub ``handle`` (released by its last ARQ, which had it as
        ``uuid``) by ``method``, then verify it is clean: the steps done,
        in order. Raises ``ScrubFailed`` naming the step that failed."""
        raise OperationNotSupported(
            'Driver %s does not scrub attach handles' % self.name)

    # Devices that lower their PCIe link speed themselves when idle (GPUs):
    # their link is judged on its width only.
    link_speed_varies: ClassVar[bool] = False

    _health_lock = threading.Lock()

    @property
    def pci_health(self) -> health.PCIHealth:
        """The PCI-level health of this driver's functions (kept state)."""
        with self._health_lock:
            if self.__dict__.get('_pci_health') is None:
                self._pci_health = health.PCIHealth(self.pci)
            return self._pci_health

    def observe(self, devices: list[inventory.Device]
                ) -> list[health.Observation]:
        """Health and usage of ``devices`` now, one observation each."""
        return [self.observe_device(device) for device in devices]

    def observe_device(self, device: inventory.Device) -> health.Observation:
        info = device.controlpath_info or {}
        if device.controlpath_type != 'PCI':
            return health.Observation.of(
                str(info), [health.Finding(
                    health.UNKNOWN, 'no health check for control path %s'
                    % device.controlpath_type)])
        address = inventory.PCIAddress(info['domain'], info['bus'],
                                       info['device'], info['function'])
        findings = self.pci_health.findings(
            address, judge_link_speed=not self.link_speed_varies)
        if not self.pci_health.present(address):
            return health.Observation.of(str(address), findings)
        usage = self.pci_health.link_usage(address)
        extra_findings, extra_usage = self.pci_health.class_extras(address)
        findings += extra_findings
        usage.update(extra_usage)
        try:
            vendor_findings, vendor_usage = self.observe_vendor(device,
                                                                address)
        except Exception as e:  # a broken vendor view must not stop others
            LOG.exception('Observing %s failed', address)
            vendor_findings, vendor_usage = [health.Finding(
                health.UNKNOWN, 'observing %s failed: %s' % (address, e))], {}
        findings += vendor_findings
        usage.update(vendor_usage)
        return health.Observation.of(str(address), findings, usage)

    def observe_vendor(self, device: inventory.Device,
                       address: inventory.PCIAddress
                       ) -> tuple[list[health.Finding], dict]:
        """What the vendor's own interface adds: (findings, usage)."""
        return [], {}

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
    # What device configuration policies are held against (the most VFs
    # the PF can have); drivers of mdev parents add ``mdev_types``.
    if function.sriov_totalvfs is not None:
        std_board_info['sriov_totalvfs'] = str(function.sriov_totalvfs)
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
