"""The MIG instances of one NVIDIA GPU, created and destroyed through NVML.

When an ARQ for a MIG profile is bound, the agent creates a GPU instance
(GI) of that profile at a start slot it chose, and in it the one compute
instance (CI) that takes the whole GI; the workload sees the MIG device of
that CI by its UUID. At unbind both are destroyed again.

Only NVML is used (the ``pynvml`` bindings, imported on first use as the
observer in ``nvml`` does), never ``nvidia-smi``. Every NVML error becomes
one of the exceptions below, whose text says what happened to which
instance on which GPU.

GI ids are NVML's, and NVML gives a destroyed GI's id to the next one it
creates: an instance is therefore recorded with its profile, start and the
MIG UUID of its CI (``MIGInstance``), and ``destroy`` removes nothing that
does not match all of them. One MIG operation runs at a time in this
process (``_LOCK``), so that no create can reuse an id between a destroy's
check and the destroy itself; NVML users outside this process (an operator
running ``nvidia-smi mig``) are not held back by it.

Creating and destroying instances needs root on a real host: the caller
runs these operations where it has it.
"""

import ctypes
import dataclasses
import functools
import importlib
import logging
import threading

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers.gpu import nvml as nvml_observer

LOG = logging.getLogger(__name__)

# Every NVML call of this module is made under it: see above.
_LOCK = threading.Lock()

# Placements asked for in one call: every profile of the cards known
# (8 memory slices at most) has fewer; more are read in a second call.
PLACEMENTS_AT_ONCE = 8


class MIGError(base.DriverError):
    code = 'cyborg.mig_error'


class MIGUnavailable(MIGError):
    """No NVML, no such GPU, or MIG mode off: no MIG operation can run."""
    code = 'cyborg.mig_unavailable'


class MIGRefused(MIGError):
    """The GPU cannot hold the instance asked for."""
    status = 409
    code = 'cyborg.mig_refused'


class MIGInUse(MIGError):
    """The instance runs processes (or holds what cyborg did not make)."""
    status = 409
    code = 'cyborg.mig_in_use'


class MIGIdentityMismatch(MIGError):
    """The GI with the recorded id is another instance now."""
    status = 409
    code = 'cyborg.mig_identity_mismatch'


@dataclasses.dataclass(frozen=True)
class GIProfile:
    """A GPU-instance profile as NVML reports it for one GPU."""
    index: int  # NVML_GPU_INSTANCE_PROFILE_*
    id: int  # the GI profile id
    name: str  # '3g.40gb'
    slices: int  # compute slices
    instances: int  # most instances of it on the GPU
    memory_mib: int
    media_engine: bool  # uses the GPU's one OFA
    placements: tuple  # ((start, memory slices), ...): every allowed one


@dataclasses.dataclass(frozen=True)
class MIGInstance:
    """A GI and its CI, with what tells it apart from a later one that
    has the same ids. ``ci_id`` and ``mig_uuid`` are None for a GI that
    holds no CI (only ``instances()`` finds such)."""
    parent_address: str
    profile: str
    gi_id: int
    ci_id: int | None
    start: int
    mig_uuid: str | None

    def __str__(self):
        if self.ci_id is None:
            return '%s at start %d (GPU instance %d, no compute instance)' % (
                self.profile, self.start, self.gi_id)
        return '%s at start %d (GPU instance %d, compute instance %d, %s)' % (
            self.profile, self.start, self.gi_id, self.ci_id, self.mig_uuid)


def _locked(method):
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with _LOCK:
            return method(self, *args, **kwargs)
    return locked


