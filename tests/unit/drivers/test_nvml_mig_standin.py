"""The MIG stand-in against the H100's recorded tables, through the real
NVML bindings only (the stand-in's test hooks aside): what a service that
partitions GPUs will meet."""

import ctypes
import pathlib
import re
import sys
import threading

import pynvml
import pytest

from tests.unit.device_config import test_mig

H100 = '0000:00:06.0'
OTHER = '0000:00:07.0'
DATA = pathlib.Path(__file__).resolve().parents[1] / 'device_config' / 'data'

EMPTY_CARD_CAPACITY = {'1g.10gb': 7, '1g.20gb': 4, '2g.20gb': 3,
                       '3g.40gb': 2, '4g.40gb': 1, '7g.80gb': 1,
                       '1g.10gb+me': 1}


def lgip_table():
    """{name: row} of the recorded ``nvidia-smi mig -lgip``."""
    rows = re.findall(
        r'^\|\s+\d+\s+MIG (\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(\w+)\s+'
        r'(\d+)\s+(\d+)\s+(\d+)\s+\|\n\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|',
        (DATA / 'h100-mig-lgip.txt').read_text(), re.M)
    table = {}
    for (name, gi_id, _, total, gib, p2p, sm, dec, enc, ce, jpeg,
         ofa) in rows:
        table[name] = {'id': int(gi_id), 'instances': int(total),
                       'gib': float(gib), 'p2p': p2p == 'Yes',
                       'sm': int(sm), 'dec': int(dec), 'enc': int(enc),
                       'ce': int(ce), 'jpeg': int(jpeg), 'ofa': int(ofa)}
    return table


def placement_table():
    """{name: (memory slices, allowed starts)} of the published table."""
    return {name: (row[2], list(row[4]))
            for name, row in test_mig.published_placements().items()}


@pytest.fixture
def library(mig_nvml):
    return mig_nvml()


@pytest.fixture
def gpu(library):
    return pynvml.nvmlDeviceGetHandleByPciBusId(H100)


def profiles(handle):
    """{name: GI profile info} of every profile index the GPU offers."""
    found = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except pynvml.NVMLError_NotSupported:
            continue
        found[info.name.removeprefix('MIG ')] = info
    return found


def profile_id(handle, name):
    return profiles(handle)[name].id


def create(handle, name, start):
    """A GPU instance of profile ``name`` at ``start``."""
    placement = pynvml.c_nvmlGpuInstancePlacement_t(
        start, placement_table()[name][0])
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
        handle, profile_id(handle, name), ctypes.byref(placement))


def create_ci(gi):
    """The compute instance that takes the whole GPU instance."""
    gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
    slices = {p.id: p.sliceCount for p in profiles(gi_info.device).values()}
    index = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[slices[gi_info.profileId]]
    ci_profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, index, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    return pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)


def capacity(handle):
    return {name: pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(
        handle, info.id) for name, info in profiles(handle).items()}


def possible_placements(handle, name):
    """[(start, size)] by NVML's two calls: the count, then the array."""
    count = ctypes.c_uint(0)
    pid = profile_id(handle, name)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
        handle, pid, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
        handle, pid, array, ctypes.byref(count))
    return [(p.start, p.size) for p in array[:count.value]]


def gpu_instances(handle, name):
    info = profiles(handle)[name]
    array = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
    count = ctypes.c_uint()
    pynvml.nvmlDeviceGetGpuInstances(handle, info.id, array,
                                     ctypes.byref(count))
    return list(array[:count.value])


def starts(handle):
    """{GI id: (profile id, start)} of what the GPU holds."""
    held = {}
    for name in profiles(handle):
        for gi in gpu_instances(handle, name):
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            held[info.id] = (info.profileId, info.placement.start)
    return held


def value(handle):
    return ctypes.cast(handle, ctypes.c_void_p).value


