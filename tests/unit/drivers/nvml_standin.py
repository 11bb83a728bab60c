"""A stand-in for libnvidia-ml that replays an NVML recording.

The real bindings (``pynvml`` of nvidia-ml-py) stay in place: every
``nvml*`` Python function runs as written, builds its ctypes structures
and checks the return code as it does on a real host. Only the library
below them is replaced: ``pynvml.nvmlLib`` becomes a ``RecordedNVML``,
whose attributes are the C entry points by their NVML names. Each fills
the ctypes objects it is passed from the current sample of the recording
and returns an NVML return code. Entry points the recording cannot answer
are missing, so the bindings raise ``NVML_ERROR_FUNCTION_NOT_FOUND`` for
them as for an older driver.

``inject_xid()`` queues an XID event; ``lose()`` makes a GPU answer
``NVML_ERROR_GPU_IS_LOST`` to everything; ``step()`` moves to the next
sample; ``override()`` changes fields of the samples from now on.
"""

import ctypes
import json
import threading

import pynvml

# The nvmlDevice* entry points whose first argument is no GPU handle.
NO_DEVICE_ARGUMENT = frozenset({'nvmlDeviceGetHandleByPciBusId_v2',
                                'nvmlDeviceGetHandleByIndex_v2',
                                'nvmlDeviceGetCount_v2'})

# Handles are opaque pointers NVML owns; these are never dereferenced.
HANDLE_BASE = 0x7f0000001000


def _bdf(text):
    """'00000000:00:06.0' or '0000:00:06.0' -> '0000:00:06.0'."""
    domain, bus, rest = text.lower().split(':')
    return '%04x:%s:%s' % (int(domain, 16), bus, rest)


def _set_pointer(by_reference, value):
    """Write a pointer value into the object ``byref()`` was given."""
    ctypes.c_void_p.from_buffer(by_reference._obj).value = value


def _value(argument):
    return getattr(argument, 'value', argument)


