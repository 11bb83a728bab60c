"""NVIDIA GPUs as NVML sees them: health and usage, a few µs a GPU.

NVML comes with the NVIDIA driver (``libnvidia-ml.so.1``); its Python
bindings are the module ``pynvml`` of the PyPI package ``nvidia-ml-py``,
an optional dependency (``pip install cyborg[nvidia]``). The module is
imported on the first observation, and NVML started once. Without the
bindings or without a driver every GPU is ``unknown`` with that reason;
nothing here raises to the caller.

What is judged, per GPU (found by its PCI address):

- lost to NVML (``NVML_ERROR_GPU_IS_LOST``): unhealthy;
- critical XID events, collected without waiting (an event set polled with
  a timeout of 0 at each observation). NVIDIA lists some XIDs as caused by
  the application, not the GPU (``APPLICATION_XIDS``): they are logged and
  ignored. Any other critical XID makes the GPU unhealthy from then on:
  the faults it reports need a GPU reset, after which the agent, and this
  observer, start afresh. Each XID number is named once in the reason
  however often it recurs, the last ``MAX_XIDS_NAMED`` distinct ones at
  most, so that the reason a heartbeat carries changes only when a new
  kind of fault appears;
- uncorrectable ECC errors since the driver loaded (volatile count):
  unhealthy;
- row remapping: a failure is unhealthy, a remap pending (it takes effect
  at the next reset) is degraded;
- a temperature at or above the slowdown threshold: degraded.

Usage: GPU and memory utilisation (percent over NVML's last sample
period), framebuffer used, free and total (bytes), power (mW), temperature
(°C), remapped rows (counts, and whether a remap is pending or failed), the
last XID the GPU reported (0 for none, application XIDs included), and for
each active vGPU what NVML gives per instance (mdev UUID, framebuffer
used, SM/memory/encoder/decoder utilisation with the time of its sample).
The GPU's NVML identity comes with it: ``gpu_index``, ``gpu_uuid`` and
``gpu_name``, read once per GPU. Calls a GPU does not support are left
out.
"""

import ctypes
import importlib
import logging
import threading

from cyborg.accelerator.drivers import health

LOG = logging.getLogger(__name__)

# XIDs NVIDIA documents as caused by the application (a bad kernel, a
# program that was killed), not by the GPU.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

# Distinct critical XIDs named in a GPU's reason: a GPU that reports
# more kinds of fault than this is unhealthy all the same.
MAX_XIDS_NAMED = 8

# Names of the XIDs an operator most often meets, for the reason text.
XID_NAMES = {
    48: 'double-bit ECC error',
    61: 'internal micro-controller breakpoint',
    62: 'internal micro-controller halt',
    63: 'ECC page retirement or row remapping recorded',
    64: 'ECC page retirement or row remapping failed',
    74: 'NVLink error',
    79: 'GPU has fallen off the bus',
    92: 'high single-bit ECC error rate',
    94: 'contained ECC error',
    95: 'uncontained ECC error',
    119: 'GSP RPC timeout',
    120: 'GSP error',
}

# Events read from the event set at most, per observation.
MAX_EVENTS = 256

NOT_INSTALLED = ('the NVML bindings (Python package nvidia-ml-py) are not '
                 'installed')


class _Lost(Exception):
    """NVML says the GPU is lost."""


def _key(handle):
    """A handle as a number, to find the GPU an event is about."""
    return ctypes.cast(handle, ctypes.c_void_p).value