def test_profile_info_is_the_recorded_lgip_table(library, gpu):
    recorded = lgip_table()
    assert len(recorded) == 7
    seen = profiles(gpu)
    assert sorted(seen) == sorted(recorded)
    for name, info in seen.items():
        row = recorded[name]
        assert (info.id, info.instanceCount, bool(info.isP2pSupported),
                info.multiprocessorCount, info.decoderCount,
                info.encoderCount, info.copyEngineCount, info.jpegCount,
                info.ofaCount) == (
            row['id'], row['instances'], row['p2p'], row['sm'], row['dec'],
            row['enc'], row['ce'], row['jpeg'], row['ofa']), name
        assert abs(info.memorySizeMB / 1024 - row['gib']) < 0.01, name
        # The recorded answer, by the NVML profile index.
        index = [i for i, p in library.static['mig_profiles'].items()
                 if p['id'] == info.id]
        assert info.sliceCount == (
            library.static['mig_profiles'][index[0]]['slices'])
    # The first version of the structure carries the same.
    v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE, version=1)
    assert (v1.id, v1.sliceCount, v1.memorySizeMB, v1.ofaCount) == (
        0, 7, 81152, 1)
    assert set(library.static['mig_profiles']) == {
        str(p) for p in (
            pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
            pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE,
            pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
            pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE,
            pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE,
            pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
            pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)}
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
            gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


def test_possible_placements_are_the_published_table(gpu):
    published = placement_table()
    assert len(published) == 7
    for name, (size, allowed) in published.items():
        assert possible_placements(gpu, name) == [(s, size)
                                                  for s in allowed], name
    # The same whatever is occupied.
    create(gpu, '3g.40gb', 4)
    assert possible_placements(gpu, '3g.40gb') == [(0, 4), (4, 4)]


def test_possible_placements_follow_the_two_call_convention(gpu):
    pid = profile_id(gpu, '1g.20gb')
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
        gpu, pid, None, ctypes.byref(count))
    assert count.value == 4
    small = (pynvml.c_nvmlGpuInstancePlacement_t * 2)()
    count.value = 2
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            gpu, pid, small, ctypes.byref(count))
    assert count.value == 4
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            gpu, 99, None, ctypes.byref(count))


def test_remaining_capacity_of_an_empty_card_then_after_creations(gpu):
    assert capacity(gpu) == EMPTY_CARD_CAPACITY
    create(gpu, '3g.40gb', 4)
    assert capacity(gpu) == {'1g.10gb': 4, '1g.20gb': 2, '2g.20gb': 2,
                             '3g.40gb': 1, '4g.40gb': 1, '7g.80gb': 0,
                             '1g.10gb+me': 1}
    create(gpu, '2g.20gb', 0)
    assert capacity(gpu) == {'1g.10gb': 2, '1g.20gb': 1, '2g.20gb': 1,
                             '3g.40gb': 0, '4g.40gb': 0, '7g.80gb': 0,
                             '1g.10gb+me': 1}


def test_fragmentation_leaves_free_slices_no_big_instance_can_use(gpu):
    for start in (0, 1, 5):
        create(gpu, '1g.10gb', start)
    room = capacity(gpu)
    assert (room['3g.40gb'], room['4g.40gb']) == (0, 0)
    assert room['1g.10gb'] == 4  # compute slices 2, 3, 4 and 6
    for name, allowed in (('3g.40gb', (0, 4)), ('4g.40gb', (0,))):
        for start in allowed:
            with pytest.raises(pynvml.NVMLError_InsufficientResources):
                create(gpu, name, start)
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            pynvml.nvmlDeviceCreateGpuInstance(gpu, profile_id(gpu, name))
    assert len(starts(gpu)) == 3


def test_overlapping_instances_are_refused_as_insufficient_resources(gpu):
    create(gpu, '2g.20gb', 0)
    for name, start in (('1g.10gb', 1), ('1g.20gb', 0), ('2g.20gb', 0),
                        ('4g.40gb', 0), ('3g.40gb', 0)):
        with pytest.raises(pynvml.NVMLError_InsufficientResources) as caught:
            create(gpu, name, start)
    # The service logs the text NVML gives.
    assert str(caught.value) == 'Insufficient Resources'
    create(gpu, '1g.10gb', 2)
    assert sorted(starts(gpu).values()) == [
        (profile_id(gpu, '2g.20gb'), 0), (profile_id(gpu, '1g.10gb'), 2)]