class MIGCard:
    """The MIG operations on the GPU at one PCI address.

    Nothing is asked of NVML before the first operation; NVML is started
    and the GPU found once, its profiles and placements read once.
    """

    def __init__(self, address, module_name='pynvml'):
        self.address = str(address)
        self._module_name = module_name
        self._nvml = None
        self._not_installed = False
        self._handle = None
        self._profiles = None  # {profile index: GIProfile}
        self._max_devices = None  # MIG device indices to look at

    # What the agent asks.

    @_locked
    def profiles(self):
        """{profile index: GIProfile} of the GPU."""
        self._open()
        return dict(self._profiles)

    @_locked
    def check_table(self, card):
        """How NVML's profiles differ from ``card`` (a
        ``cyborg.device_config.mig.Card``): a sentence per difference,
        none when they agree."""
        self._open()
        found = {p.name: p for p in self._profiles.values()}
        differences = []

        def differ(name, template, nvml_says, table_says):
            differences.append('%s on the GPU at %s: ' % (name, self.address)
                               + template % (nvml_says, card.name,
                                             table_says))

        for expected in card.profiles:
            name = expected.name
            profile = found.pop(name, None)
            if profile is None:
                differences.append(
                    'NVML offers no profile %s on the GPU at %s; the %s '
                    'table has it.' % (name, self.address, card.name))
                continue
            if profile.id != expected.gi_profile_id:
                differ(name, 'NVML gives GI profile id %s, the %s table %s.',
                       profile.id, expected.gi_profile_id)
            if profile.instances != expected.max_instances:
                differ(name, 'NVML allows %s instances, the %s table %s.',
                       profile.instances, expected.max_instances)
            if profile.slices != expected.compute_slices:
                differ(name, 'NVML gives it %s compute slices, the %s table '
                       '%s.', profile.slices, expected.compute_slices)
            if profile.media_engine != expected.media_engine:
                differ(name, 'NVML says it uses the media engine: %s, the '
                       '%s table: %s.', _yes(profile.media_engine),
                       _yes(expected.media_engine))
            starts = sorted(start for start, _ in profile.placements)
            if starts != sorted(expected.starts):
                differ(name, 'NVML places it at starts %s, the %s table at '
                       '%s.', _listed(starts), _listed(expected.starts))
            sizes = sorted({size for _, size in profile.placements})
            if sizes != [expected.memory_slices]:
                differ(name, 'NVML gives it %s memory slices, the %s table '
                       '%s.', _listed(sizes), expected.memory_slices)
        for name, profile in sorted(found.items()):
            differences.append(
                'NVML offers profile %s (GI profile id %d) on the GPU at %s; '
                'the %s table lacks it.' % (name, profile.id, self.address,
                                            card.name))
        return differences

    @_locked
    def remaining(self):
        """{profile name: how many more instances of it NVML would
        create now}."""
        handle = self._open()
        nvml = self._nvml
        return {p.name: self._call(
            'read the remaining capacity of %s' % p.name,
            nvml.nvmlDeviceGetGpuInstanceRemainingCapacity, handle, p.id)
            for p in self._profiles.values()}

    @_locked
    def instances(self):
        """[MIGInstance] of the GIs and CIs on the GPU now, by GI id."""
        handle = self._open()
        uuids = self._mig_uuids(handle)
        found = []
        for _, gi_id, name, start in self._gpu_instances(handle):
            cis = sorted((ci_id, uuid) for (gi, ci_id), uuid in uuids.items()
                         if gi == gi_id)
            for ci_id, uuid in cis or [(None, None)]:
                found.append(MIGInstance(self.address, name, gi_id, ci_id,
                                         start, uuid))
        return found

    def placed(self):
        """[(profile, start)] of the GPU instances now, each once
        (``instances`` lists a GPU instance once per compute instance)."""
        return list({i.gi_id: (i.profile, i.start)
                     for i in self.instances()}.values())

    @_locked
    def create(self, profile_name, start):
        """A GI of ``profile_name`` at ``start`` and its full-size CI, as a
        MIGInstance; either both are made or neither is left."""
        handle = self._open()
        nvml = self._nvml
        profile = self._profile_named(profile_name)
        size = dict(profile.placements).get(start)
        if size is None:
            raise MIGRefused(
                '%s cannot start at slice %d on the GPU at %s: its starts '
                'are %s.' % (profile.name, start, self.address, _listed(
                    s for s, _ in profile.placements)))
        what = '%s at start %d' % (profile.name, start)
        # At the start asked for, never where NVML would choose: the
        # caller chose it to keep the largest profiles creatable.
        placement = nvml.c_nvmlGpuInstancePlacement_t(start, size)
        try:
            gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                handle, profile.id, ctypes.byref(placement))
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_INSUFFICIENT_RESOURCES:
                raise MIGRefused(
                    'The GPU at %s has no free placement for %s: %s (NVML: '
                    '%s).' % (self.address, what, self._holding(handle), e))
            raise self._failure(e, 'create a GPU instance %s' % what)
        ci = None
        try:
            gi_id = self._call('read the GPU instance %s just created' % what,
                               nvml.nvmlGpuInstanceGetInfo, gi).id
            ci = self._create_ci(gi, gi_id, profile)
            ci_id = self._call(
                'read the compute instance of GPU instance %d' % gi_id,
                nvml.nvmlComputeInstanceGetInfo_v2, ci).id
            mig_uuid = self._mig_uuids(handle, gi_id).get((gi_id, ci_id))
            if mig_uuid is None:
                raise MIGError(
                    'NVML shows no MIG device for compute instance %d of GPU '
                    'instance %d on the GPU at %s.' % (ci_id, gi_id,
                                                       self.address))
        except Exception as e:
            left = self._undo(gi, ci, what)
            if left and isinstance(e, MIGError):
                raise type(e)('%s %s' % (e.message, left)) from e
            raise
        instance = MIGInstance(self.address, profile.name, gi_id, ci_id,
                               start, mig_uuid)
        LOG.info('Created MIG instance %s on the GPU at %s', instance,
                 self.address)
        return instance

    @_locked
    def destroy(self, instance):
        """Destroy ``instance``, its CI then its GI: True. False when it no
        longer exists (a host reboot took it): nothing to do. Nothing is
        destroyed when it is in use or the GI is another instance now."""
        handle = self._open()
        nvml = self._nvml
        if instance.parent_address != self.address:
            raise MIGIdentityMismatch(
                'MIG instance %s is on the GPU at %s, not at %s: nothing '
                'destroyed.' % (instance, instance.parent_address,
                                self.address))
        try:
            gi = nvml.nvmlDeviceGetGpuInstanceById(handle, instance.gi_id)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_NOT_FOUND:
                LOG.info('MIG instance %s on the GPU at %s is gone already: '
                         'nothing to destroy', instance, self.address)
                return False
            raise self._failure(e, 'find GPU instance %d' % instance.gi_id)
        info = self._call('read GPU instance %d' % instance.gi_id,
                          nvml.nvmlGpuInstanceGetInfo, gi)
        now = (self._profile_name(info.profileId), info.placement.start)
        if now != (instance.profile, instance.start):
            raise MIGIdentityMismatch(
                'GPU instance %d on the GPU at %s is %s at start %d now, not '
                'MIG instance %s: nothing destroyed.' % (
                    instance.gi_id, self.address, now[0], now[1], instance))
        uuids = {ci: uuid for (_, ci), uuid in
                 self._mig_uuids(handle, instance.gi_id).items()}
        if uuids.get(instance.ci_id) != instance.mig_uuid:
            raise MIGIdentityMismatch(
                'GPU instance %d on the GPU at %s holds %s now, not MIG '
                'instance %s: nothing destroyed.' % (
                    instance.gi_id, self.address, _cis(uuids), instance))
        # CIs an operator added would keep the GI once ours is gone.
        others = sorted(set(uuids) - {instance.ci_id})
        if others:
            raise MIGInUse(
                'MIG instance %s on the GPU at %s also holds compute '
                'instance(s) %s, which cyborg did not make: nothing '
                'destroyed.' % (instance, self.address, _listed(others)))
        if instance.ci_id is not None:
            ci = self._call(
                'find compute instance %d of GPU instance %d' % (
                    instance.ci_id, instance.gi_id),
                nvml.nvmlGpuInstanceGetComputeInstanceById, gi,
                instance.ci_id)
            try:
                nvml.nvmlComputeInstanceDestroy(ci)
            except nvml.NVMLError as e:
                if e.value == nvml.NVML_ERROR_IN_USE:
                    raise MIGInUse(
                        'MIG instance %s on the GPU at %s has running '
                        'processes: nothing destroyed (NVML: %s).' % (
                            instance, self.address, e))
                raise self._failure(e, 'destroy MIG instance %s' % instance)
        try:
            nvml.nvmlGpuInstanceDestroy(gi)
        except nvml.NVMLError as e:
            raise self._failure(
                e, 'destroy GPU instance %d, whose compute instance is '
                'destroyed,' % instance.gi_id)
        LOG.info('Destroyed MIG instance %s on the GPU at %s', instance,
                 self.address)
        return True

    # NVML.

    def _start(self):
        if self._nvml is not None:
            return self._nvml
        if not self._not_installed:
            try:
                nvml = importlib.import_module(self._module_name)
            except ImportError:
                self._not_installed = True
        if self._not_installed:
            raise MIGUnavailable('No MIG on the GPU at %s: %s.' % (
                self.address, nvml_observer.NOT_INSTALLED))
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            # No driver yet: tried again at the next operation.
            raise MIGUnavailable('No MIG on the GPU at %s: NVML cannot '
                                 'start: %s.' % (self.address, e))
        self._nvml = nvml
        return nvml

    def _open(self):
        """The GPU's handle, once NVML is started, the GPU found in MIG
        mode and its profiles read."""
        if self._handle is not None:
            return self._handle
        nvml = self._start()
        try:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(self.address)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_NOT_FOUND:
                raise MIGUnavailable('NVML does not see a GPU at %s.'
                                     % self.address)
            raise self._failure(e, 'find the GPU')
        current, pending = self._call('read the MIG mode',
                                      nvml.nvmlDeviceGetMigMode, handle)
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            raise MIGUnavailable('MIG mode is off on the GPU at %s%s.' % (
                self.address, ', on from its next reset' if pending ==
                nvml.NVML_DEVICE_MIG_ENABLE else ''))
        if self._profiles is None:
            self._profiles = self._read_profiles(handle)
            self._max_devices = self._call(
                'count its MIG devices', nvml.nvmlDeviceGetMaxMigDeviceCount,
                handle)
        self._handle = handle
        return handle

    def _read_profiles(self, handle):
        nvml = self._nvml
        profiles = {}
        for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
            except nvml.NVMLError as e:
                # Profiles of other GPU generations.
                if e.value in (nvml.NVML_ERROR_NOT_SUPPORTED,
                               nvml.NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise self._failure(e, 'read MIG profile %d' % index)
            name = info.name
            if isinstance(name, bytes):
                name = name.decode()
            name = name.removeprefix('MIG ')
            profiles[index] = GIProfile(
                index, info.id, name, info.sliceCount, info.instanceCount,
                info.memorySizeMB, bool(info.ofaCount),
                self._placements(handle, info.id, name))
        return profiles

    def _placements(self, handle, profile_id, name):
        nvml = self._nvml
        size = PLACEMENTS_AT_ONCE
        while True:
            placements = (nvml.c_nvmlGpuInstancePlacement_t * size)()
            count = ctypes.c_uint(size)
            try:
                nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                    handle, profile_id, placements, ctypes.byref(count))
            except nvml.NVMLError as e:
                if (e.value == nvml.NVML_ERROR_INSUFFICIENT_SIZE
                        and count.value > size):
                    size = count.value
                    continue
                raise self._failure(e, 'read the placements of %s' % name)
            return tuple((p.start, p.size) for p in placements[:count.value])

    def _create_ci(self, gi, gi_id, profile):
        """The CI that takes all of the GI's compute slices."""
        nvml = self._nvml
        index = getattr(nvml, 'NVML_COMPUTE_INSTANCE_PROFILE_%d_SLICE'
                        % profile.slices, None)
        info = None
        if index is not None:
            try:
                info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, index,
                    nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            except nvml.NVMLError as e:
                if e.value != nvml.NVML_ERROR_NOT_SUPPORTED:
                    raise self._failure(e, 'read the compute profiles of '
                                        'GPU instance %d' % gi_id)
        if info is None or info.sliceCount != profile.slices:
            raise MIGError(
                'GPU instance %d (%s) on the GPU at %s offers no compute '
                'instance of all its %d compute slices.' % (
                    gi_id, profile.name, self.address, profile.slices))
        return self._call(
            'create the compute instance of GPU instance %d' % gi_id,
            nvml.nvmlGpuInstanceCreateComputeInstance, gi, info.id)

    def _undo(self, gi, ci, what):
        """Destroy what a failed create made; a sentence on what is left,
        or None."""
        nvml = self._nvml
        try:
            if ci is not None:
                nvml.nvmlComputeInstanceDestroy(ci)
            nvml.nvmlGpuInstanceDestroy(gi)
        except nvml.NVMLError as e:
            LOG.error('The GPU instance %s that failed on the GPU at %s could '
                      'not be destroyed again: %s', what, self.address, e)
            return ('The GPU instance %s is left on it: destroying it '
                    'failed (NVML: %s).' % (what, e))
        return None

    def _gpu_instances(self, handle):
        """[(GI handle, GI id, profile name, start)] of the GPU, by id."""
        nvml = self._nvml
        found = []
        for profile in self._profiles.values():
            gis = (nvml.c_nvmlGpuInstance_t * profile.instances)()
            count = ctypes.c_uint(profile.instances)
            self._call('list the GPU instances of %s' % profile.name,
                       nvml.nvmlDeviceGetGpuInstances, handle, profile.id,
                       gis, ctypes.byref(count))
            for gi in gis[:count.value]:
                info = self._call('read a GPU instance of %s' % profile.name,
                                  nvml.nvmlGpuInstanceGetInfo, gi)
                found.append((gi, info.id, profile.name,
                              info.placement.start))
        return sorted(found, key=lambda f: f[1])

    def _mig_uuids(self, handle, gi_id=None):
        """{(GI id, CI id): MIG UUID} of the GPU's MIG devices, one per
        CI; only those of GI ``gi_id`` when given."""
        nvml = self._nvml
        found = {}
        # Indices with no MIG device between them are not ruled out.
        for index in range(self._max_devices):
            try:
                device = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle,
                                                                  index)
            except nvml.NVMLError as e:
                if e.value == nvml.NVML_ERROR_NOT_FOUND:
                    continue
                raise self._failure(e, 'read MIG device %d' % index)
            doing = 'read MIG device %d' % index
            gi = self._call(doing, nvml.nvmlDeviceGetGpuInstanceId, device)
            if gi_id is not None and gi != gi_id:
                continue
            ci = self._call(doing, nvml.nvmlDeviceGetComputeInstanceId,
                            device)
            found[(gi, ci)] = self._call(doing, nvml.nvmlDeviceGetUUID,
                                         device)
        return found

    def _holding(self, handle):
        """What the GPU holds, for a refusal's text."""
        try:
            held = self._gpu_instances(handle)
        except MIGError as e:
            return 'what it holds cannot be read (%s)' % e
        if not held:
            return 'it holds no GPU instance'
        return 'it holds %s' % ', '.join('%s at %d' % (name, start)
                                         for _, _, name, start in held)

    def _profile_named(self, name):
        for profile in self._profiles.values():
            if profile.name == name:
                return profile
        raise MIGRefused('The GPU at %s has no MIG profile %s; it offers %s.'
                         % (self.address, name, _listed(
                             p.name for p in self._profiles.values())))

    def _profile_name(self, profile_id):
        for profile in self._profiles.values():
            if profile.id == profile_id:
                return profile.name
        return 'GI profile %d' % profile_id

    def _call(self, doing, function, *args):
        """``function(*args)``, an NVML error turned into the domain's."""
        try:
            return function(*args)
        except self._nvml.NVMLError as e:
            raise self._failure(e, doing)

    def _failure(self, error, doing):
        """The exception for NVML ``error``, met trying to ``doing``."""
        nvml = self._nvml
        failed = 'NVML could not %s on the GPU at %s' % (doing, self.address)
        if error.value == nvml.NVML_ERROR_GPU_IS_LOST:
            self._handle = None  # a new one after the GPU's reset
            return MIGUnavailable('%s: NVML has lost the GPU, which needs a '
                                  'reset.' % failed)
        if error.value == nvml.NVML_ERROR_NOT_SUPPORTED:
            self._handle = None  # the MIG mode is read again
            return MIGUnavailable('%s: the GPU does not support it, or MIG '
                                  'mode is off (NVML: %s).' % (failed, error))
        if error.value == nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            return MIGUnavailable('%s: the NVIDIA driver is too old for it '
                                  '(NVML: %s).' % (failed, error))
        if error.value == nvml.NVML_ERROR_NO_PERMISSION:
            return MIGError('%s: MIG instances are managed as root (NVML: '
                            '%s).' % (failed, error))
        if error.value == nvml.NVML_ERROR_INSUFFICIENT_RESOURCES:
            return MIGRefused('%s: it has no room left for it (NVML: %s).'
                              % (failed, error))
        if error.value == nvml.NVML_ERROR_IN_USE:
            return MIGInUse('%s: it is in use (NVML: %s).' % (failed, error))
        return MIGError('%s (NVML: %s).' % (failed, error))


def _listed(items):
    return ', '.join(str(i) for i in items) or 'none'


def _yes(flag):
    return 'yes' if flag else 'no'


def _cis(uuids):
    if not uuids:
        return 'no compute instance'
    return ', '.join('compute instance %s (%s)' % (ci, uuid)
                     for ci, uuid in sorted(uuids.items()))
