"""The agent: discovers this host's accelerators and reports them.

Every ``[agent] report_interval`` seconds the agent asks each enabled
driver what it finds, builds the host snapshot (``HostInventory``) and
sends it whole to the conductor, which writes only what changed. The
report names the compute node's resource provider: the agent looks it up
in Placement under the configured host name, the FQDN and the short host
name, in that order, and logs which one matched. An agent without
``[placement]`` credentials sends the names and lets the conductor look.

The agent also listens on the agent topic (its host name as the server)
for the conductor's calls (``rpcapi.py``): ``ping``, and around the life of
a bound ARQ ``prepare_attach_handle``/``release_attach_handle`` (for a
vGPU, create and remove the mdev; for a GPU of MIG instances on demand,
create the instance the bind asks for and destroy it) and ``program``
(load a bitstream from Glance into an FPGA). The agent finds the device
or attach handle among what the named driver discovers now, so that it
acts only on hardware it would report. After programming it reports its
inventory at once rather than at the next interval: the loaded
function's trait reaches the database and Placement the way every other
trait does.

Before its first report, the agent applies again the device
configuration that a reboot lost (``config_restore.py``: VF counts,
driver bindings, vGPU types of VFs, FPGA base images), then puts back
the mdevs of Bound ARQs (``mdev_restore.py``) and, on a host with GPUs
of MIG instances on demand, the instances of that host's binds,
destroying those no bind owns (``mig_restore.py``); a conductor that
does not answer leaves that to the next report.

The agent runs as an unprivileged user: what a driver does as root
(writing an mdev's sysfs files, running an FPGA tool) it asks of the
agent's privsep daemon (``cyborg.privsep``), which checks every argument
that came in an RPC message (a handle's UUID, a device's address) again.

Every ``[agent] heartbeat_interval`` seconds the agent observes the
health and usage of the devices of its last discovery (each driver's
``observe()``: a few files and vendor library calls per device, no
rediscovery) and casts a heartbeat with them; the conductor records the
agent alive in the ``services`` table with the usage, and writes a
device's health only when it changed. Reports and heartbeats go to the
conductor that owns this host on the conductors' hash ring, as the last
report's answer named it (``owner``); with no such hint, or when the
owner does not answer a report within ``[DEFAULT] service_down_time``
(by then a dead owner has left the ring), they go to the conductor
topic, where any conductor takes them (and passes a report on to the
owner).
"""

import functools
import json
import pathlib
import re
import socket
import tempfile
import threading
import time

from keystoneauth1 import exceptions as ks_exceptions
from oslo_log import log
import oslo_messaging as messaging

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg import rpc
from cyborg import service
from cyborg import version as cyborg_version
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import loader
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.fpga import scrub as fpga_scrub
from cyborg.accelerator.drivers.gpu import mig_nvml
from cyborg.agent import config_restore
from cyborg.agent import device_config
from cyborg.agent import device_state
from cyborg.agent import mdev_restore
from cyborg.agent import mig_restore
from cyborg.agent import released
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.agent import scrub
from cyborg.clients import placement as placement_client
from cyborg.conductor import placement_sync
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.device_config import base_image
from cyborg.device_config import kinds as config_kinds
from cyborg.device_config import status as config_status
from cyborg.metrics import agent as agent_metrics
from cyborg.metrics import endpoint as metrics_endpoint
from cyborg.objects import inventory
from cyborg.privsep import playbook as privsep_playbook

LOG = log.getLogger(__name__)

_address_text = inventory.address_text

# AgentManager's glance argument when the client is to be built from
# [glance] at the first download.
GLANCE_FROM_CONF = object()
# The handles whose device the agent makes at bind, under the handle's
# uuid (new at each bind).
FENCED_AFTER_RELEASE = frozenset({mdev_restore.MDEV, mig_restore.MIG})
# Released handle uuids remembered against late prepares: many more
# than the binds one host sees within an RPC call's timeout.
RELEASED_KEPT = 4096


def name_candidates(configured, fqdn=None, short_name=None):
    """``[(name, what it is)]`` in the order Nova's name is tried."""
    fqdn = fqdn if fqdn is not None else socket.getfqdn()
    if short_name is None:
        short_name = socket.gethostname().split('.')[0]
    labelled = {}
    for name, label in ((configured, 'the configured [DEFAULT] host'),
                        (fqdn, 'the FQDN'),
                        (short_name, 'the short host name')):
        if name and name not in labelled:
            labelled[name] = label
    return list(labelled.items())


def _answers_errors(endpoint):
    """An RPC endpoint whose understood errors go back to the caller.

    A ``CyborgError`` (a driver or a tool failed, no such handle here)
    is logged as one line and sent to the caller as itself; anything
    else is a bug, logged with its traceback by oslo.messaging.
    """
    @functools.wraps(endpoint)
    def answer(self, context, *args, **kwargs):
        try:
            return endpoint(self, context, *args, **kwargs)
        except exception.CyborgError as exc:
            # Keeps the error for the reply; logged outside the except
            # block, where oslo.log adds no traceback.
            expected = messaging.ExpectedException()
            error = exc
        LOG.warning('%s requested by the conductor failed: %s: %s',
                    endpoint.__name__, type(error).__name__, error)
        raise expected
    return answer