@pytest.mark.parametrize('name,start,size', [
    ('3g.40gb', 2, 4), ('4g.40gb', 4, 4), ('2g.20gb', 6, 2),
    ('1g.10gb', 7, 1), ('1g.20gb', 1, 2), ('1g.10gb', 0, 2),
    ('3g.40gb', 0, 3),
])
def test_a_start_or_size_the_profile_does_not_allow_is_invalid(
        gpu, name, start, size):
    placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            gpu, profile_id(gpu, name), ctypes.byref(placement))
    assert starts(gpu) == {}


def test_implicit_creation_takes_the_lowest_free_start(library, gpu):
    def implicit(name):
        gi = pynvml.nvmlDeviceCreateGpuInstance(gpu, profile_id(gpu, name))
        info = pynvml.nvmlGpuInstanceGetInfo(gi)
        return info.id, info.placement.start

    assert [implicit('1g.10gb') for _ in range(3)] == [(1, 0), (2, 1),
                                                        (3, 2)]
    assert implicit('3g.40gb') == (4, 4)
    assert implicit('1g.10gb') == (5, 3)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        implicit('1g.10gb')
    assert [(i.gi_id, i.profile, i.start)
            for i in library.instances(H100)] == [
        (1, '1g.10gb', 0), (2, '1g.10gb', 1), (3, '1g.10gb', 2),
        (4, '3g.40gb', 4), (5, '1g.10gb', 3)]


def test_gi_ids_are_the_lowest_unused_and_0_for_the_whole_card(library, gpu):
    first, second = create(gpu, '1g.10gb', 0), create(gpu, '1g.10gb', 1)
    pynvml.nvmlGpuInstanceDestroy(first)
    assert pynvml.nvmlGpuInstanceGetInfo(create(gpu, '1g.10gb', 3)).id == 1
    assert pynvml.nvmlGpuInstanceGetInfo(second).id == 2
    library.lose_instances(H100)
    gi = create(gpu, '7g.80gb', 0)
    assert pynvml.nvmlGpuInstanceGetInfo(gi).id == 0
    assert value(pynvml.nvmlDeviceGetGpuInstanceById(gpu, 0)) == value(gi)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetGpuInstanceById(gpu, 1)


def test_gpu_and_compute_instance_info(gpu):
    gi = create(gpu, '3g.40gb', 4)
    info = pynvml.nvmlGpuInstanceGetInfo(gi)
    assert (value(info.device), info.profileId, info.placement.start,
            info.placement.size) == (value(gpu), 9, 4, 4)
    ci_profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
        pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    assert (ci_profile.sliceCount, ci_profile.multiprocessorCount,
            ci_profile.name) == (3, 60, 'MIG 3g.40gb')
    # Only the compute profile that takes the whole GPU instance.
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
            pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    ci_info = pynvml.nvmlComputeInstanceGetInfo_v2(ci)
    assert (value(ci_info.device), value(ci_info.gpuInstance), ci_info.id,
            ci_info.profileId, ci_info.placement.start,
            ci_info.placement.size) == (value(gpu), value(gi), 0,
                                        ci_profile.id, 0, 3)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    listed = (pynvml.c_nvmlComputeInstance_t * 1)()
    count = ctypes.c_uint()
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, ci_profile.id, listed,
                                              ctypes.byref(count))
    assert count.value == 1 and value(listed[0]) == value(ci)


def test_a_gpu_instance_with_a_compute_instance_is_in_use(library, gpu):
    gi = create(gpu, '2g.20gb', 2)
    ci = create_ci(gi)
    with pytest.raises(pynvml.NVMLError_InUse) as caught:
        pynvml.nvmlGpuInstanceDestroy(gi)
    assert str(caught.value) == 'In use by another client'
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert library.instances(H100) == []
    # Handles of destroyed instances are no longer taken.
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetInfo(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlComputeInstanceGetInfo_v2(ci)


def test_a_process_keeps_its_compute_instance_until_it_ends(library, gpu):
    gi = create(gpu, '1g.10gb', 6)
    ci = create_ci(gi)
    library.run_process(H100, 1, 0, 4242)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlComputeInstanceDestroy(ci)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlGpuInstanceDestroy(gi)
    assert library.instances(H100)[0].ci_ids == (0,)
    library.end_process(H100, 1, 0, 4242)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert library.instances(H100) == []


def mig_devices(handle):
    found = []
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            found.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(
                handle, index))
        except pynvml.NVMLError_NotFound:
            pass
    return found