class RecordedNVML:
    """libnvidia-ml for one recorded GPU (more with ``add_gpu``)."""

    def __init__(self, record_path, driver_loaded=True):
        with open(record_path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        self.static = lines[0]['static']
        self.samples = lines[1:]
        self.index = 0
        self.driver_loaded = driver_loaded
        self.calls = []  # C entry points called, in order
        self._gpus = {}  # address -> handle value
        self._lost = set()
        self._overrides = {}
        self._events = []  # (handle value, xid) not yet read
        self._registered = set()  # handle values registered for XIDs
        # Callers may use NVML from several threads; one call at a time.
        self._lock = threading.RLock()
        self.add_gpu(_bdf(self.static['pci']['busId']))

    # What a test does.

    def add_gpu(self, address):
        self._gpus[address] = HANDLE_BASE + 0x100 * len(self._gpus)

    @property
    def sample(self):
        return {**self.samples[self.index], **self._overrides}

    def step(self):
        self.index += 1
        return self.index < len(self.samples)

    def override(self, **fields):
        self._overrides.update(fields)

    def inject_xid(self, address, xid):
        self._events.append((self._gpus[address], xid))

    def lose(self, address):
        self._lost.add(self._gpus[address])

    # The C entry points.

    def _gpu(self, handle):
        value = ctypes.cast(handle, ctypes.c_void_p).value
        if value not in self._gpus.values():
            return None, pynvml.NVML_ERROR_INVALID_ARGUMENT
        if value in self._lost:
            return None, pynvml.NVML_ERROR_GPU_IS_LOST
        return value, pynvml.NVML_SUCCESS

    def _handle_status(self, name, args):
        """NVML's answer to a call on an unknown or lost GPU, else
        NVML_SUCCESS; subclasses add the handles they know."""
        if name.startswith('nvmlDevice') and name not in NO_DEVICE_ARGUMENT:
            return self._gpu(args[0])[1]
        return pynvml.NVML_SUCCESS

    def _entry(function):
        """Log the call; answer for a lost or unknown handle first."""
        name = function.__name__

        def entry(self, *args):
            with self._lock:
                self.calls.append(name)
                status = self._handle_status(name, args)
                if status != pynvml.NVML_SUCCESS:
                    return status
                return function(self, *args)
        entry.__name__ = name
        entry.__wrapped__ = function  # for a subclass that extends it
        return entry

    @_entry
    def nvmlInitWithFlags(self, flags):
        if not self.driver_loaded:
            return pynvml.NVML_ERROR_DRIVER_NOT_LOADED
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlShutdown(self):
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, device):
        handle = self._gpus.get(_bdf(bus_id.value.decode()))
        if handle is None:
            return pynvml.NVML_ERROR_NOT_FOUND
        if handle in self._lost:
            return pynvml.NVML_ERROR_GPU_IS_LOST
        _set_pointer(device, handle)
        return pynvml.NVML_SUCCESS

    # Identity: the recorded GPU's; a GPU added by a test is numbered
    # after it, its UUID told apart by its last digits.
    def _index(self, handle):
        value = ctypes.cast(handle, ctypes.c_void_p).value
        return list(self._gpus.values()).index(value)

    def _uuid(self, handle):
        uuid, index = self.static['uuid'], self._index(handle)
        if index:
            uuid = uuid[:-4] + '%04x' % index
        return uuid

    @_entry
    def nvmlDeviceGetCount_v2(self, count):
        count._obj.value = len(self._gpus)
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetHandleByIndex_v2(self, index, device):
        handles = list(self._gpus.values())
        if not 0 <= _value(index) < len(handles):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        _set_pointer(device, handles[_value(index)])
        return pynvml.NVML_SUCCESS

    # PCI identity: the recorded GPU's ids; the address of each GPU.
    @_entry
    def nvmlDeviceGetPciInfo_v3(self, handle, info):
        value = ctypes.cast(handle, ctypes.c_void_p).value
        address = next(a for a, h in self._gpus.items() if h == value)
        domain, bus, rest = address.split(':')
        recorded = self.static['pci']
        out = info._obj
        out.busId = ('%08x:%s:%s' % (int(domain, 16), bus, rest)
                     ).upper().encode()
        out.domain, out.bus = int(domain, 16), int(bus, 16)
        out.device = int(rest.split('.')[0], 16)
        out.pciDeviceId = recorded['pciDeviceId']
        out.pciSubSystemId = recorded['pciSubSystemId']
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetIndex(self, handle, index):
        index._obj.value = self._index(handle)
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetUUID(self, handle, buffer, length):
        buffer.value = self._uuid(handle).encode()
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetName(self, handle, buffer, length):
        buffer.value = self.static['name'].encode()
        return pynvml.NVML_SUCCESS

    # MIG mode as recorded (off on the recorded H100); the MIG stand-in
    # serves the modes and devices of a card in MIG mode.
    @_entry
    def nvmlDeviceGetMigMode(self, handle, current, pending):
        current._obj.value, pending._obj.value = self.static['mig_mode']
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetMaxMigDeviceCount(self, handle, count):
        count._obj.value = self.static['max_mig_devices']
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetUtilizationRates(self, handle, utilization):
        utilization._obj.gpu = self.sample['gpu_util']
        utilization._obj.memory = self.sample['mem_util']
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetMemoryInfo(self, handle, memory):
        total, used = self.sample['fb_total'], self.sample['fb_used']
        memory._obj.total = total
        memory._obj.used = used
        memory._obj.free = total - used
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetPowerUsage(self, handle, milliwatts):
        milliwatts._obj.value = self.sample['power_mw']
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetTemperature(self, handle, sensor, celsius):
        if _value(sensor) != pynvml.NVML_TEMPERATURE_GPU:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        celsius._obj.value = self.sample['temp_c']
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetTemperatureThreshold(self, handle, threshold, celsius):
        for name, value in self.static['temp_thresholds'].items():
            if getattr(pynvml, name) == _value(threshold):
                celsius._obj.value = value
                return pynvml.NVML_SUCCESS
        return pynvml.NVML_ERROR_NOT_SUPPORTED

    @_entry
    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type,
                                    count):
        field = {
            (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
             pynvml.NVML_VOLATILE_ECC): 'ecc_unc_volatile',
            (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
             pynvml.NVML_AGGREGATE_ECC): 'ecc_unc_aggregate',
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
             pynvml.NVML_VOLATILE_ECC): 'ecc_cor_volatile',
        }.get((_value(error_type), _value(counter_type)))
        if field is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        count._obj.value = self.sample[field]
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceGetRemappedRows(self, handle, correctable, uncorrectable,
                                  pending, failure):
        for out, value in zip((correctable, uncorrectable, pending, failure),
                              self.sample['remapped_rows'], strict=True):
            out._obj.value = value
        return pynvml.NVML_SUCCESS

    # vGPUs: the recorded host runs no vGPU manager.
    @_entry
    def nvmlDeviceGetActiveVgpus(self, handle, count, instances):
        return pynvml.NVML_ERROR_NOT_SUPPORTED

    @_entry
    def nvmlDeviceGetVgpuUtilization(self, handle, since, value_type, count,
                                     samples):
        return pynvml.NVML_ERROR_NOT_SUPPORTED

    # XID events: the recorded GPU supports them; a wait with nothing
    # queued times out, as it did there.
    @_entry
    def nvmlEventSetCreate(self, event_set):
        _set_pointer(event_set, HANDLE_BASE - 0x100)
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        if not _value(event_types) & pynvml.nvmlEventTypeXidCriticalError:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        self._registered.add(ctypes.cast(handle, ctypes.c_void_p).value)
        return pynvml.NVML_SUCCESS

    @_entry
    def nvmlEventSetWait_v2(self, event_set, data, timeout_ms):
        while self._events:
            handle, xid = self._events.pop(0)
            if handle not in self._registered:
                continue  # nobody asked: NVML drops it
            _set_pointer(data, handle)  # device, the first field
            data._obj.eventType = pynvml.nvmlEventTypeXidCriticalError
            data._obj.eventData = xid
            return pynvml.NVML_SUCCESS
        return pynvml.NVML_ERROR_TIMEOUT

    @_entry
    def nvmlEventSetFree(self, event_set):
        return pynvml.NVML_SUCCESS

    _entry = staticmethod(_entry)  # for subclasses' entry points


def install(monkeypatch, library):
    """Put ``library`` under the real bindings for one test."""
    monkeypatch.setattr(pynvml, 'nvmlLib', library)
    monkeypatch.setattr(pynvml, '_nvmlGetFunctionPointer_cache', {})
    return library