def glance_from_conf(conf):
    """The Glance client of ``[glance]``, or None if it is not set."""
    from cyborg.clients import glance as glance_client
    return glance_client.GlanceClient.from_conf(conf)


def _kernel_driver(driver, address):
    """The kernel driver that holds the PCI function at ``address`` now,
    as ``driver``'s reader finds it; None if none does, or it is gone."""
    function = driver.pci.function(address)
    return function.kernel_driver if function is not None else None


def _pci_address(info):
    return inventory.PCIAddress(info['domain'], info['bus'], info['device'],
                                info['function'])


def _bindings(found):
    """The bindings of a report's answer, as far as they make sense;
    {} from a conductor that sends none."""
    if not isinstance(found, dict):
        return {}
    return {str(address): [dict(b) for b in bound if isinstance(b, dict)]
            for address, bound in found.items() if isinstance(bound, list)}


def _image_file_name(image_id):
    return re.sub(r'[^A-Za-z0-9_.-]', '_', str(image_id)).lstrip('.')


class AgentManager:
    """The agent's work, and its RPC endpoint.

    ``glance`` downloads bitstreams (``download(image_id, dest_path)``);
    by default it is built from ``[glance]`` when first needed, and None
    means that this agent cannot program. ``request_report`` asks for an
    inventory report as soon as possible without waiting for it; the
    service points it at its periodic report, otherwise a report runs on
    a thread of its own.
    """

    target = messaging.Target(version=agent_rpcapi.VERSION)

    def __init__(self, conf, drivers, conductor, placement=None,
                 candidates=None, glance=GLANCE_FROM_CONF,
                 request_report=None, run_playbook=None):
        self.conf = conf
        self.drivers = drivers
        self.conductor = conductor
        self.placement = placement
        self.candidates = (candidates if candidates is not None
                           else name_candidates(conf.host))
        self.compute_node = None  # placement_sync.ComputeNode once found
        self.last_report = None
        # The last discovery that every driver finished: the host's
        # HostInventory, and its devices by driver name for observe();
        # the metrics endpoint reads these at each scrape.
        self.last_inventory = None
        self._discovered = {}
        # {PCI address: health.Observation} of the last heartbeat.
        self.last_observations = {}
        # The conductor that owns this host, as the last answer said.
        self.owner = None
        self._last_failed = False
        self._context = cyborg_context.admin_context(None)
        self._report_lock = threading.Lock()
        self._held_answers = set()  # test_prepare_answer_delay, per ARQ
        self._glance = glance
        self._glance_lock = threading.Lock()
        self._program_locks = {}  # (driver name, address) -> Lock
        self._program_locks_lock = threading.Lock()
        # (driver name, attach type, address) -> Lock
        self._handle_locks = {}
        # (driver name, address) -> bitstream id this agent loaded last.
        self._loaded = {}
        self._loaded_lock = threading.Lock()
        self.request_report = request_report or self._report_on_a_thread
        # The privileged playbook runner (cyborg.privsep.playbook).
        self.run_playbook = run_playbook or privsep_playbook.run_playbook
        # The instances bound to each device as the conductor's last
        # answer named them ({address: [{instance_uuid, project_id}]}),
        # for the metrics endpoint's labels.
        self.bindings = {}
        # The device configuration a reboot lost, applied again before
        # the first report; {address: why} of what could not be, reported
        # unhealthy until the rollout applies the device's settings.
        self.config_restore = config_restore.ConfigRestore(
            conf.host, conductor, self._context, self._restore_config,
            timeout=conf.agent.report_timeout, enabled=bool(drivers))
        self._config_unrestored = {}
        self._config_unrestored_lock = threading.Lock()
        # The mdevs of Bound ARQs, put back before the first report.
        self.mdev_restore = mdev_restore.MdevRestore(
            conf.host, drivers, conductor, self._context,
            lambda driver_name, info: self._lock_of(
                (driver_name, mdev_restore.MDEV, _address_text(info))),
            timeout=conf.agent.report_timeout)
        # {handle uuid: the MIG instance its prepare made}: a release that
        # names none (its bind never heard the prepare's answer) destroys
        # that one. A handle's uuid is new at each bind, so a late
        # release cannot reach the next bind's instance.
        self._made_for = {}
        # Uuids of handles released here (those made at bind): a prepare
        # that arrives after its handle's release (RPC does not order two
        # calls) would make what no one releases. Kept across restarts.
        self._released = released.ReleasedHandles(conf.state_path,
                                                  RELEASED_KEPT)
        # The MIG instances of binds, put back before the first report.
        self.mig_restore = mig_restore.MIGRestore(
            conf.host, drivers, conductor, self._context,
            lambda driver_name, gpu: self._lock_of(
                (driver_name, mig_restore.MIG, str(gpu))),
            timeout=conf.agent.report_timeout)

    # -- RPC endpoint -------------------------------------------------

    # Each endpoint drops the arguments of a newer conductor
    # (rpc.ignores_unknown_args, next to the def) and reads its payloads
    # with their versions (agent_rpcapi.ATTACH_HANDLE, BITSTREAM).

    @rpc.ignores_unknown_args
    def ping(self, context):
        return {'host': self.conf.host,
                'drivers': [d.name for d in self.drivers],
                'version': agent_rpcapi.VERSION}

    @_answers_errors
    @rpc.ignores_unknown_args
    def prepare_attach_handle(self, context, driver_name, attach_handle,
                              arq_uuid, request=None):
        driver, device, handle, uuid = self._find_attach_handle(
            driver_name, attach_handle)
        kinds = agent_rpcapi.MADE_AT_BIND.get(handle.attach_type)
        extra = {}
        if request is not None:
            extra['request'] = kinds[0].load(request) if kinds else request
        with self._handle_lock(driver_name, handle):
            if uuid in self._released:
                raise exception.Conflict(
                    '%s attach handle %s of %s was released before this '
                    'prepare for ARQ %s arrived: nothing is made for it.'
                    % (handle.attach_type, uuid, driver_name, arq_uuid))
            try:
                made = driver.prepare_attach_handle(device, handle, uuid,
                                                    **extra)
            except mig_nvml.MIGRefused:
                # Placement offered a profile the card cannot place now:
                # what it can still create goes out at once, not at the
                # next periodic report.
                self.request_report()
                raise
            if made and handle.attach_type == mig_restore.MIG:
                # Not an orphan for a restore that runs after this bind.
                self.mig_restore.made(driver_name, _pci_address(
                    handle.attach_info), made)
                self._made_for[uuid] = made
        LOG.info('Prepared %s attach handle %s (%s) of %s for ARQ %s%s',
                 handle.attach_type, uuid, _address_text(handle.attach_info),
                 driver_name, arq_uuid, ': %s' % made if made else '')
        # Tests only: a window in which the device exists and the
        # conductor has not heard of it yet; once per ARQ, so that the
        # bind resumed after a crash is not held again.
        delay = self.conf.agent.test_prepare_answer_delay
        if delay and arq_uuid not in self._held_answers:
            self._held_answers.add(arq_uuid)
            time.sleep(delay)
        if made is None or not kinds:
            return made
        return kinds[1].dump(made)

    @_answers_errors
    @rpc.ignores_unknown_args
    def release_attach_handle(self, context, driver_name, attach_handle,
                              arq_uuid, details=None):
        driver, device, handle, uuid = self._find_attach_handle(
            driver_name, attach_handle)
        kinds = agent_rpcapi.MADE_AT_BIND.get(handle.attach_type)
        extra = {}
        if details is not None:
            extra['details'] = kinds[1].load(details) if kinds else details
        with self._handle_lock(driver_name, handle):
            if handle.attach_type in FENCED_AFTER_RELEASE:
                self._released.add(uuid)
            if details is None and uuid in self._made_for:
                LOG.info('Release of %s attach handle %s for ARQ %s names '
                         'nothing: its bind never heard what was made; '
                         'releasing what this agent made for it',
                         handle.attach_type, uuid, arq_uuid)
                extra['details'] = self._made_for[uuid]
            left = driver.release_attach_handle(device, handle, uuid,
                                                **extra)
            self._made_for.pop(uuid, None)
        LOG.info('Released %s attach handle %s (%s) of %s for ARQ %s',
                 handle.attach_type, uuid, _address_text(handle.attach_info),
                 driver_name, arq_uuid)
        if left is None or not kinds:
            return left
        return kinds[2].dump(left)

    @_answers_errors
    @rpc.ignores_unknown_args
    def scrub_attach_handle(self, context, driver_name, attach_handle,
                            scrub_method, base_image=None, clear_image=None):
        driver, device, handle, uuid = self._find_attach_handle(
            driver_name, attach_handle)
        reloads = scrub_method == fpga_scrub.FPGA_BASE_IMAGE
        try:
            with self._handle_lock(driver_name, handle):
                if reloads:
                    done = self._scrub_fpga(driver, device, handle,
                                            base_image, clear_image)
                else:
                    done = scrub.scrub(driver, device, handle, uuid,
                                       scrub_method)
        finally:
            if reloads:
                # Before the answer, as after a base image is applied:
                # the function the card runs now reaches the conductor,
                # so that no bind takes the tenant's one as still loaded.
                self.report_inventory()
        LOG.info('Scrubbed %s attach handle %s (%s) of %s by %s in %.1f s: '
                 '%s', handle.attach_type, uuid,
                 _address_text(handle.attach_info), driver_name, scrub_method,
                 done['seconds'], ', '.join(done['steps']))
        return agent_rpcapi.SCRUB_RESULT.dump(done)

    def _scrub_fpga(self, driver, device, handle, base_image, clear_image):
        """The ``fpga-base-image`` scrub: the card's clearing image, if
        it has one, then its base image (bitstream payloads naming them,
        or None) loaded again and checked, timed as ``scrub.scrub`` times
        the others."""
        started = time.monotonic()

        def image_of(payload):
            return (agent_rpcapi.BITSTREAM.load(payload)['image_id']
                    if payload is not None else None)

        steps = fpga_scrub.scrub(driver, device, handle,
                                 image_of(base_image),
                                 functools.partial(self._reload_base_image,
                                                   driver, device),
                                 clear_image_id=image_of(clear_image))
        return {'method': fpga_scrub.FPGA_BASE_IMAGE, 'steps': steps,
                'seconds': round(time.monotonic() - started, 3)}

    def _reload_base_image(self, driver, device, image_id,
                           step=fpga_scrub.RELOAD):
        """Load image ``image_id`` (the base image, or at ``step``
        ``clear`` the clearing one) into ``device`` through ``_load``,
        even if this agent loaded it last: the tenant may have changed
        the card since. Its Glance properties."""
        try:
            image = self._glance_client().get_bitstream(image_id)
        except exception.CyborgError as exc:
            raise base.ScrubFailed(step, 'Cannot find image %s: %s'
                                   % (image_id, exc.message))
        properties = dict(image['properties'])
        with self._loaded_lock:
            self._loaded.pop((driver.name,
                              _address_text(device.controlpath_info)), None)
        self._load(driver, device, image_id, properties)
        return properties

    @_answers_errors
    @rpc.ignores_unknown_args
    def program(self, context, driver_name, controlpath_info, bitstream):
        driver = self._driver(driver_name)
        device = self._find_device(driver, controlpath_info)
        fields = agent_rpcapi.BITSTREAM.load(bitstream)
        try:
            properties = dict(fields['properties'] or {})
        except (TypeError, ValueError):
            raise agent_rpcapi.AgentError(
                'A bitstream is {"image_id", "properties"}, not %r'
                % (bitstream,))
        summary = self._load(driver, device, fields['image_id'], properties)
        if summary['programmed']:
            self.request_report()
        return agent_rpcapi.PROGRAM_SUMMARY.dump(summary)

    def _load(self, driver, device, image_id, properties):
        """Load Glance image ``image_id`` (its ``properties`` as Glance
        gives them) into the FPGA ``device`` of ``driver``, one program
        at a time per FPGA: what a bind's program and an FPGA base image
        both run. The programming summary."""
        started = time.monotonic()
        driver_name = driver.name
        address = _address_text(device.controlpath_info)
        wanted = properties.get('bs-uuid') or image_id
        with self._program_lock(driver_name, address):
            # Under the device's lock: a program of the same image that
            # ran meanwhile (a bind resumed by another conductor asks
            # again) has ended and been recorded.
            if self._holds(driver, device.controlpath_info, wanted,
                           properties.get('function_uuid')):
                LOG.info('FPGA %s of %s already holds bitstream %s (image '
                         '%s); not programming it again', address,
                         driver_name, wanted, image_id)
                return {'device': address, 'image_id': image_id,
                        'function_uuid': properties.get('function_uuid'),
                        'seconds': 0.0, 'programmed': False}
            glance = self._glance_client()
            with tempfile.TemporaryDirectory(
                    prefix='cyborg-bitstream-') as directory:
                path = pathlib.Path(directory) / (
                    _image_file_name(image_id) + driver.bitstream_suffix)
                self._download(glance, image_id, path)
                LOG.info('Programming FPGA %s of %s with image %s (%s, '
                         'function %s)', address, driver_name, image_id,
                         properties.get('bs-name'),
                         properties.get('function_uuid'))
                with self._loaded_lock:
                    # Unknown while the tool runs: a failed run may leave
                    # the card half written.
                    self._loaded.pop((driver_name, address), None)
                driver.program(device, path, properties)
                with self._loaded_lock:
                    self._loaded[(driver_name, address)] = wanted
        seconds = time.monotonic() - started
        LOG.info('Programmed FPGA %s with image %s in %.1f s', address,
                 image_id, seconds)
        return {'device': address, 'image_id': image_id,
                'function_uuid': properties.get('function_uuid'),
                'seconds': round(seconds, 3), 'programmed': True}

    def _load_base_image(self, driver, device, image_id):
        """``device_config.apply``'s ``load_bitstream``: ``_load`` of the
        image as Glance describes it, each failure named by its step."""
        try:
            image = self._glance_client().get_bitstream(image_id)
        except exception.CyborgError as exc:
            raise base_image.StepFailed(base_image.FIND_IMAGE, exc.message)
        try:
            return self._load(driver, device, image_id,
                              dict(image['properties']))['programmed']
        except agent_rpcapi.BitstreamUnavailable as exc:
            raise base_image.StepFailed(base_image.DOWNLOAD, exc.message)
        except base.DriverError as exc:
            raise base_image.StepFailed(base_image.PROGRAM, exc.message)

    @_answers_errors
    @rpc.ignores_unknown_args
    def apply_device_config(self, context, controlpath_info, kind,
                            applied_settings, wanted_settings):
        driver, device = self._device_at(controlpath_info)
        address = _address_text(device.controlpath_info)
        with self._program_lock('device-config', address):
            result = self._apply(driver, device, address, kind,
                                 applied_settings, wanted_settings)
        LOG.info('Device %s: %s settings %s: %s%s', address, kind,
                 wanted_settings, result['state'],
                 ' at %r: %s' % (result['failed_task'], result['message'])
                 if result['state'] != config_status.APPLIED else '')
        if result['state'] == config_status.APPLIED:
            with self._config_unrestored_lock:
                self._config_unrestored.pop(address, None)
        # Before the answer: the devices, providers and handles that the
        # change made or removed reach the conductor first.
        self.report_inventory()
        return agent_rpcapi.CONFIG_RESULT.dump(result)

    def _apply(self, driver, device, address, kind, applied, wanted):
        """``device_config.apply`` on ``device`` of ``driver`` at
        ``address``, under the caller's device lock: its result, a
        failure of the privileged run included."""
        try:
            return device_config.apply(
                kind, address, applied, wanted, self._privileged_playbook,
                functools.partial(self._load_base_image, driver, device),
                kernel_driver=_kernel_driver(driver, address))
        except base.DriverError as exc:
            return {'state': config_status.FAILED,
                    'failed_task': 'run the playbooks',
                    'message': str(exc), 'changed': []}

    def _restore_config(self, applied):
        """``config_restore``'s restore of one device: its applied
        settings given again, as the rollout gives them, unless it still
        holds them."""
        kind, settings = applied['kind'], applied['applied_settings']
        try:
            driver, device = self._device_at(applied['controlpath_info'])
        except agent_rpcapi.NotOnThisHost as exc:
            raise config_restore.Failed(config_restore.failure(
                kind, settings, exc.message))
        address = _address_text(device.controlpath_info)
        with self._program_lock('device-config', address):
            if kind == config_kinds.FPGA_BASE_IMAGE:
                held = self._runs_base_image(driver, device, address,
                                             settings['bitstream_uuid'])
            else:
                held = config_restore.holds(
                    kind, settings, device_state.read(driver.pci, address))
            if held is None:
                return 'unknown'
            if held:
                return 'kept'
            result = self._apply(driver, device, address, kind, settings,
                                 settings)
        if result['state'] == config_status.APPLIED:
            return 'applied'
        why = config_restore.failure(kind, settings, '%s: %s' % (
            result['failed_task'], result['message']))
        with self._config_unrestored_lock:
            self._config_unrestored[address] = why
        raise config_restore.Failed(why)

    def _runs_base_image(self, driver, device, address, image_id):
        """Whether the FPGA runs the function of base image
        ``image_id`` now; None if that cannot be told (Glance does not
        answer, the image names no function)."""
        try:
            image = self._glance_client().get_bitstream(image_id)
        except exception.CyborgError as exc:
            LOG.warning('FPGA %s: cannot tell whether it still runs base '
                        'image %s; left as it is: %s', address, image_id,
                        exc.message)
            return None
        function_uuid = dict(image['properties']).get('function_uuid')
        if not function_uuid:
            LOG.warning('FPGA %s: base image %s names no function_uuid, so '
                        'whether the card still runs it cannot be told; '
                        'left as it is', address, image_id)
            return None
        return fpga_scrub.runs_function(device.deployables, function_uuid)

    def _privileged_playbook(self, pair, action, variables):
        with base.privileged('Cannot run the %s playbook of %s'
                             % (action, pair)):
            return self.run_playbook(pair, action, variables)

    def _device_at(self, controlpath_info):
        """(driver, device) of ``controlpath_info`` if a driver of this
        agent finds a device there: configuration touches nothing else."""
        for driver in self.drivers:
            try:
                return driver, self._find_device(driver, controlpath_info)
            except agent_rpcapi.NotOnThisHost:
                continue
        raise agent_rpcapi.NotOnThisHost(
            'No driver on host %s finds a device at %s'
            % (self.conf.host, _address_text(controlpath_info)))

    def _holds(self, driver, controlpath_info, wanted, function_uuid):
        """Whether this agent loaded ``wanted`` into the device last and
        the device, as discovered now, still runs its function."""
        address = _address_text(controlpath_info)
        with self._loaded_lock:
            if self._loaded.get((driver.name, address)) != wanted:
                return False
        if not function_uuid:
            return True
        return fpga_scrub.runs_function(
            self._find_device(driver, controlpath_info).deployables,
            function_uuid)

    def _driver(self, driver_name):
        for driver in self.drivers:
            if driver.name == driver_name:
                return driver
        raise agent_rpcapi.DriverNotEnabled(
            'Driver %s is not enabled on host %s (enabled: %s)'
            % (driver_name, self.conf.host,
               ', '.join(d.name for d in self.drivers) or 'none'))

    def _find_attach_handle(self, driver_name, attach_handle):
        """(driver, device, handle, handle UUID) as discovered now."""
        fields = agent_rpcapi.ATTACH_HANDLE.load(attach_handle)
        uuid = fields['uuid']
        attach_type = fields['attach_type']
        try:
            attach_info = fields['attach_info']
            if isinstance(attach_info, str):  # as a JSON column holds it
                attach_info = json.loads(attach_info)
            attach_info = dict(attach_info)
        except (TypeError, ValueError):
            raise agent_rpcapi.AgentError(
                'An attach handle is {"uuid", "attach_type", '
                '"attach_info"}, not %r' % (attach_handle,))
        driver = self._driver(driver_name)
        for device in driver.discover():
            for deployable in device.deployables:
                for handle in deployable.attach_handles:
                    if (handle.attach_type == attach_type
                            and handle.attach_info == attach_info):
                        return driver, device, handle, uuid
        raise agent_rpcapi.NotOnThisHost(
            'Driver %s on host %s finds no %s attach handle %s (%s)'
            % (driver_name, self.conf.host, attach_type,
               _address_text(attach_info), uuid))

    def _find_device(self, driver, controlpath_info):
        try:
            wanted = dict(controlpath_info)
        except (TypeError, ValueError):
            wanted = None
        for device in driver.discover():
            if (device.controlpath_type == 'PCI'
                    and device.controlpath_info == wanted):
                return device
        raise agent_rpcapi.NotOnThisHost(
            'Driver %s on host %s finds no device at %s'
            % (driver.name, self.conf.host, _address_text(controlpath_info)))

    def _handle_lock(self, driver_name, handle):
        """One prepare or release at a time per attach handle: a late
        release of one bind never interleaves with the next bind's
        prepare of the same handle. The handles of one function share
        it (the MIG slots of one GPU)."""
        return self._lock_of((driver_name, handle.attach_type,
                              _address_text(handle.attach_info)))

    def _lock_of(self, key):
        with self._program_locks_lock:
            return self._handle_locks.setdefault(key, threading.Lock())

    def _program_lock(self, driver_name, address):
        """One program at a time per device."""
        with self._program_locks_lock:
            return self._program_locks.setdefault((driver_name, address),
                                                  threading.Lock())

    def _glance_client(self):
        with self._glance_lock:
            if self._glance is GLANCE_FROM_CONF:
                self._glance = glance_from_conf(self.conf)
            glance = self._glance
        if glance is None:
            raise agent_rpcapi.BitstreamUnavailable(
                'Host %s cannot download bitstreams: [glance] is not '
                'configured' % self.conf.host)
        return glance

    @staticmethod
    def _download(glance, image_id, path):
        started = time.monotonic()
        try:
            glance.download(image_id, str(path))
        except Exception as exc:
            # Whatever the client raises (HTTP, keystoneauth, disk): the
            # caller needs the reason, not the type.
            raise agent_rpcapi.BitstreamUnavailable(
                'Cannot download bitstream image %s: %s'
                % (image_id, service.describe_error(exc)))
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        if not size:
            raise agent_rpcapi.BitstreamUnavailable(
                'Bitstream image %s has no data' % image_id)
        LOG.info('Downloaded bitstream image %s (%d bytes) in %.1f s',
                 image_id, size, time.monotonic() - started)

    def _report_on_a_thread(self):
        threading.Thread(target=self.report_inventory,
                         name='inventory-report-now', daemon=True).start()

    # -- the periodic report ------------------------------------------

    def discover(self):
        """This host's snapshot; raises if any driver fails.

        A snapshot without the devices of a failed driver would tell the
        conductor that they are gone, so no partial snapshot is made.
        """
        by_driver = {}
        unscrubbed = scrub.disabled_drivers(self.conf)
        for driver in self.drivers:
            try:
                by_driver[driver.name] = scrub.mark(
                    driver, driver.discover(), unscrubbed)
            except Exception as exc:
                raise DiscoveryFailed(driver.name, exc) from exc
        snapshot = inventory.HostInventory(
            hostname=self.conf.host,
            devices=[d for devices in by_driver.values() for d in devices])
        self._discovered = by_driver
        self.last_inventory = snapshot
        return snapshot

    def find_compute_node(self):
        """The names to report: the matched one alone, once found."""
        if self.compute_node is not None:
            return [self.compute_node.matched_name]
        names = [name for name, _label in self.candidates]
        if self.placement is None:
            return names
        # Logged outside the except blocks: oslo.log would append the
        # exception to the line again.
        try:
            found = placement_sync.find_compute_node(self.placement, names)
            problem = None
        except placement_sync.ComputeNodeNotFound as exc:
            problem = '%s Retrying at the next report.' % exc
        except (ks_exceptions.ClientException,
                placement_client.PlacementError) as exc:
            problem = ('cyborg-agent: waiting for Placement to find the '
                       'compute node: %s' % service.describe_error(exc))
        if problem is not None:
            LOG.warning(problem)
            return names
        labels = dict(self.candidates)
        LOG.info('Compute node resource provider %s found under %r, %s '
                 '(names tried: %s)', found.uuid, found.matched_name,
                 labels[found.matched_name],
                 ', '.join(repr(n) for n in found.names_tried))
        self.compute_node = found
        return [found.matched_name]

    def report_inventory(self):
        """Discover and report once; errors are logged, never raised."""
        with self._report_lock:
            return self._report_inventory()

    def _report_inventory(self):
        if (self.config_restore.pending or self.mig_restore.pending
                or self.mdev_restore.pending):
            self._restore_after_restart()
        try:
            snapshot = self.discover()
        except DiscoveryFailed as exc:
            LOG.error('%s; not reporting this time', exc)
            return None
        names = self.find_compute_node()
        # A call while RabbitMQ is down would block in oslo.messaging's
        # reconnect loop; a connect first lets the agent say so and skip.
        try:
            service.check_message_bus(self.conf)
            problem = None
        except ConnectionError as exc:
            problem = str(exc)
        if problem is not None:
            self._failed('cyborg-agent: waiting for %s to report: %s'
                         % (service.describe_message_bus(self.conf), problem))
            return None
        try:
            result = self._send_report(snapshot.to_dict(), names)
            problem = None
        except messaging.MessagingTimeout:
            problem = ('the conductor did not answer within %d s'
                       % self.conf.agent.report_timeout)
        except Exception as exc:
            problem = service.describe_error(exc)
        if problem is not None:
            self._failed('cyborg-agent: the report failed: %s; trying again '
                         'in %d s' % (problem,
                                      self.conf.agent.report_interval))
            return None
        if isinstance(result, dict):
            self.owner = result.get('owner')
            self.bindings = _bindings(result.pop('bindings', None))
        if self._last_failed or result != self.last_report:
            LOG.info('Reported %d devices to the conductor: %s',
                     len(snapshot.devices), result)
        else:
            LOG.debug('Reported %d devices, nothing changed',
                      len(snapshot.devices))
        self._last_failed = False
        self.last_report = result
        return result

    def _restore_after_restart(self):
        """Before a report, while not done: the device configuration
        applied again, then the mdevs and MIG instances of this host's
        binds put back after its restart (``config_restore``,
        ``mdev_restore``, ``mig_restore``), so that the report shows the
        devices as their policies and binds left them."""
        try:
            service.check_message_bus(self.conf)
        except ConnectionError:
            return  # the report says so
        if not self.config_restore.run(server=self.owner):
            # The VFs that mdevs and VF vGPUs live on may not be back.
            return
        self.mdev_restore.run(server=self.owner)
        self.mig_restore.run(server=self.owner)

    def _send_report(self, snapshot, names):
        """The owner's answer, or any conductor's if the owner is not
        known or does not answer."""
        owner = self.owner
        if owner is not None:
            timeout = min(self.conf.agent.report_timeout,
                          self.conf.service_down_time)
            try:
                return self.conductor.report_host_inventory(
                    self._context, snapshot, names, server=owner,
                    timeout=timeout)
            except messaging.MessagingTimeout:
                LOG.warning('cyborg-agent: conductor %s, the owner of this '
                            'host, did not answer within %d s; reporting to '
                            'any conductor', owner, timeout)
                self.owner = None
        return self.conductor.report_host_inventory(self._context, snapshot,
                                                    names)

    def observe(self):
        """``{address: health.Observation}`` of the devices of the last
        discovery, kept as ``last_observations``. A driver whose
        observation fails is left out (logged); the others still count.
        """
        observations = {}
        for driver in self.drivers:
            devices = self._discovered.get(driver.name)
            if not devices:
                continue
            try:
                for observation in driver.observe(devices):
                    observations[observation.address] = observation
            except Exception:
                LOG.exception('Driver %s failed to observe its devices',
                              driver.name)
        with self._config_unrestored_lock:
            unrestored = dict(self._config_unrestored)
        for address, why in unrestored.items():
            seen = observations.get(address)
            if seen is not None:
                observations[address] = health.Observation.of(
                    address, list(seen.findings) + [
                        health.Finding(health.UNHEALTHY, why)],
                    seen.usage, seen.observed_at)
        self.last_observations = observations
        return observations

    def heartbeat(self):
        """Tell the conductor that this agent is alive, with the health
        and usage of its devices; a cast that costs the conductor one
        UPDATE while no device's health changes. Skipped while RabbitMQ
        is down."""
        observations = self.observe()
        try:
            service.check_message_bus(self.conf)
        except ConnectionError as exc:
            LOG.debug('No heartbeat: %s', exc)
            return False
        health = {address: {'state': o.state, 'reason': o.reason}
                  for address, o in observations.items()}
        usage = {address: dict(o.usage, observed_at=o.observed_at)
                 for address, o in observations.items()}
        owner = self.owner
        if owner is not None:
            try:
                self._cast_heartbeat(health, usage, server=owner)
                return True
            except messaging.MessageDeliveryFailure as exc:
                LOG.warning('cyborg-agent: the heartbeat to conductor %s, '
                            'the owner of this host, failed (%s); sending '
                            'it to any conductor', owner,
                            service.describe_error(exc))
        self._cast_heartbeat(health, usage)
        return True

    def _cast_heartbeat(self, health, usage, server=None):
        self.conductor.agent_heartbeat(
            self._context, self.conf.host, cyborg_version.package_version(),
            agent_rpcapi.VERSION, server=server, health=health, usage=usage,
            sent_at=time.time())

    def _failed(self, message):
        self._last_failed = True
        LOG.warning(message)


