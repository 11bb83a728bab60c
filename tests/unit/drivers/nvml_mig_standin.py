"""A stand-in for libnvidia-ml with the MIG behaviour of an H100 80GB.

``MIGCapableNVML`` extends the replay of the H100's NVML recording
(``nvml_standin.RecordedNVML``) with the C entry points of MIG: MIG mode,
GPU-instance (GI) profiles, placements and capacity, creating and
destroying GPU and compute instances (CI), and MIG device handles. As
there, the real bindings build the ctypes structures and check the return
codes; the entry points read and write them at the addresses they are
given, as C does, and refuse (TypeError) an argument C would misread: a
structure or number passed by value where NVML takes a pointer.

Where the answers come from:

- profile info: the recorded card (``mig_profiles`` of the recording's
  static line: id, slices, instances, memory and SMs by profile index) and
  its ``nvidia-smi mig -lgip`` (``device_config/data/h100-mig-lgip.txt``:
  copy engines, decoders, encoders, JPEG, OFA, P2P);
- allowed starts, memory and compute slices, max instances and the media
  engine: ``cyborg.device_config.mig``. A GI takes its profile's memory
  slices from its start and as many compute slices from the same start;
  two GIs may share neither, and one media-engine set serves the card
  (1g.10gb+me and 7g.80gb use it).

The stand-in's own choices, which the service must not rely on:

- GI ids: the lowest unused from 1, 0 for the GI that spans the card
  (7g.80gb). A real card numbers them its own way; the service records
  the ids NVML returns and never assumes any. CI ids are 0 in their GI.
- ``nvmlDeviceCreateGpuInstance`` (no placement) takes the lowest allowed
  start that is free; NVML does not document its order.
- A GI offers only its full-size compute profile and holds one CI; a
  real GI also offers smaller ones (``1c.3g.40gb`` ...).
- MIG device handles are indexed in the order of GI id, then CI id; an
  index with no MIG device answers NVML_ERROR_NOT_FOUND, MIG on or off.
- A MIG device's UUID is derived from its GPU's UUID, GI id, CI id and a
  count of the CIs created on that GPU: stable while the CI lives, new
  when it is created again, as on a real card.
- A MIG device handle is accepted by the calls in ``MIG_DEVICE_CALLS``;
  every other ``nvmlDevice*`` call answers it NVML_ERROR_INVALID_ARGUMENT
  (a real card answers some queries for it, others NOT_SUPPORTED), as do
  the MIG-device queries for a GPU handle and any call with the handle of
  a destroyed instance.
- Profile info is answered with MIG disabled too, as the recorded card
  did (``nvml.h`` documents NOT_SUPPORTED there); placements, capacity,
  creating and listing instances answer NVML_ERROR_NOT_SUPPORTED.
- With MIG enabled, the GPU's utilization rates are NOT_SUPPORTED, as
  ``nvml.h`` says; a MIG device's memory is its GI's, none of it used.

A test uses ``run_process()``/``end_process()`` to put a process on a CI
(destroying it is then NVML_ERROR_IN_USE), ``lose_instances()`` for a
host reboot (instances gone, MIG mode kept), ``set_mig_mode()`` and
``instances()`` to see what a GPU holds.
"""

import collections
import ctypes
import dataclasses
import itertools
import pathlib
import re
import uuid

import pynvml

from cyborg.device_config import mig
from tests.unit.drivers import nvml_standin

Recorded = nvml_standin.RecordedNVML

LGIP = (pathlib.Path(__file__).resolve().parents[1] / 'device_config'
        / 'data' / 'h100-mig-lgip.txt')

# Opaque handles of instances and MIG devices, apart from the GPUs'.
GI_HANDLE_BASE = 0x7f1000000000
CI_HANDLE_BASE = 0x7f2000000000
MIG_HANDLE_BASE = 0x7f3000000000