class NVMLObserver:
    """One NVML session for the GPUs of a driver; safe across threads."""

    def __init__(self, module_name='pynvml'):
        self._module_name = module_name
        self._lock = threading.Lock()
        self._nvml = None
        self._not_installed = False
        self._handles = {}  # address -> handle
        self._addresses = {}  # _key(handle) -> address
        self._slowdown = {}  # address -> °C, or None where unsupported
        self._events = None  # the event set, None where unsupported
        # address -> {critical XID: None}, distinct, first seen first
        self._xids = {}
        self._last_xid = {}  # address -> the last XID of any kind
        self._identity = {}  # address -> {gpu_index, gpu_uuid, gpu_name}
        self._vgpu_stamps = {}  # address -> time stamp of the last sample
        self._mig_profiles = {}  # address -> {GPU instance profile id: name}

    def _start(self):
        """The reason NVML cannot be used, or None once it is started."""
        if self._nvml is not None:
            return None
        if self._not_installed:
            return NOT_INSTALLED
        try:
            nvml = importlib.import_module(self._module_name)
        except ImportError:
            self._not_installed = True
            return NOT_INSTALLED
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            # No driver yet: tried again at the next observation.
            return 'NVML cannot start: %s' % e
        self._nvml = nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as e:
            LOG.warning('NVML gives no XID events: %s', e)
        return None

    def observe(self, address):
        """(findings, usage) of the GPU at ``address`` now."""
        with self._lock:
            reason = self._start()
            if reason:
                return [health.Finding(health.UNKNOWN, reason)], {}
            try:
                handle = self._handle(address)
            except _Lost:
                return [self._lost(address)], {}
            except self._nvml.NVMLError as e:
                if e.value == self._nvml.NVML_ERROR_NOT_FOUND:
                    return [health.Finding(
                        health.UNKNOWN, 'NVML does not see %s' % address)], {}
                return [health.Finding(
                    health.UNKNOWN, 'NVML cannot find %s: %s'
                    % (address, e))], {}
            self._drain_events()
            try:
                findings, usage = self._read(address, handle)
            except _Lost:
                return [self._lost(address)], {}
            findings += [health.Finding(health.UNHEALTHY, _xid_reason(xid))
                         for xid in self._xids.get(str(address), ())]
            return findings, usage

    def _lost(self, address):
        # A new handle is needed once the GPU is back (after a reset).
        handle = self._handles.pop(str(address), None)
        if handle is not None:
            self._addresses.pop(_key(handle), None)
        self._identity.pop(str(address), None)
        return health.Finding(health.UNHEALTHY,
                              'NVML has lost the GPU at %s' % address)

    def _call(self, findings, function, *args):
        """``function(*args)``; None where the GPU does not support it."""
        nvml = self._nvml
        try:
            return function(*args)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_GPU_IS_LOST:
                raise _Lost()
            if e.value not in (nvml.NVML_ERROR_NOT_SUPPORTED,
                               nvml.NVML_ERROR_NO_PERMISSION):
                findings.append(health.Finding(
                    health.UNKNOWN, '%s failed: %s' % (function.__name__, e)))
            return None

    def _handle(self, address):
        key = str(address)
        handle = self._handles.get(key)
        if handle is not None:
            return handle
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(key)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_GPU_IS_LOST:
                raise _Lost()
            raise
        self._handles[key] = handle
        self._addresses[_key(handle)] = key
        if self._events is not None:
            try:
                nvml.nvmlDeviceRegisterEvents(
                    handle, nvml.nvmlEventTypeXidCriticalError, self._events)
            except nvml.NVMLError as e:
                LOG.warning('No XID events from the GPU at %s: %s', key, e)
        return handle

    def _drain_events(self):
        """Take the XID events that happened since the last look."""
        if self._events is None:
            return
        nvml = self._nvml
        for _ in range(MAX_EVENTS):
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError as e:
                if e.value != nvml.NVML_ERROR_TIMEOUT:
                    LOG.warning('Reading NVML events failed: %s', e)
                return
            if not event.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            address = self._addresses.get(_key(event.device))
            xid = event.eventData
            if address is not None:
                self._last_xid[address] = xid
            if xid in APPLICATION_XIDS:
                LOG.info('XID %d on GPU %s, caused by an application',
                         xid, address)
                continue
            LOG.error('%s on GPU %s', _xid_reason(xid), address)
            if address is not None:
                _note(self._xids.setdefault(address, {}), xid)

    def _read(self, address, handle):
        nvml = self._nvml
        findings = []
        usage = dict(self._gpu_identity(findings, address, handle))
        utilization = self._call(findings, nvml.nvmlDeviceGetUtilizationRates,
                                 handle)
        if utilization is not None:
            usage['gpu_util_percent'] = utilization.gpu
            usage['memory_util_percent'] = utilization.memory
        memory = self._call(findings, nvml.nvmlDeviceGetMemoryInfo, handle)
        if memory is not None:
            usage['fb_used_bytes'] = memory.used
            usage['fb_free_bytes'] = memory.free
            usage['fb_total_bytes'] = memory.total
        power = self._call(findings, nvml.nvmlDeviceGetPowerUsage, handle)
        if power is not None:
            usage['power_mw'] = power
        temperature = self._call(findings, nvml.nvmlDeviceGetTemperature,
                                 handle, nvml.NVML_TEMPERATURE_GPU)
        if temperature is not None:
            usage['temperature_c'] = temperature
            slowdown = self._slowdown_threshold(findings, address, handle)
            if slowdown and temperature >= slowdown:
                findings.append(health.Finding(
                    health.DEGRADED, 'GPU at %d °C, at or above its slowdown '
                    'threshold %d °C' % (temperature, slowdown)))
        ecc = self._call(findings, nvml.nvmlDeviceGetTotalEccErrors, handle,
                         nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                         nvml.NVML_VOLATILE_ECC)
        if ecc:
            findings.append(health.Finding(
                health.UNHEALTHY, '%d uncorrectable ECC errors since the '
                'driver loaded' % ecc))
        rows = self._call(findings, nvml.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            correctable, uncorrectable, pending, failure = rows
            usage.update({'remapped_rows_correctable': correctable,
                          'remapped_rows_uncorrectable': uncorrectable,
                          'row_remap_pending': int(bool(pending)),
                          'row_remap_failure': int(bool(failure))})
            if failure:
                findings.append(health.Finding(
                    health.UNHEALTHY, 'row remapping failed'))
            elif pending:
                findings.append(health.Finding(
                    health.DEGRADED, 'a row remap is pending until the next '
                    'GPU reset'))
        usage['last_xid'] = self._last_xid.get(str(address), 0)
        vgpus = self._vgpus(findings, address, handle)
        if vgpus:
            usage['vgpus'] = vgpus
        migs = self._mig_devices(findings, handle)
        if migs:
            usage['mig_instances'] = migs
        return findings, usage

    def _gpu_identity(self, findings, address, handle):
        """NVML's index, UUID and product name of the GPU; they do not
        change while the handle lives, so they are read once."""
        key = str(address)
        identity = self._identity.get(key)
        if identity is None:
            nvml = self._nvml
            identity = {}
            for name, function in (('gpu_index', nvml.nvmlDeviceGetIndex),
                                   ('gpu_uuid', nvml.nvmlDeviceGetUUID),
                                   ('gpu_name', nvml.nvmlDeviceGetName)):
                value = self._call(findings, function, handle)
                if value is not None:
                    identity[name] = value
            if len(identity) == 3:
                self._identity[key] = identity
        return identity

    def _slowdown_threshold(self, findings, address, handle):
        key = str(address)
        if key not in self._slowdown:
            self._slowdown[key] = self._call(
                findings, self._nvml.nvmlDeviceGetTemperatureThreshold,
                handle, self._nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        return self._slowdown[key]

    def _vgpus(self, findings, address, handle):
        """Per-instance usage of the active vGPUs of a GPU, if any."""
        nvml = self._nvml
        instances = self._call(findings, nvml.nvmlDeviceGetActiveVgpus,
                               handle)
        if not instances:
            return []
        by_instance = {}
        for instance in instances:
            entry = {'instance': int(instance)}
            uuid = self._call(findings, nvml.nvmlVgpuInstanceGetMdevUUID,
                              instance)
            if uuid:
                entry['mdev_uuid'] = uuid
            fb_used = self._call(findings, nvml.nvmlVgpuInstanceGetFbUsage,
                                 instance)
            if fb_used is not None:
                entry['fb_used_bytes'] = fb_used
            by_instance[int(instance)] = entry
        key = str(address)
        samples = self._call(findings, nvml.nvmlDeviceGetVgpuUtilization,
                             handle, self._vgpu_stamps.get(key, 0)) or []
        for sample in samples:
            entry = by_instance.get(int(sample.vgpuInstance))
            if entry is None:
                continue
            entry.update({
                'sm_util_percent': sample.smUtil.uiVal,
                'memory_util_percent': sample.memUtil.uiVal,
                'encoder_util_percent': sample.encUtil.uiVal,
                'decoder_util_percent': sample.decUtil.uiVal,
                # NVML stamps samples in µs since the epoch.
                'sampled_at': sample.timeStamp / 1e6})
            self._vgpu_stamps[key] = max(self._vgpu_stamps.get(key, 0),
                                         sample.timeStamp)
        return [by_instance[i] for i in sorted(by_instance)]


    def _mig_devices(self, findings, handle):
        """Per-instance memory of the MIG devices of a GPU in MIG mode,
        by GPU and compute instance. NVML gives no utilisation for a MIG
        device (only GPM samples would, on Hopper and later)."""
        nvml = self._nvml
        mode = self._call(findings, nvml.nvmlDeviceGetMigMode, handle)
        if not mode or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
            return []
        count = self._call(findings, nvml.nvmlDeviceGetMaxMigDeviceCount,
                           handle) or 0
        found = []
        for index in range(count):
            # Indexes with no MIG device answer NOT_FOUND: skipped.
            device = self._call(findings, _mig_device_at, nvml, handle,
                                index)
            if device is None:
                continue
            entry = {}
            for name, function in (
                    ('gi_id', nvml.nvmlDeviceGetGpuInstanceId),
                    ('ci_id', nvml.nvmlDeviceGetComputeInstanceId),
                    ('mig_uuid', nvml.nvmlDeviceGetUUID)):
                value = self._call(findings, function, device)
                if value is not None:
                    entry[name] = value
            profile = self._mig_profile(findings, handle, entry.get('gi_id'))
            if profile is not None:
                entry['profile'] = profile
            memory = self._call(findings, nvml.nvmlDeviceGetMemoryInfo,
                                device)
            if memory is not None:
                entry.update(fb_used_bytes=memory.used,
                             fb_free_bytes=memory.free,
                             fb_total_bytes=memory.total)
            found.append(entry)
        return sorted(found, key=lambda e: (e.get('gi_id', -1),
                                            e.get('ci_id', -1)))


    def _mig_profile(self, findings, handle, gi_id):
        """The profile name (``3g.40gb``) of GPU instance ``gi_id``."""
        if gi_id is None:
            return None
        nvml = self._nvml
        instance = self._call(findings, nvml.nvmlDeviceGetGpuInstanceById,
                              handle, gi_id)
        info = (self._call(findings, nvml.nvmlGpuInstanceGetInfo, instance)
                if instance is not None else None)
        if info is None:
            return None
        key = self._addresses.get(_key(handle))
        names = self._mig_profiles.get(key)
        if names is None:
            # The card's profiles do not change: read once.
            names = self._mig_profiles[key] = {}
            for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
                found = self._call(
                    [], nvml.nvmlDeviceGetGpuInstanceProfileInfo, handle,
                    index)
                if found is not None:
                    name = found.name
                    if isinstance(name, bytes):
                        name = name.decode()
                    names[found.id] = name.removeprefix('MIG ')
        return names.get(info.profileId)


def _mig_device_at(nvml, handle, index):
    """The MIG device at ``index`` of the GPU, or None where there is
    none."""
    try:
        return nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
    except nvml.NVMLError as e:
        if e.value == nvml.NVML_ERROR_NOT_FOUND:
            return None
        raise


def _note(seen, xid):
    """Add ``xid`` to ``seen``, a GPU's distinct XIDs in the order first
    seen (one seen again keeps its place, so the reason stays the same);
    the first seen goes once there are more than ``MAX_XIDS_NAMED``."""
    if xid in seen:
        return
    seen[xid] = None
    if len(seen) > MAX_XIDS_NAMED:
        del seen[next(iter(seen))]


def _xid_reason(xid):
    name = XID_NAMES.get(xid)
    return 'critical XID %d%s' % (xid, ' (%s)' % name if name else '')