class DiscoveryFailed(Exception):
    def __init__(self, driver_name, error):
        self.driver_name = driver_name
        super().__init__('Driver %s failed to discover devices: %s'
                         % (driver_name, service.describe_error(error)))


class TimeoutsDoNotFit(ValueError):
    """Timeouts of the configuration that contradict each other."""


def check_timeouts(conf):
    """The vendor tool must end before the conductor stops waiting for
    the program call, or a card is still written after its bind failed.
    The conductor's value is read from this host's configuration: keep
    [conductor] agent_program_timeout the same on every host. And a
    heartbeat must come before the agent counts as dead."""
    if conf.agent.heartbeat_interval >= conf.service_down_time:
        raise TimeoutsDoNotFit(
            '[agent] heartbeat_interval (%d s) must be shorter than '
            '[DEFAULT] service_down_time (%d s), after which an agent '
            'without a heartbeat counts as dead.'
            % (conf.agent.heartbeat_interval, conf.service_down_time))
    tool = conf.agent.program_tool_timeout
    call = conf.conductor.agent_program_timeout
    if tool >= call:
        raise TimeoutsDoNotFit(
            '[agent] program_tool_timeout (%d s) must be shorter than '
            '[conductor] agent_program_timeout (%d s), the time the '
            'conductor waits for a program call, which also downloads the '
            'bitstream.' % (tool, call))