def test_mig_devices_and_their_uuids(library, gpu):
    gpu_uuid = pynvml.nvmlDeviceGetUUID(gpu)
    for name, start in (('3g.40gb', 0), ('1g.10gb', 4), ('1g.20gb', 6)):
        create_ci(create(gpu, name, start))
    devices = mig_devices(gpu)
    assert len(devices) == 3
    uuids = [pynvml.nvmlDeviceGetUUID(d) for d in devices]
    assert len(set(uuids)) == 3
    assert all(re.fullmatch(r'MIG-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}',
                            u) for u in uuids)
    assert [(pynvml.nvmlDeviceGetGpuInstanceId(d),
             pynvml.nvmlDeviceGetComputeInstanceId(d),
             pynvml.nvmlDeviceGetMemoryInfo(d).total // 2 ** 20)
            for d in devices] == [(1, 0, 40448), (2, 0, 9984), (3, 0, 20096)]
    for device in devices:
        assert pynvml.nvmlDeviceIsMigDeviceHandle(device).value == 1
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(device)
        assert pynvml.nvmlDeviceGetUUID(parent) == gpu_uuid
    assert pynvml.nvmlDeviceIsMigDeviceHandle(gpu).value == 0
    assert [i.uuids for i in library.instances(H100)] == [
        (u,) for u in uuids]
    # Asked again, the same; created again at the same place, new ones.
    assert [pynvml.nvmlDeviceGetUUID(d) for d in mig_devices(gpu)] == uuids
    library.lose_instances(H100)
    for name, start in (('3g.40gb', 0), ('1g.10gb', 4), ('1g.20gb', 6)):
        create_ci(create(gpu, name, start))
    again = [pynvml.nvmlDeviceGetUUID(d) for d in mig_devices(gpu)]
    assert [pynvml.nvmlDeviceGetGpuInstanceId(d)
            for d in mig_devices(gpu)] == [1, 2, 3]
    assert not set(again) & set(uuids)


def test_mig_uuids_are_the_same_for_the_same_steps(mig_nvml):
    def steps():
        mig_nvml(OTHER)
        seen = []
        for address in (H100, OTHER):
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(address)
            create_ci(create(handle, '4g.40gb', 0))
            seen += [pynvml.nvmlDeviceGetUUID(d)
                     for d in mig_devices(handle)]
        return seen

    first = steps()
    assert first == steps()
    assert first[0] != first[1]  # the same instance on another GPU


def test_a_mig_device_handle_is_no_gpu_for_managing_instances(gpu):
    create_ci(create(gpu, '7g.80gb', 0))
    [device] = mig_devices(gpu)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 19)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceId(gpu)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu)


def test_with_mig_disabled_instances_are_not_supported(mig_nvml):
    library = mig_nvml(mig_enabled=False)
    gpu = pynvml.nvmlDeviceGetHandleByPciBusId(H100)
    assert library.static['mig_mode'] == [0, 0]
    assert pynvml.nvmlDeviceGetMigMode(gpu) == [0, 0]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu) == 0
    # The recorded card answered the profiles with MIG disabled.
    assert profiles(gpu)['1g.10gb'].id == 19
    count = ctypes.c_uint()
    placement = pynvml.c_nvmlGpuInstancePlacement_t(0, 1)
    for call in (
            lambda: pynvml.nvmlDeviceCreateGpuInstance(gpu, 19),
            lambda: pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                gpu, 19, ctypes.byref(placement)),
            lambda: pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 19),
            lambda: pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                gpu, 19, None, ctypes.byref(count)),
            lambda: pynvml.nvmlDeviceGetGpuInstances(
                gpu, 19, (pynvml.c_nvmlGpuInstance_t * 7)(),
                ctypes.byref(count)),
            lambda: pynvml.nvmlDeviceGetGpuInstanceById(gpu, 1)):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    assert mig_devices(gpu) == []
    # Utilization is given without MIG only.
    assert pynvml.nvmlDeviceGetUtilizationRates(gpu).gpu == (
        library.sample['gpu_util'])


