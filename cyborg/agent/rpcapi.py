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
  1.3 apply_device_config with wanted_settings None (teardown alone)
  1.4 prepare_attach_handle with ``request``, release_attach_handle with
      ``details``: MIG instances made at bind (``MIG_REQUEST``,
      ``MIG_INSTANCE``, ``MIG_RELEASED``)
  1.5 scrub_attach_handle (``SCRUB_RESULT``)
  1.6 scrub_attach_handle with ``base_image``: the FPGA base image that an
      ``fpga-base-image`` scrub loads again, and ``clear_image``, the one
      it loads first to clear the card's memory (``BITSTREAM``)

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
from cyborg.accelerator.drivers.gpu import mig_nvml
from cyborg.objects import payload

VERSION = '1.6'
# The first version whose prepare and release make and destroy what a
# bind asks for (a MIG instance).
REQUEST_VERSION = '1.4'
SCRUB_VERSION = '1.5'
# The first version whose scrub takes the base image to load again.
SCRUB_BASE_IMAGE_VERSION = '1.6'

# An attach handle as the conductor stores it; ``attach_info`` may be the
# JSON text of its column.
ATTACH_HANDLE = payload.Kind('attach handle', '1.0',
                             required=('uuid', 'attach_type', 'attach_info'))
BITSTREAM = payload.Kind('bitstream', '1.0', required=('image_id',),
                         optional={'properties': dict})
PROGRAM_SUMMARY = payload.Kind('programming summary', '1.0')
SCRUB_RESULT = payload.Kind('scrub result', '1.0',
                            required=('method', 'steps', 'seconds'))
CONFIG_RESULT = payload.Kind('configuration result', '1.0',
                             required=('state',),
                             optional={'failed_task': None, 'message': '',
                                       'changed': list})
# What a bind on a MIG slot asks for, what prepare made, and what the card
# can still create once release destroyed it. 1.1: ``waiting``, the
# profiles of the other binds Placement gave the card, not made yet (an
# agent of 1.0 ignores it and chooses as if none waited).
MIG_REQUEST = payload.Kind('MIG request', '1.1', required=('mig_profile',),
                           optional={'placement_rule': 'best-fit',
                                     'waiting': list})
# 1.1 (both): ``stranded``, the [compute, memory] slices left free that no
# placement can use, which Placement is told to hold back (None: unknown,
# an agent of 1.0).
MIG_INSTANCE = payload.Kind('MIG instance', '1.1',
                            required=('mig_profile', 'start', 'gi_id',
                                      'ci_id', 'mig_uuid'),
                            optional={'creatable': list, 'stranded': None})
MIG_RELEASED = payload.Kind('MIG release', '1.1',
                            optional={'creatable': list, 'stranded': None})