def placement_from_conf(conf):
    """A Placement client if ``[placement]`` says where it is, else None."""
    if not (conf.placement.auth_type or conf.placement.endpoint_override):
        return None
    return placement_client.PlacementClient.from_conf(conf)


class AgentService(service.Service):
    """The agent's RPC server and its periodic report.

    ``transport`` is shared when given (the single-machine mode runs
    everything on one in-process transport); otherwise the service makes
    its own from ``[DEFAULT] transport_url`` and cleans it up on stop.
    ``glance`` is as for ``AgentManager``.
    """

    def __init__(self, conf, transport=None, placement=None,
                 glance=GLANCE_FROM_CONF):
        super().__init__('cyborg-agent', conf.agent.retry_interval)
        self.conf = conf
        self._shared_transport = transport
        self._placement = placement
        self._glance = glance
        self.manager = None
        self.report_task = None
        # Kept across restarts (SIGHUP); read at each scrape.
        self.metrics_registry = metrics_endpoint.service_registry()
        self.metrics_registry.register(agent_metrics.AgentCollector(
            conf.host, lambda: self.manager))
        self.metrics_endpoint = None

    def on_start(self):
        conf = self.conf
        check_timeouts(conf)
        # Up before the neighbours are: Prometheus sees the agent alive.
        self.metrics_endpoint = metrics_endpoint.serve(
            self, conf, conf.metrics.agent_port, self.metrics_registry)
        drivers = loader.load_drivers(conf, conf.agent.enabled_drivers,
                                      pci.PCIReader(conf.pci.sysfs_root))
        LOG.info('Accelerator drivers: %s',
                 ', '.join(d.name for d in drivers) or 'none')
        self.wait_for(service.describe_message_bus(conf),
                      lambda: service.check_message_bus(conf))
        if self.stopping:
            return
        transport = self._shared_transport
        if transport is None:
            transport = self.kept_transport(conf)
        placement = (self._placement if self._placement is not None
                     else placement_from_conf(conf))
        self.manager = AgentManager(
            conf, drivers,
            conductor_rpcapi.ConductorAPI(
                transport, timeout=conf.agent.report_timeout,
                version_cap=conf.upgrade_levels.conductor),
            placement, glance=self._glance)
        server = rpc.get_server(transport, rpc.AGENT_TOPIC, conf.host,
                                [self.manager])
        server.start()
        self.on_stop(service.stop_rpc_server, server)
        self.report_task = self.add_periodic(
            'inventory-report', conf.agent.report_interval,
            self.manager.report_inventory)
        self.add_periodic('heartbeat', conf.agent.heartbeat_interval,
                          self.manager.heartbeat)
        # A report asked for after programming joins the periodic one.
        self.manager.request_report = self.report_task.run_now