def test_mig_mode_on(gpu):
    assert pynvml.nvmlDeviceGetMigMode(gpu) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetUtilizationRates(gpu)


def test_a_reboot_loses_the_instances_not_mig_mode(library, gpu):
    gi = create(gpu, '4g.40gb', 0)
    create_ci(gi)
    create_ci(create(gpu, '1g.10gb+me', 4))
    assert len(library.instances(H100)) == 2
    library.lose_instances(H100)
    assert library.instances(H100) == []
    assert starts(gpu) == {}
    assert mig_devices(gpu) == []
    assert capacity(gpu) == EMPTY_CARD_CAPACITY
    assert pynvml.nvmlDeviceGetMigMode(gpu) == [1, 1]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceDestroy(gi)


def test_one_media_engine_set_per_card(library, gpu):
    create(gpu, '1g.10gb+me', 6)
    assert capacity(gpu)['1g.10gb+me'] == 0
    assert capacity(gpu)['7g.80gb'] == 0
    for name, start in (('1g.10gb+me', 0), ('7g.80gb', 0)):
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            create(gpu, name, start)
    # Plain 1g.10gb instances do not need it.
    assert capacity(gpu)['1g.10gb'] == 6
    library.lose_instances(H100)
    create(gpu, '7g.80gb', 0)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(gpu, profile_id(gpu, '1g.10gb+me'))


def test_a_3g_at_4_leaves_room_for_four_1g_a_3g_at_0_for_three(library,
                                                               gpu):
    create(gpu, '3g.40gb', 4)
    assert capacity(gpu)['1g.10gb'] == 4
    for start in (0, 1, 2, 3):
        create(gpu, '1g.10gb', start)
    assert capacity(gpu) == dict.fromkeys(EMPTY_CARD_CAPACITY, 0)
    assert [(i.profile, i.start) for i in library.instances(H100)] == [
        ('3g.40gb', 4), ('1g.10gb', 0), ('1g.10gb', 1), ('1g.10gb', 2),
        ('1g.10gb', 3)]
    library.lose_instances(H100)
    create(gpu, '3g.40gb', 0)
    assert capacity(gpu)['1g.10gb'] == 3
    for start in (4, 5, 6):
        create(gpu, '1g.10gb', start)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create(gpu, '1g.10gb', 3)  # its memory slice is the 3g's


def test_gpus_are_partitioned_apart(mig_nvml):
    library = mig_nvml(OTHER)
    gpu = pynvml.nvmlDeviceGetHandleByPciBusId(H100)
    other = pynvml.nvmlDeviceGetHandleByPciBusId(OTHER)
    create(gpu, '7g.80gb', 0)
    assert capacity(other) == EMPTY_CARD_CAPACITY
    create(other, '7g.80gb', 0)
    library.lose(OTHER)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(other, 0)
    assert len(library.instances(H100)) == 1


def test_a_structure_passed_by_value_is_refused(gpu):
    placement = pynvml.c_nvmlGpuInstancePlacement_t(0, 1)
    with pytest.raises(TypeError):
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(gpu, 19, placement)
    assert starts(gpu) == {}


def test_threads_creating_at_once_share_the_card(library, gpu):
    pid = profile_id(gpu, '1g.10gb')

    def race():
        results = []
        barrier = threading.Barrier(10)

        def one():
            barrier.wait()
            try:
                gi = pynvml.nvmlDeviceCreateGpuInstance(gpu, pid)
                results.append(
                    pynvml.nvmlGpuInstanceGetInfo(gi).placement.start)
            except pynvml.NVMLError_InsufficientResources:
                results.append(None)

        threads = [threading.Thread(target=one) for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    # Switching threads often, so that calls not kept apart would meet.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            library.lose_instances(H100)
            results = race()
            assert sorted(r for r in results if r is not None) == list(
                range(7))
            assert results.count(None) == 3
    finally:
        sys.setswitchinterval(interval)