# By attach type: (what prepare is asked, what it answers and release is
# given back, what release answers).
MADE_AT_BIND = {'MIG': (MIG_REQUEST, MIG_INSTANCE, MIG_RELEASED)}


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
    base.ScrubFailed, AgentError, DriverNotEnabled, NotOnThisHost,
    BitstreamUnavailable,
    payload.PayloadError, payload.PayloadVersionError, mig_nvml.MIGError,
    mig_nvml.MIGUnavailable, mig_nvml.MIGRefused, mig_nvml.MIGInUse,
    mig_nvml.MIGIdentityMismatch)}


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

    def _client(self, host=None, timeout=None):
        return rpc.CappedClient(self._transport, rpc.AGENT_TOPIC, VERSION,
                                'agent', version_cap=self._version_cap,
                                server=host,
                                timeout=timeout or self._timeout)

    def can_send_version(self, version):
        """Whether ``[upgrade_levels] agent`` lets this client send
        ``version``."""
        return self._client().can_send_version(version)

    def _call(self, context, host, version, method, timeout=None,
              **kwargs):
        client = self._client(host, timeout)
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
                              attach_handle, arq_uuid, request=None):
        """Make an attach handle ready for the VM of ARQ ``arq_uuid``.

        ``attach_handle`` is ``{'uuid', 'attach_type', 'attach_info'}`` as
        the conductor stores it; the agent finds the handle among what
        driver ``driver_name`` discovers. For an ``MDEV`` handle the mdev
        is created with the handle's UUID, which the conductor gives the
        handle anew at each allocation (the mdev is this ARQ's, not the
        handle's); a PCI function needs nothing: None.

        A ``MIG`` slot handle needs ``request`` (1.4), ``{'mig_profile':
        '3g.40gb', 'placement_rule': 'best-fit' | 'lowest-slot',
        'waiting': ['1g.10gb', ...]}`` (``waiting``: the profiles of the
        card's other binds not made yet, which best fit leaves room
        for): the agent creates the instance at the start the rule
        chooses and answers ``{'mig_profile', 'start', 'gi_id', 'ci_id',
        'mig_uuid', 'creatable', 'stranded'}``, ``creatable`` the
        profiles the card can still create, ``stranded`` its [compute,
        memory] free slices that no placement can use. A card with no
        start free for it raises ``MIGRefused`` (409). Under a cap below
        1.4 a request raises ``VersionCapped``: an older agent would make
        nothing.
        """
        return self._handle_call(context, host, 'prepare_attach_handle',
                                 driver_name, attach_handle, arq_uuid,
                                 'request', request, sent=0, answered=1)

    def release_attach_handle(self, context, host, driver_name,
                              attach_handle, arq_uuid, details=None):
        """Undo ``prepare_attach_handle``; harmless if already undone.
        ``attach_handle`` is as the ARQ's bind got it: its UUID names that
        bind's mdev only, which the agent removes only from the handle's
        function and type.

        For a ``MIG`` slot handle ``details`` (1.4) is what prepare
        answered: the agent destroys exactly that instance and answers
        ``{'creatable', 'stranded'}``. An instance already gone (the
        host rebooted) is released; one with running processes raises
        ``MIGInUse`` (409), one whose ids name another instance now
        ``MIGIdentityMismatch`` (409), and nothing is destroyed.
        """
        return self._handle_call(context, host, 'release_attach_handle',
                                 driver_name, attach_handle, arq_uuid,
                                 'details', details, sent=1, answered=2)

    def _handle_call(self, context, host, method, driver_name,
                     attach_handle, arq_uuid, extra_name, extra, sent,
                     answered):
        """Prepare or release: at 1.1 with nothing more than the handle;
        at ``REQUEST_VERSION`` with ``extra`` as argument ``extra_name``,
        dumped and the answer loaded as the kinds of ``MADE_AT_BIND`` at
        indexes ``sent`` and ``answered`` say for the handle's type."""
        kwargs = {'driver_name': driver_name,
                  'attach_handle': ATTACH_HANDLE.dump(attach_handle),
                  'arq_uuid': arq_uuid}
        kinds = _made_at_bind(attach_handle)
        if extra is None:
            # A MIG release that names nothing may still destroy what the
            # agent made for the bind: its answer is one of the kinds.
            answer = self._call(context, host, '1.1', method, **kwargs)
        else:
            kwargs[extra_name] = kinds[sent].dump(extra) if kinds else extra
            answer = self._call(context, host, REQUEST_VERSION, method,
                                **kwargs)
        if answer is None or not kinds:
            return answer
        return kinds[answered].load(answer)

    def scrub_attach_handle(self, context, host, driver_name,
                            attach_handle, method, timeout, base_image=None,
                            clear_image=None):
        """Scrub a released attach handle by ``method`` (the scrub
        method its deployable reported) and verify it (1.5); at most
        ``timeout`` seconds. Answers ``{'method', 'steps', 'seconds'}``;
        a scrub that failed raises ``ScrubFailed`` (409) naming its
        step.

        ``base_image`` (1.6) is the Glance image id of the card's base
        image, which an ``fpga-base-image`` scrub loads again; without
        it that scrub fails at ``reload``. ``clear_image`` (1.6, with
        it) is the image that clears the card's memory, loaded first.
        Under a cap below 1.6 a base image raises ``VersionCapped``: an
        older agent would ignore it.
        """
        kwargs = {'driver_name': driver_name,
                  'attach_handle': ATTACH_HANDLE.dump(attach_handle),
                  'scrub_method': method}
        version = SCRUB_VERSION
        if base_image is not None:
            version = SCRUB_BASE_IMAGE_VERSION
            kwargs['base_image'] = BITSTREAM.dump({'image_id': base_image})
            if clear_image is not None:
                kwargs['clear_image'] = BITSTREAM.dump(
                    {'image_id': clear_image})
        return SCRUB_RESULT.load(self._call(
            context, host, version, 'scrub_attach_handle', timeout=timeout,
            **kwargs))

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
        same settings changes nothing. ``wanted_settings`` None puts the
        device back as discovered (1.3)."""
        return CONFIG_RESULT.load(self._call(
            context, host, '1.2' if wanted_settings is not None else '1.3',
            'apply_device_config',
            timeout=timeout or self._config_timeout,
            controlpath_info=controlpath_info, kind=kind,
            applied_settings=applied_settings,
            wanted_settings=wanted_settings))


def _made_at_bind(attach_handle):
    """The payload kinds of what is made at bind for this handle's attach
    type (``MADE_AT_BIND``), or None."""
    if not isinstance(attach_handle, dict):
        return None
    return MADE_AT_BIND.get(attach_handle.get('attach_type'))