# A GI's full-size compute profile (its index, which is also its id) by
# the GI's compute slices.
CI_PROFILE_OF_SLICES = {
    1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

# The nvmlDevice* calls that take a MIG device handle.
MIG_DEVICE_CALLS = frozenset({
    'nvmlDeviceGetUUID', 'nvmlDeviceGetMemoryInfo',
    'nvmlDeviceGetGpuInstanceId', 'nvmlDeviceGetComputeInstanceId',
    'nvmlDeviceIsMigDeviceHandle',
    'nvmlDeviceGetDeviceHandleFromMigDeviceHandle',
})

# nvmlErrorString for the codes the bindings have no text of.
ERROR_STRINGS = {
    pynvml.NVML_ERROR_IN_USE: 'In use by another client',
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: 'Insufficient Resources',
}

SUCCESS = pynvml.NVML_SUCCESS
INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
INSUFFICIENT_RESOURCES = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES

# What instances() lists: one GI with its CIs and their MIG UUIDs.
Instance = collections.namedtuple('Instance',
                                  'gi_id profile start ci_ids uuids')


@dataclasses.dataclass(frozen=True)
class GIProfile:
    """A GPU-instance profile as the recorded card reports it."""
    index: int  # NVML_GPU_INSTANCE_PROFILE_*
    id: int
    slice_count: int
    instance_count: int
    memory_mb: int
    multiprocessors: int
    p2p: bool
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int
    table: mig.Profile  # starts, memory and compute slices, media engine

    @property
    def name(self):
        return self.table.name

    @property
    def ci_profile(self):
        return CI_PROFILE_OF_SLICES[self.slice_count]


def lgip_engines(path=LGIP):
    """{profile name: (P2P, CE, DEC, ENC, JPEG, OFA)} of ``nvidia-smi mig
    -lgip``, whose rows are two lines each."""
    rows = re.findall(
        r'^\|\s+\d+\s+MIG (\S+)\s+\d+\s+\d+/\d+\s+[\d.]+\s+(\w+)\s+\d+'
        r'\s+(\d+)\s+(\d+)\s+\|\n\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|',
        path.read_text(), re.M)
    return {name: (p2p == 'Yes', int(ce), int(dec), int(enc), int(jpeg),
                   int(ofa))
            for name, p2p, dec, enc, ce, jpeg, ofa in rows}


def load_profiles(static, card):
    """{profile index: GIProfile} of a recording's static line."""
    engines = lgip_engines()
    profiles = {}
    for index, answer in static['mig_profiles'].items():
        [table] = [p for p in card.profiles
                   if p.gi_profile_id == answer['id']]
        if (answer['slices'], answer['instances']) != (
                table.compute_slices, table.max_instances):
            raise ValueError('The recording and the MIG table disagree on '
                             '%s.' % table.name)
        profiles[int(index)] = GIProfile(
            int(index), answer['id'], answer['slices'], answer['instances'],
            answer['memory_mb'], answer['sm'], *engines[table.name],
            table=table)
    return profiles


def _int(argument):
    return getattr(argument, 'value', argument)


def _handle(argument):
    """The value of an opaque handle argument."""
    return ctypes.cast(argument, ctypes.c_void_p).value


def _pointer(argument):
    """(address, size of the buffer there where ctypes knows it) of a
    pointer argument; (None, None) for NULL."""
    if argument is None:
        return None, None
    if isinstance(argument, ctypes.Array):  # decays to a pointer, as in C
        return ctypes.addressof(argument), ctypes.sizeof(argument)
    if isinstance(argument, ctypes._Pointer):
        return ctypes.cast(argument, ctypes.c_void_p).value, None
    target = getattr(argument, '_obj', None)  # byref()
    if target is not None:
        return ctypes.addressof(target), ctypes.sizeof(target)
    raise TypeError('NVML takes a pointer here, not %r' % (argument,))


def _at(argument, ctype, index=0):
    """Item ``index`` of the ``ctype`` array a pointer argument points to;
    None for NULL. Never past the end of a buffer ctypes knows."""
    address, size = _pointer(argument)
    if address is None:
        return None
    if size is not None and (index + 1) * ctypes.sizeof(ctype) > size:
        raise IndexError('NVML would write past the %d bytes given' % size)
    return ctype.from_address(address + index * ctypes.sizeof(ctype))


def _slices(start, count):
    return set(range(start, start + count))


@dataclasses.dataclass(eq=False)
class _GpuInstance:
    gpu: int  # the parent GPU's handle
    id: int
    profile: GIProfile
    start: int
    handle: int
    cis: dict = dataclasses.field(default_factory=dict)  # id -> CI

    @property
    def memory(self):
        return _slices(self.start, self.profile.table.memory_slices)

    @property
    def compute(self):
        return _slices(self.start, self.profile.table.compute_slices)


@dataclasses.dataclass(eq=False)
class _ComputeInstance:
    gi: _GpuInstance
    id: int
    handle: int
    device: int  # its MIG device handle
    uuid: str
    processes: set = dataclasses.field(default_factory=set)

    @property
    def gpu(self):
        return self.gi.gpu


@dataclasses.dataclass(eq=False)
class _Card:
    """What one GPU holds."""
    mode: list  # [current, pending]
    gis: dict = dataclasses.field(default_factory=dict)  # id -> GI
    created: int = 0  # CIs created so far: each gets a new UUID


class _ErrorString:
    """``nvmlErrorString``: the bindings set ``restype`` on it, which a
    bound method does not take."""

    def __call__(self, result):
        return ERROR_STRINGS.get(_int(result), 'Unknown Error').encode()


class MIGCapableNVML(Recorded):
    """The H100's recording, its GPUs MIG-capable; MIG mode on for every
    GPU unless ``mig_enabled`` is false (then as recorded: off)."""

    _entry = Recorded._entry
    nvmlErrorString = _ErrorString()

    def __init__(self, record_path, mig_enabled=True, **kw):
        self._mig_enabled = mig_enabled
        self._cards = {}  # GPU handle -> _Card
        self._gis = {}  # GI handle -> _GpuInstance
        self._cis = {}  # CI handle -> _ComputeInstance
        self._mig_devices = {}  # MIG device handle -> _ComputeInstance
        self._new_handles = itertools.count(1)
        super().__init__(record_path, **kw)
        pci_ids = self.static['pci']['pciDeviceId']
        self.card = mig.card_of('%04x' % (pci_ids & 0xffff),
                                '%04x' % (pci_ids >> 16))
        self.profiles = load_profiles(self.static, self.card)
        self._by_id = {p.id: p for p in self.profiles.values()}

    # What a test does.

    def add_gpu(self, address, mig_enabled=None):
        super().add_gpu(address)
        if mig_enabled is None:
            mig_enabled = self._mig_enabled
        mode = [1, 1] if mig_enabled else list(self.static['mig_mode'])
        self._cards[self._gpus[address]] = _Card(mode)

    def set_mig_mode(self, address, current, pending=None):
        """The mode after the last GPU reset (``current``) and for the
        next (``pending``, by default the same); a new current mode
        leaves no instances."""
        with self._lock:
            card = self._card_at(address)
            if int(current) != card.mode[0]:
                self._drop(card)
            card.mode = [int(current),
                         int(current if pending is None else pending)]

    def lose_instances(self, address):
        """Every GPU and compute instance of the GPU gone, as after a host
        reboot; MIG mode stays."""
        with self._lock:
            self._drop(self._card_at(address))

    def instances(self, address):
        """[Instance] of the GPU, by GI id."""
        with self._lock:
            card = self._card_at(address)
            return [Instance(gi.id, gi.profile.name, gi.start,
                             tuple(sorted(gi.cis)),
                             tuple(gi.cis[i].uuid for i in sorted(gi.cis)))
                    for _, gi in sorted(card.gis.items())]

    def run_process(self, address, gi_id, ci_id, pid):
        with self._lock:
            self._card_at(address).gis[gi_id].cis[ci_id].processes.add(pid)

    def end_process(self, address, gi_id, ci_id, pid):
        with self._lock:
            self._card_at(address).gis[gi_id].cis[ci_id].processes.remove(
                pid)

    def state(self):
        """What the GPUs hold, as JSON: their MIG modes and instances
        (ids, profiles, starts, MIG UUIDs, processes), for ``restore``
        in another process (a playbook's module), as a card keeps them
        between programs."""
        with self._lock:
            return {address: {
                'mode': list(card.mode), 'created': card.created,
                'gis': [{'id': gi.id, 'profile': gi.profile.name,
                         'start': gi.start,
                         'cis': [{'id': ci.id, 'uuid': ci.uuid,
                                  'processes': sorted(ci.processes)}
                                 for _, ci in sorted(gi.cis.items())]}
                        for _, gi in sorted(card.gis.items())]}
                for address, handle in sorted(self._gpus.items())
                for card in [self._cards[handle]]}

    def restore(self, state):
        """Make the GPUs hold what ``state()`` answered (GPUs it names
        that are not here are added); handles of instances are new."""
        by_name = {p.name: p for p in self.profiles.values()}
        with self._lock:
            for address, held in state.items():
                if address not in self._gpus:
                    self.add_gpu(address)
                card = self._card_at(address)
                self._drop(card)
                card.mode = list(held['mode'])
                card.created = held['created']
                device = self._gpus[address]
                for kept in held['gis']:
                    gi = _GpuInstance(device, kept['id'],
                                      by_name[kept['profile']],
                                      kept['start'],
                                      self._new_handle(GI_HANDLE_BASE))
                    card.gis[gi.id] = gi
                    self._gis[gi.handle] = gi
                    for ci_kept in kept['cis']:
                        ci = _ComputeInstance(
                            gi, ci_kept['id'],
                            self._new_handle(CI_HANDLE_BASE),
                            self._new_handle(MIG_HANDLE_BASE),
                            ci_kept['uuid'], set(ci_kept['processes']))
                        gi.cis[ci.id] = ci
                        self._cis[ci.handle] = ci
                        self._mig_devices[ci.device] = ci

    def _card_at(self, address):
        return self._cards[self._gpus[address]]

    def _drop(self, card):
        for gi in card.gis.values():
            for ci in gi.cis.values():
                del self._cis[ci.handle], self._mig_devices[ci.device]
            del self._gis[gi.handle]
        card.gis.clear()

    # Handles.

    def _handle_status(self, name, args):
        if name.startswith('nvmlGpuInstance'):
            return self._owner_status(self._gis.get(_handle(args[0])))
        if name.startswith('nvmlComputeInstance'):
            return self._owner_status(self._cis.get(_handle(args[0])))
        if (name.startswith('nvmlDevice')
                and name not in nvml_standin.NO_DEVICE_ARGUMENT):
            ci = self._mig_devices.get(_handle(args[0]))
            if ci is not None:
                if name not in MIG_DEVICE_CALLS:
                    return INVALID_ARGUMENT
                return self._owner_status(ci)
        return super()._handle_status(name, args)

    def _owner_status(self, instance):
        """An instance's handle is good while it exists and its GPU is."""
        if instance is None:
            return INVALID_ARGUMENT
        if instance.gpu in self._lost:
            return pynvml.NVML_ERROR_GPU_IS_LOST
        return SUCCESS

    def _new_handle(self, base):
        return base + 0x10 * next(self._new_handles)

    def _card(self, device):
        return self._cards[_handle(device)]

    # MIG mode and profiles.

    @_entry
    def nvmlDeviceGetMigMode(self, device, current, pending):
        if current is None or pending is None:
            return INVALID_ARGUMENT
        mode = self._card(device).mode
        _at(current, ctypes.c_uint).value = mode[0]
        _at(pending, ctypes.c_uint).value = mode[1]
        return SUCCESS

    @_entry
    def nvmlDeviceSetMigMode(self, device, mode, activation_status):
        """The new mode is pending until the GPU is reset, which the
        stand-in never is (``set_mig_mode`` plays a reset): the GPU
        answers NVML_ERROR_RESET_REQUIRED as its activation status, as a
        GPU that cannot be reset in place does. A GPU holding instances
        refuses the change (NVML_ERROR_IN_USE)."""
        if activation_status is None or _int(mode) not in (0, 1):
            return INVALID_ARGUMENT
        card = self._card(device)
        if card.gis:
            return pynvml.NVML_ERROR_IN_USE
        card.mode[1] = _int(mode)
        _at(activation_status, ctypes.c_uint).value = (
            SUCCESS if card.mode[0] == card.mode[1]
            else pynvml.NVML_ERROR_RESET_REQUIRED)
        return SUCCESS

    @_entry
    def nvmlDeviceGetMaxMigDeviceCount(self, device, count):
        if count is None:
            return INVALID_ARGUMENT
        # One MIG device per compute slice at most; none without MIG.
        enabled = self._card(device).mode[0]
        _at(count, ctypes.c_uint).value = (
            self.card.compute_slices if enabled
            else self.static['max_mig_devices'])
        return SUCCESS

    @_entry
    def nvmlDeviceGetGpuInstanceProfileInfo(self, device, profile, info):
        return self._profile_info(profile, info,
                                  pynvml.c_nvmlGpuInstanceProfileInfo_t)

    @_entry
    def nvmlDeviceGetGpuInstanceProfileInfoV(self, device, profile, info):
        return self._profile_info(profile, info,
                                  pynvml.c_nvmlGpuInstanceProfileInfo_v2_t)

    def _profile_info(self, profile, info, struct):
        index = _int(profile)
        if index >= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            return INVALID_ARGUMENT
        found = self.profiles.get(index)
        if found is None:
            return NOT_SUPPORTED
        out = _at(info, struct)
        if out is None:
            return INVALID_ARGUMENT
        versioned = struct is pynvml.c_nvmlGpuInstanceProfileInfo_v2_t
        if versioned and out.version != pynvml.nvmlGpuInstanceProfileInfo_v2:
            return INVALID_ARGUMENT
        out.id = found.id
        out.isP2pSupported = int(found.p2p)
        out.sliceCount = found.slice_count
        out.instanceCount = found.instance_count
        out.multiprocessorCount = found.multiprocessors
        out.copyEngineCount = found.copy_engines
        out.decoderCount = found.decoders
        out.encoderCount = found.encoders
        out.jpegCount = found.jpegs
        out.ofaCount = found.ofas
        out.memorySizeMB = found.memory_mb
        if versioned:
            out.name = ('MIG %s' % found.name).encode()
        return SUCCESS

    def _mig_profile(self, device, profile_id, unknown):
        """(card, profile, status) for a call on a profile id; ``unknown``
        answers an id the card does not offer."""
        card = self._card(device)
        if not card.mode[0]:
            return card, None, NOT_SUPPORTED
        profile = self._by_id.get(_int(profile_id))
        return card, profile, unknown if profile is None else SUCCESS

    # Placements and capacity.

    @_entry
    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(
            self, device, profile_id, placements, count):
        card, profile, status = self._mig_profile(device, profile_id,
                                                  NOT_SUPPORTED)
        if status != SUCCESS:
            return status
        if count is None:
            return INVALID_ARGUMENT
        out = _at(count, ctypes.c_uint)
        starts = profile.table.starts
        # Every allowed placement, whatever is occupied.
        if placements is not None:
            if out.value < len(starts):
                out.value = len(starts)
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            for i, start in enumerate(starts):
                placement = _at(placements,
                                pynvml.c_nvmlGpuInstancePlacement_t, i)
                placement.start = start
                placement.size = profile.table.memory_slices
        out.value = len(starts)
        return SUCCESS

    @_entry
    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device, profile_id,
                                                  count):
        card, profile, status = self._mig_profile(device, profile_id,
                                                  NOT_SUPPORTED)
        if status != SUCCESS:
            return status
        if count is None:
            return INVALID_ARGUMENT
        _at(count, ctypes.c_uint).value = self._room(card, profile)
        return SUCCESS

    def _room(self, card, profile):
        """How many more GIs of ``profile`` can be created: the most that
        can be placed together, not the number of free starts."""
        if self._refusal(card, profile) != SUCCESS:
            return 0
        free = [s for s in profile.table.starts
                if self._refusal(card, profile, s) == SUCCESS]
        left = profile.table.max_instances - sum(
            gi.profile is profile for gi in card.gis.values())
        for n in range(min(left, len(free)), 0, -1):
            for starts in itertools.combinations(free, n):
                memory, compute = set(), set()
                for start in starts:
                    memory |= _slices(start, profile.table.memory_slices)
                    compute |= _slices(start, profile.table.compute_slices)
                if (len(memory) == n * profile.table.memory_slices
                        and len(compute) == n * profile.table.compute_slices):
                    return n
        return 0

    def _refusal(self, card, profile, start=None):
        """NVML_ERROR_INSUFFICIENT_RESOURCES where a GI of ``profile``
        cannot be created (at ``start``) next to those ``card`` holds;
        NVML_SUCCESS where it can."""
        existing = card.gis.values()
        if sum(gi.profile is profile for gi in existing) >= (
                profile.table.max_instances):
            return INSUFFICIENT_RESOURCES
        if profile.table.media_engine and any(
                gi.profile.table.media_engine for gi in existing):
            return INSUFFICIENT_RESOURCES
        if start is not None:
            memory = _slices(start, profile.table.memory_slices)
            compute = _slices(start, profile.table.compute_slices)
            if any(gi.memory & memory or gi.compute & compute
                   for gi in existing):
                return INSUFFICIENT_RESOURCES
        return SUCCESS

    # GPU instances.

    @_entry
    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device, profile_id,
                                                 placement, instance):
        card, profile, status = self._mig_profile(device, profile_id,
                                                  INVALID_ARGUMENT)
        if status != SUCCESS:
            return status
        wanted = _at(placement, pynvml.c_nvmlGpuInstancePlacement_t)
        if wanted is None or instance is None:
            return INVALID_ARGUMENT
        if (wanted.start not in profile.table.starts
                or wanted.size != profile.table.memory_slices):
            return INVALID_ARGUMENT
        status = self._refusal(card, profile, wanted.start)
        if status != SUCCESS:
            return status
        return self._create_gi(card, device, profile, wanted.start, instance)

    @_entry
    def nvmlDeviceCreateGpuInstance(self, device, profile_id, instance):
        card, profile, status = self._mig_profile(device, profile_id,
                                                  INVALID_ARGUMENT)
        if status != SUCCESS:
            return status
        if instance is None:
            return INVALID_ARGUMENT
        # The stand-in's order: the lowest allowed start that is free.
        for start in profile.table.starts:
            if self._refusal(card, profile, start) == SUCCESS:
                return self._create_gi(card, device, profile, start,
                                       instance)
        return INSUFFICIENT_RESOURCES

    def _create_gi(self, card, device, profile, start, instance):
        if profile.table.memory_slices == self.card.memory_slices:
            gi_id = 0
        else:
            gi_id = next(i for i in itertools.count(1) if i not in card.gis)
        gi = _GpuInstance(_handle(device), gi_id, profile, start,
                          self._new_handle(GI_HANDLE_BASE))
        card.gis[gi_id] = gi
        self._gis[gi.handle] = gi
        _at(instance, ctypes.c_void_p).value = gi.handle
        return SUCCESS

    @_entry
    def nvmlDeviceGetGpuInstances(self, device, profile_id, instances,
                                  count):
        card, profile, status = self._mig_profile(device, profile_id,
                                                  INVALID_ARGUMENT)
        if status != SUCCESS:
            return status
        if instances is None or count is None:
            return INVALID_ARGUMENT
        found = [gi for _, gi in sorted(card.gis.items())
                 if gi.profile is profile]
        for i, gi in enumerate(found):
            _at(instances, ctypes.c_void_p, i).value = gi.handle
        _at(count, ctypes.c_uint).value = len(found)
        return SUCCESS

    @_entry
    def nvmlDeviceGetGpuInstanceById(self, device, gi_id, instance):
        card = self._card(device)
        if not card.mode[0]:
            return NOT_SUPPORTED
        if instance is None:
            return INVALID_ARGUMENT
        gi = card.gis.get(_int(gi_id))
        if gi is None:
            return pynvml.NVML_ERROR_NOT_FOUND
        _at(instance, ctypes.c_void_p).value = gi.handle
        return SUCCESS

    @_entry
    def nvmlGpuInstanceGetInfo(self, instance, info):
        gi = self._gis[_handle(instance)]
        out = _at(info, pynvml.c_nvmlGpuInstanceInfo_t)
        if out is None:
            return INVALID_ARGUMENT
        out.device = ctypes.cast(gi.gpu, pynvml.c_nvmlDevice_t)
        out.id = gi.id
        out.profileId = gi.profile.id
        out.placement.start = gi.start
        out.placement.size = gi.profile.table.memory_slices
        return SUCCESS

    @_entry
    def nvmlGpuInstanceDestroy(self, instance):
        gi = self._gis[_handle(instance)]
        if gi.cis:
            return pynvml.NVML_ERROR_IN_USE
        del self._gis[gi.handle], self._cards[gi.gpu].gis[gi.id]
        return SUCCESS

    # Compute instances.

    @_entry
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, instance, profile,
                                                     engines, info):
        return self._ci_profile_info(
            instance, profile, engines, info,
            pynvml.c_nvmlComputeInstanceProfileInfo_t)

    @_entry
    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, instance,
                                                      profile, engines,
                                                      info):
        return self._ci_profile_info(
            instance, profile, engines, info,
            pynvml.c_nvmlComputeInstanceProfileInfo_v2_t)

    def _ci_profile_info(self, instance, profile, engines, info, struct):
        gi = self._gis[_handle(instance)]
        index = _int(profile)
        if (index >= pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
                or _int(engines) != (
                    pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)):
            return INVALID_ARGUMENT
        if index != gi.profile.ci_profile:
            return NOT_SUPPORTED  # only the full-size one is offered
        out = _at(info, struct)
        if out is None:
            return INVALID_ARGUMENT
        versioned = struct is pynvml.c_nvmlComputeInstanceProfileInfo_v2_t
        if versioned and out.version != (
                pynvml.nvmlComputeInstanceProfileInfo_v2):
            return INVALID_ARGUMENT
        found = gi.profile
        out.id = index
        out.sliceCount = found.slice_count
        out.instanceCount = 1
        out.multiprocessorCount = found.multiprocessors
        out.sharedCopyEngineCount = found.copy_engines
        out.sharedDecoderCount = found.decoders
        out.sharedEncoderCount = found.encoders
        out.sharedJpegCount = found.jpegs
        out.sharedOfaCount = found.ofas
        if versioned:
            out.name = ('MIG %s' % found.name).encode()
        return SUCCESS

    @_entry
    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
            self, instance, profile_id, count):
        gi = self._gis[_handle(instance)]
        if _int(profile_id) != gi.profile.ci_profile:
            return NOT_SUPPORTED
        if count is None:
            return INVALID_ARGUMENT
        _at(count, ctypes.c_uint).value = 0 if gi.cis else 1
        return SUCCESS

    @_entry
    def nvmlGpuInstanceCreateComputeInstance(self, instance, profile_id,
                                             compute_instance):
        gi = self._gis[_handle(instance)]
        if _int(profile_id) != gi.profile.ci_profile:
            return NOT_SUPPORTED
        if compute_instance is None:
            return INVALID_ARGUMENT
        if gi.cis:  # the one CI takes the whole GI
            return INSUFFICIENT_RESOURCES
        card = self._cards[gi.gpu]
        card.created += 1
        name = '%s/%d/%d/%d' % (self._uuid(gi.gpu), gi.id, 0, card.created)
        ci = _ComputeInstance(gi, 0, self._new_handle(CI_HANDLE_BASE),
                              self._new_handle(MIG_HANDLE_BASE),
                              'MIG-%s' % uuid.uuid5(uuid.NAMESPACE_OID, name))
        gi.cis[ci.id] = ci
        self._cis[ci.handle] = ci
        self._mig_devices[ci.device] = ci
        _at(compute_instance, ctypes.c_void_p).value = ci.handle
        return SUCCESS

    @_entry
    def nvmlGpuInstanceGetComputeInstances(self, instance, profile_id,
                                           compute_instances, count):
        gi = self._gis[_handle(instance)]
        if _int(profile_id) != gi.profile.ci_profile:
            return NOT_SUPPORTED
        if compute_instances is None or count is None:
            return INVALID_ARGUMENT
        found = [ci for _, ci in sorted(gi.cis.items())]
        for i, ci in enumerate(found):
            _at(compute_instances, ctypes.c_void_p, i).value = ci.handle
        _at(count, ctypes.c_uint).value = len(found)
        return SUCCESS

    @_entry
    def nvmlGpuInstanceGetComputeInstanceById(self, instance, ci_id,
                                              compute_instance):
        gi = self._gis[_handle(instance)]
        if compute_instance is None:
            return INVALID_ARGUMENT
        ci = gi.cis.get(_int(ci_id))
        if ci is None:
            return pynvml.NVML_ERROR_NOT_FOUND
        _at(compute_instance, ctypes.c_void_p).value = ci.handle
        return SUCCESS

    @_entry
    def nvmlComputeInstanceGetInfo_v2(self, compute_instance, info):
        ci = self._cis[_handle(compute_instance)]
        out = _at(info, pynvml.c_nvmlComputeInstanceInfo_t)
        if out is None:
            return INVALID_ARGUMENT
        out.device = ctypes.cast(ci.gpu, pynvml.c_nvmlDevice_t)
        out.gpuInstance = ctypes.cast(ci.gi.handle,
                                      pynvml.c_nvmlGpuInstance_t)
        out.id = ci.id
        out.profileId = ci.gi.profile.ci_profile
        out.placement.start = 0
        out.placement.size = ci.gi.profile.slice_count
        return SUCCESS

    @_entry
    def nvmlComputeInstanceDestroy(self, compute_instance):
        ci = self._cis[_handle(compute_instance)]
        if ci.processes:
            return pynvml.NVML_ERROR_IN_USE
        del self._cis[ci.handle], self._mig_devices[ci.device]
        del ci.gi.cis[ci.id]
        return SUCCESS

    # MIG devices: a handle per CI, taken by some nvmlDevice* calls.

    @_entry
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index, mig_device):
        if mig_device is None:
            return INVALID_ARGUMENT
        card = self._card(device)
        found = [ci for _, gi in sorted(card.gis.items())
                 for _, ci in sorted(gi.cis.items())]
        if _int(index) >= len(found):
            return pynvml.NVML_ERROR_NOT_FOUND
        _at(mig_device, ctypes.c_void_p).value = found[_int(index)].device
        return SUCCESS

    @_entry
    def nvmlDeviceIsMigDeviceHandle(self, device, is_mig_device):
        if is_mig_device is None:
            return INVALID_ARGUMENT
        _at(is_mig_device, ctypes.c_uint).value = int(
            _handle(device) in self._mig_devices)
        return SUCCESS

    @_entry
    def nvmlDeviceGetGpuInstanceId(self, device, gi_id):
        ci = self._mig_devices.get(_handle(device))
        if ci is None or gi_id is None:
            return INVALID_ARGUMENT
        _at(gi_id, ctypes.c_uint).value = ci.gi.id
        return SUCCESS

    @_entry
    def nvmlDeviceGetComputeInstanceId(self, device, ci_id):
        ci = self._mig_devices.get(_handle(device))
        if ci is None or ci_id is None:
            return INVALID_ARGUMENT
        _at(ci_id, ctypes.c_uint).value = ci.id
        return SUCCESS

    @_entry
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig_device,
                                                     device):
        ci = self._mig_devices.get(_handle(mig_device))
        if ci is None or device is None:
            return INVALID_ARGUMENT
        _at(device, ctypes.c_void_p).value = ci.gpu
        return SUCCESS

    @_entry
    def nvmlDeviceGetUUID(self, handle, buffer, length):
        ci = self._mig_devices.get(_handle(handle))
        if ci is None:
            return Recorded.nvmlDeviceGetUUID.__wrapped__(
                self, handle, buffer, length)
        buffer.value = ci.uuid.encode()
        return SUCCESS

    @_entry
    def nvmlDeviceGetMemoryInfo(self, handle, memory):
        ci = self._mig_devices.get(_handle(handle))
        if ci is None:
            return Recorded.nvmlDeviceGetMemoryInfo.__wrapped__(
                self, handle, memory)
        out = _at(memory, pynvml.c_nvmlMemory_t)
        if out is None:
            return INVALID_ARGUMENT
        out.total = out.free = ci.gi.profile.memory_mb * 2 ** 20
        out.used = 0
        return SUCCESS

    @_entry
    def nvmlDeviceGetUtilizationRates(self, handle, utilization):
        if self._card(handle).mode[0]:
            return NOT_SUPPORTED  # not given for a GPU in MIG mode
        return Recorded.nvmlDeviceGetUtilizationRates.__wrapped__(
            self, handle, utilization)

    del _entry
