"""The agent's RPC API: what the conductor may ask of one host's agent.

Each agent listens on the agent topic with its host name as the server,
so a call reaches the agent of that host only.

Errors: a call that fails for a reason the agent understands (no such
driver here, no such device or attach handle, the driver or the vendor
tool failed, the bitstream cannot be downloaded) raises a
``cyborg.exception.CyborgError`` in the caller, on RabbitMQ as on the
in-process transport: ``DriverNotEnabled``, ``NotOnThisHost``,
``BitstreamUnavailable`` or ``AgentError`` below, or the driver's
``cyborg.accelerator.drivers.base.DriverError`` or
``OperationNotSupported``, with the agent's explanation as ``message``.
Anything else is a bug in the agent and arrives as
``oslo_messaging.RemoteError``; a host whose agent does not answer gives
``oslo_messaging.MessagingTimeout``.

Version history (bump the minor for additions, keep old calls working):
  1.0 ping
  1.1 prepare_attach_handle, release_attach_handle, program
  1.2 apply_device_config

``[upgrade_levels] agent`` caps what the conductor sends, as
``[upgrade_levels] conductor`` does for the conductor's API (see
``cyborg.conductor.rpcapi``). The attach handle and bitstream sent, and
the programming summary answered, are versioned payloads (``ATTACH_HANDLE``,
``BITSTREAM``, ``PROGRAM_SUMMARY``).
"""

# First: selects oslo.service's threading backend before oslo.messaging
# loads (see cyborg/service.py).
from cyborg import service  # noqa: F401, I001

import oslo_messaging as messaging

from cyborg import exception
from cyborg import rpc
from cyborg.accelerator.drivers import base
from cyborg.objects import payload

VERSION = '1.2'

# An attach handle as the conductor stores it; ``attach_info`` may be the
# JSON text of its column.
ATTACH_HANDLE = payload.Kind('attach handle', '1.0',
                             required=('uuid', 'attach_type', 'attach_info'))
BITSTREAM = payload.Kind('bitstream', '1.0', required=('image_id',),
                         optional={'properties': dict})
PROGRAM_SUMMARY = payload.Kind('programming summary', '1.0')
CONFIG_RESULT = payload.Kind('configuration result', '1.0',
                             required=('state',),
                             optional={'failed_task': None, 'message': '',
                                       'changed': list})


class AgentError(exception.CyborgError):
    code = 'cyborg.agent_error'


class DriverNotEnabled(AgentError):
    status = 404
    code = 'cyborg.agent_driver_not_enabled'


class NotOnThisHost(AgentError):
    """The device or attach handle is not among what the driver finds."""

    status = 404
    code = 'cyborg.agent_not_on_this_host'


class BitstreamUnavailable(AgentError):
    status = 409
    code = 'cyborg.agent_bitstream_unavailable'


# The errors an agent answers with, by the class name that RabbitMQ
# carries: the caller raises them again as themselves.
ANSWERED_ERRORS = {cls.__name__: cls for cls in (
    exception.CyborgError, exception.Invalid, exception.NotFound,
    exception.Conflict, base.DriverError, base.OperationNotSupported,
    AgentError, DriverNotEnabled, NotOnThisHost, BitstreamUnavailable,
    payload.PayloadError, payload.PayloadVersionError)}


def _as_answered(error):
    """The CyborgError a RemoteError stands for, or None."""
    cls = ANSWERED_ERRORS.get(error.exc_type)
    if cls is None:
        return None
    return cls(error.value)


class AgentAPI:

    def __init__(self, transport, timeout=None, program_timeout=None,
                 version_cap=None, config_timeout=None):
        """``version_cap`` is ``[upgrade_levels] agent``."""
        self._transport = transport
        # Preparing or releasing a handle takes seconds; programming an
        # FPGA (download and vendor tool) takes longer.
        self._timeout = timeout
        self._program_timeout = (program_timeout if program_timeout
                                 is not None else timeout)
        self._version_cap = version_cap
        # Two playbooks and a discovery: minutes.
        self._config_timeout = (config_timeout if config_timeout
                                is not None else self._program_timeout)

    def _call(self, context, host, version, method, timeout=None,
              **kwargs):
        client = rpc.CappedClient(self._transport, rpc.AGENT_TOPIC, VERSION,
                                  'agent', version_cap=self._version_cap,
                                  server=host,
                                  timeout=timeout or self._timeout)
        cctxt = client.prepare(method, version)
        try:
            return cctxt.call(context, method, **kwargs)
        except messaging.RemoteError as error:
            # oslo.messaging rebuilds only the exceptions of modules its
            # transport was told of; the others arrive as RemoteError.
            answered = _as_answered(error)
            if answered is None:
                raise
        raise answered

    def ping(self, context, host):
        """What the agent on ``host`` runs: ``{host, drivers, version}``."""
        return self._call(context, host, '1.0', 'ping')

    def prepare_attach_handle(self, context, host, driver_name,
                              attach_handle, arq_uuid):
        """Make an attach handle ready for the VM of ARQ ``arq_uuid``.

        ``attach_handle`` is ``{'uuid', 'attach_type', 'attach_info'}`` as
        the conductor stores it; the agent finds the handle among what
        driver ``driver_name`` discovers. For an ``MDEV`` handle the mdev
        is created with the handle's UUID, which the conductor gives the
        handle anew at each allocation (the mdev is this ARQ's, not the
        handle's); a PCI function needs nothing.
        """
        self._call(context, host, '1.1', 'prepare_attach_handle',
                   driver_name=driver_name,
                   attach_handle=ATTACH_HANDLE.dump(attach_handle),
                   arq_uuid=arq_uuid)

    def release_attach_handle(self, context, host, driver_name,
                              attach_handle, arq_uuid):
        """Undo ``prepare_attach_handle``; harmless if already undone.
        ``attach_handle`` is as the ARQ's bind got it: its UUID names that
        bind's mdev only, which the agent removes only from the handle's
        function and type."""
        self._call(context, host, '1.1', 'release_attach_handle',
                   driver_name=driver_name,
                   attach_handle=ATTACH_HANDLE.dump(attach_handle),
                   arq_uuid=arq_uuid)

    def program(self, context, host, driver_name, controlpath_info,
                bitstream):
        """Load a bitstream into the FPGA at ``controlpath_info``.

        ``controlpath_info`` is the device's PCI address (``domain``,
        ``bus``, ``device``, ``function``); ``bitstream`` is
        ``{'image_id': <Glance image>, 'properties': {<image properties>}}``.
        The agent downloads the image, has the driver load it and reports
        its inventory at once, so that the function trait reaches the
        database and Placement. Returns ``{'device', 'image_id',
        'function_uuid', 'seconds', 'version'}``.
        """
        return self._call(context, host, '1.1', 'program',
                          timeout=self._program_timeout,
                          driver_name=driver_name,
                          controlpath_info=controlpath_info,
                          bitstream=BITSTREAM.dump(bitstream))

    def apply_device_config(self, context, host, controlpath_info, kind,
                            applied_settings, wanted_settings,
                            timeout=None):
        """Take the device at ``controlpath_info`` (its PCI address) from
        ``applied_settings`` (None: as discovered) to ``wanted_settings``
        of ``kind``: its teardown and setup playbooks, then a new
        discovery and report. Returns ``{'state': 'applied' | 'failed',
        'failed_task', 'message', 'changed'}``; a second call with the
        same settings changes nothing."""
        return CONFIG_RESULT.load(self._call(
            context, host, '1.2', 'apply_device_config',
            timeout=timeout or self._config_timeout,
            controlpath_info=controlpath_info, kind=kind,
            applied_settings=applied_settings,
            wanted_settings=wanted_settings))
