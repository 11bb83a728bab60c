"""Creating and destroying MIG instances through the real NVML bindings,
on the stand-in with the H100's MIG behaviour."""

import ctypes
import dataclasses
import sys

import pynvml
import pytest

from cyborg.accelerator.drivers.gpu import mig_nvml as mig_ops
from cyborg.accelerator.drivers.gpu import nvml
from cyborg.device_config import mig
from tests.threads import race
from tests.unit.drivers import nvml_mig_standin
from tests.unit.drivers import nvml_standin
from tests.unit.drivers.trees import recorded

H100 = '0000:00:06.0'
OTHER = '0000:00:07.0'

EMPTY_CARD = {'1g.10gb': 7, '1g.20gb': 4, '2g.20gb': 3, '3g.40gb': 2,
              '4g.40gb': 1, '7g.80gb': 1, '1g.10gb+me': 1}


def _faulty(name):
    """Entry point ``name`` of the stand-in, answering the code a test
    put in ``faults[name]`` instead where there is one."""
    original = getattr(nvml_mig_standin.MIGCapableNVML, name).__wrapped__

    def entry(self, *args):
        fault = self.faults.get(name)
        return original(self, *args) if fault is None else fault
    entry.__name__ = name
    return nvml_standin.RecordedNVML._entry(entry)


class FaultyNVML(nvml_mig_standin.MIGCapableNVML):
    """The MIG stand-in with a few entry points a test can make fail."""

    def __init__(self, *args, **kw):
        self.faults = {}  # entry point -> NVML return code
        super().__init__(*args, **kw)

    nvmlGpuInstanceCreateComputeInstance = _faulty(
        'nvmlGpuInstanceCreateComputeInstance')
    nvmlGpuInstanceDestroy = _faulty('nvmlGpuInstanceDestroy')
    nvmlDeviceGetUUID = _faulty('nvmlDeviceGetUUID')


@pytest.fixture
def library(mig_nvml):
    return mig_nvml()


@pytest.fixture
def faulty(monkeypatch):
    return nvml_standin.install(monkeypatch, FaultyNVML(
        recorded.recording('h100-vm', 'nvml-record.jsonl')))


@pytest.fixture
def card():
    return mig_ops.MIGCard(H100)


def held(library, address=H100):
    """[(GI id, profile, start, MIG UUIDs)] the stand-in holds."""
    return [(i.gi_id, i.profile, i.start, i.uuids)
            for i in library.instances(address)]


def test_profiles_are_nvmls_and_agree_with_the_h100_table(library, card):
    profiles = card.profiles()
    assert {p.name: p.id for p in profiles.values()} == {
        p.name: p.gi_profile_id for p in mig.H100_80GB.profiles}
    assert profiles[pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE] == (
        mig_ops.GIProfile(
            index=pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, id=9,
            name='3g.40gb', slices=3, instances=2, memory_mib=40448,
            media_engine=False, placements=((0, 4), (4, 4))))
    assert card.check_table(mig.H100_80GB) == []
    assert card.check_table(mig.card_of('10de', '2330')) == []


def test_a_card_whose_placements_differ_from_the_table(monkeypatch,
                                                       mig_nvml):
    # A card that places 3g.40gb at 0 only (the stand-in takes its
    # placements from the table it finds for the recorded GPU).
    other = dataclasses.replace(mig.H100_80GB.profile('3g.40gb'), starts=(0,))
    monkeypatch.setitem(mig.CARDS, ('10de', '2330'), dataclasses.replace(
        mig.H100_80GB, profiles=tuple(
            other if p.name == '3g.40gb' else p
            for p in mig.H100_80GB.profiles)))
    mig_nvml()
    assert mig_ops.MIGCard(H100).check_table(mig.H100_80GB) == [
        '3g.40gb on the GPU at 0000:00:06.0: NVML places it at starts 0, '
        'the NVIDIA H100 80GB table at 0, 4.']


def test_a_table_that_differs_from_nvml(library, card):
    table = mig.H100_80GB
    changed = []
    for profile in table.profiles:
        if profile.name == '1g.10gb':
            profile = dataclasses.replace(profile, gi_profile_id=18,
                                          max_instances=6)
        elif profile.name == '7g.80gb':
            profile = dataclasses.replace(profile, media_engine=False,
                                          compute_slices=8,
                                          memory_slices=7)
        elif profile.name == '1g.20gb':
            continue
        changed.append(profile)
    changed.append(mig.Profile('2g.10gb', 40, 3, 1, 2, (0, 2, 4)))
    differences = card.check_table(dataclasses.replace(
        table, name='other card', profiles=tuple(changed)))
    at = ' on the GPU at 0000:00:06.0: NVML '
    assert differences == [
        '1g.10gb' + at + 'gives GI profile id 19, the other card table 18.',
        '1g.10gb' + at + 'allows 7 instances, the other card table 6.',
        '7g.80gb' + at + 'gives it 7 compute slices, the other card table '
        '8.',
        '7g.80gb' + at + 'says it uses the media engine: yes, the other '
        'card table: no.',
        '7g.80gb' + at + 'gives it 8 memory slices, the other card table 7.',
        'NVML offers no profile 2g.10gb on the GPU at 0000:00:06.0; the '
        'other card table has it.',
        'NVML offers profile 1g.20gb (GI profile id 15) on the GPU at '
        '0000:00:06.0; the other card table lacks it.']


def test_create_a_3g_at_4_then_four_1g(library, card):
    assert card.remaining() == EMPTY_CARD
    big = card.create('3g.40gb', 4)
    assert card.remaining() == {'1g.10gb': 4, '1g.20gb': 2, '2g.20gb': 2,
                                '3g.40gb': 1, '4g.40gb': 1, '7g.80gb': 0,
                                '1g.10gb+me': 1}
    small = [card.create('1g.10gb', 0)]
    assert card.remaining()['4g.40gb'] == 0
    small += [card.create('1g.10gb', start) for start in (1, 2, 3)]
    assert card.remaining() == dict.fromkeys(EMPTY_CARD, 0)
    made = [big, *small]
    # The ids and UUIDs NVML gave, each instance its own.
    assert [(m.gi_id, m.profile, m.start, (m.mig_uuid,)) for m in made] == (
        held(library))
    assert len({m.mig_uuid for m in made}) == 5
    assert {(m.parent_address, m.ci_id) for m in made} == {(H100, 0)}
    assert card.instances() == made
    assert 'nvmlDeviceCreateGpuInstance' not in library.calls
    assert library.calls.count(
        'nvmlDeviceCreateGpuInstanceWithPlacement') == 5


def test_nvml_is_asked_little(library, card):
    card.remaining()
    before = len(library.calls)
    instance = card.create('2g.20gb', 2)
    # The GI, its info, the CI's profile, the CI, its info, and its MIG
    # device among the 7 MIG device indices (id, CI id, UUID).
    assert len(library.calls) - before == 15
    card.instances()
    card.destroy(instance)
    card.check_table(mig.H100_80GB)
    # Started, found and its profiles read once.
    assert [library.calls.count(c) for c in (
        'nvmlInitWithFlags', 'nvmlDeviceGetHandleByPciBusId_v2',
        'nvmlDeviceGetMigMode', 'nvmlDeviceGetMaxMigDeviceCount',
        'nvmlDeviceGetGpuInstancePossiblePlacements_v2')] == [1, 1, 1, 1, 7]
    assert library.calls.count('nvmlDeviceGetGpuInstanceProfileInfoV') == (
        pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


def test_fragmentation_refuses_a_3g_and_leaves_the_card_as_it_was(
        library, card):
    for start in (0, 1, 5):
        card.create('1g.10gb', start)
    before = held(library)
    for start in (0, 4):
        with pytest.raises(mig_ops.MIGRefused) as caught:
            card.create('3g.40gb', start)
        assert str(caught.value) == (
            'The GPU at 0000:00:06.0 has no free placement for 3g.40gb at '
            'start %d: it holds 1g.10gb at 0, 1g.10gb at 1, 1g.10gb at 5 '
            '(NVML: Insufficient Resources).' % start)
        assert caught.value.status == 409
    assert held(library) == before
    assert card.remaining()['1g.10gb'] == 4
    assert 'nvmlDeviceCreateGpuInstance' not in library.calls


def test_a_start_or_profile_the_card_does_not_offer(library, card):
    with pytest.raises(mig_ops.MIGRefused) as caught:
        card.create('3g.40gb', 2)
    assert str(caught.value) == ('3g.40gb cannot start at slice 2 on the GPU '
                                 'at 0000:00:06.0: its starts are 0, 4.')
    with pytest.raises(mig_ops.MIGRefused) as caught:
        card.create('5g.50gb', 0)
    assert str(caught.value).startswith(
        'The GPU at 0000:00:06.0 has no MIG profile 5g.50gb; it offers '
        '1g.10gb, 2g.20gb, ')
    assert 'nvmlDeviceCreateGpuInstanceWithPlacement' not in library.calls
    assert held(library) == []


def test_destroy_removes_the_ci_then_the_gi(library, card):
    kept = card.create('1g.10gb', 6)
    gone = card.create('4g.40gb', 0)
    assert card.destroy(gone) is True
    assert held(library) == [(1, '1g.10gb', 6, (kept.mig_uuid,))]
    destroys = [c for c in library.calls if c.endswith('Destroy')]
    assert destroys == ['nvmlComputeInstanceDestroy',
                        'nvmlGpuInstanceDestroy']
    assert card.remaining()['4g.40gb'] == 1


def test_destroy_of_an_instance_with_a_process_keeps_it(library, card):
    instance = card.create('3g.40gb', 0)
    library.run_process(H100, instance.gi_id, instance.ci_id, 4242)
    with pytest.raises(mig_ops.MIGInUse) as caught:
        card.destroy(instance)
    assert str(caught.value) == (
        'MIG instance 3g.40gb at start 0 (GPU instance 1, compute instance '
        '0, %s) on the GPU at 0000:00:06.0 has running processes: nothing '
        'destroyed (NVML: In use by another client).' % instance.mig_uuid)
    assert held(library) == [(1, '3g.40gb', 0, (instance.mig_uuid,))]
    library.end_process(H100, instance.gi_id, instance.ci_id, 4242)
    assert card.destroy(instance) is True
    assert held(library) == []


@pytest.mark.parametrize('name,start,now_is', [
    ('1g.10gb', 0, 'holds compute instance 0 (%(uuid)s) now'),
    ('2g.20gb', 2, 'is 2g.20gb at start 2 now'),
])
def test_a_late_destroy_leaves_the_instance_that_took_the_id(
        library, card, name, start, now_is):
    recorded_one = card.create('1g.10gb', 0)
    library.lose_instances(H100)  # a reboot the agent did not see
    now = card.create(name, start)
    assert now.gi_id == recorded_one.gi_id
    with pytest.raises(mig_ops.MIGIdentityMismatch) as caught:
        card.destroy(recorded_one)
    assert str(caught.value) == (
        'GPU instance 1 on the GPU at 0000:00:06.0 %s, not MIG instance '
        '%s: nothing destroyed.' % (now_is % {'uuid': now.mig_uuid},
                                    recorded_one))
    assert held(library) == [(1, name, start, (now.mig_uuid,))]
    assert not [c for c in library.calls if c.endswith('Destroy')]
    assert card.destroy(now) is True


def test_an_instance_of_another_gpu_is_not_destroyed_here(mig_nvml):
    library = mig_nvml(OTHER)
    here, there = mig_ops.MIGCard(H100), mig_ops.MIGCard(OTHER)
    mine = here.create('7g.80gb', 0)
    theirs = there.create('7g.80gb', 0)
    with pytest.raises(mig_ops.MIGIdentityMismatch) as caught:
        here.destroy(theirs)
    assert str(caught.value) == (
        'MIG instance %s is on the GPU at 0000:00:07.0, not at 0000:00:06.0: '
        'nothing destroyed.' % theirs)
    assert len(library.instances(H100)) == len(library.instances(OTHER)) == 1
    assert here.destroy(mine) and there.destroy(theirs)


def test_destroying_a_vanished_instance_is_harmless(library, card, caplog):
    instance = card.create('2g.20gb', 4)
    library.lose_instances(H100)
    caplog.set_level('INFO', logger=mig_ops.__name__)
    assert card.destroy(instance) is False
    assert 'is gone already' in caplog.text
    assert card.destroy(instance) is False
    assert not [c for c in library.calls if c.endswith('Destroy')]
    assert card.remaining() == EMPTY_CARD


def test_a_gi_without_a_ci_is_listed_and_can_be_destroyed(library, card):
    gpu = pynvml.nvmlDeviceGetHandleByPciBusId(H100)
    placement = pynvml.c_nvmlGpuInstancePlacement_t(2, 2)
    pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
        gpu, 14, ctypes.byref(placement))
    [bare] = card.instances()
    assert bare == mig_ops.MIGInstance(H100, '2g.20gb', 1, None, 2, None)
    assert card.destroy(bare) is True
    assert held(library) == []


@pytest.mark.parametrize('entry,left', [
    ('nvmlGpuInstanceCreateComputeInstance', 'nvmlGpuInstanceDestroy'),
    ('nvmlDeviceGetUUID', 'nvmlComputeInstanceDestroy'),
])
def test_a_failure_after_the_gi_leaves_nothing(faulty, card, entry, left):
    faulty.faults[entry] = pynvml.NVML_ERROR_UNKNOWN
    with pytest.raises(mig_ops.MIGError) as caught:
        card.create('3g.40gb', 4)
    assert 'Unknown Error' in str(caught.value)
    assert 'left' not in str(caught.value)
    assert held(faulty) == []
    assert left in faulty.calls[faulty.calls.index(entry):]
    del faulty.faults[entry]
    assert card.create('3g.40gb', 4).gi_id == 1


def test_a_ci_refused_then_a_gi_not_destroyed_is_reported(faulty, card):
    faulty.faults['nvmlGpuInstanceCreateComputeInstance'] = (
        pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
    faulty.faults['nvmlGpuInstanceDestroy'] = pynvml.NVML_ERROR_UNKNOWN
    with pytest.raises(mig_ops.MIGRefused) as caught:
        card.create('1g.20gb', 2)
    assert str(caught.value) == (
        'NVML could not create the compute instance of GPU instance 1 on the '
        'GPU at 0000:00:06.0: it has no room left for it (NVML: '
        'Insufficient Resources). The GPU instance 1g.20gb at start 2 is '
        'left on it: destroying it failed (NVML: Unknown Error).')
    assert held(faulty) == [(1, '1g.20gb', 2, ())]


def test_a_gi_that_outlives_its_ci_is_reported(faulty, card):
    instance = card.create('1g.10gb', 0)
    faulty.faults['nvmlGpuInstanceDestroy'] = pynvml.NVML_ERROR_IN_USE
    with pytest.raises(mig_ops.MIGInUse) as caught:
        card.destroy(instance)
    assert str(caught.value) == (
        'NVML could not destroy GPU instance 1, whose compute instance is '
        'destroyed, on the GPU at 0000:00:06.0: it is in use (NVML: In use '
        'by another client).')
    assert held(faulty) == [(1, '1g.10gb', 0, ())]


def test_without_the_bindings(library, monkeypatch):
    monkeypatch.setitem(sys.modules, 'pynvml', None)  # import fails
    card = mig_ops.MIGCard(H100)
    for _ in range(2):
        with pytest.raises(mig_ops.MIGUnavailable) as caught:
            card.create('1g.10gb', 0)
        assert str(caught.value) == ('No MIG on the GPU at 0000:00:06.0: %s.'
                                     % nvml.NOT_INSTALLED)
    assert library.calls == []


def test_without_a_driver_then_with_one(mig_nvml, card):
    library = mig_nvml(driver_loaded=False)
    with pytest.raises(mig_ops.MIGUnavailable) as caught:
        card.instances()
    assert str(caught.value) == ('No MIG on the GPU at 0000:00:06.0: NVML '
                                 'cannot start: Driver Not Loaded.')
    library.driver_loaded = True
    assert card.instances() == []


def test_a_gpu_nvml_does_not_see(library):
    with pytest.raises(mig_ops.MIGUnavailable) as caught:
        mig_ops.MIGCard(OTHER).remaining()
    assert str(caught.value) == 'NVML does not see a GPU at 0000:00:07.0.'


@pytest.mark.parametrize('call', [
    lambda card: card.create('1g.10gb', 0),
    lambda card: card.destroy(mig_ops.MIGInstance(H100, '1g.10gb', 1, 0, 0,
                                                   'MIG-x')),
    lambda card: card.instances(),
    lambda card: card.remaining(),
    lambda card: card.profiles(),
    lambda card: card.check_table(mig.H100_80GB),
])
def test_with_mig_mode_off(mig_nvml, card, call):
    library = mig_nvml(mig_enabled=False)
    with pytest.raises(mig_ops.MIGUnavailable) as caught:
        call(card)
    assert str(caught.value) == 'MIG mode is off on the GPU at 0000:00:06.0.'
    library.set_mig_mode(H100, 0, 1)
    with pytest.raises(mig_ops.MIGUnavailable) as caught:
        call(card)
    assert str(caught.value) == ('MIG mode is off on the GPU at '
                                 '0000:00:06.0, on from its next reset.')
    assert 'nvmlDeviceGetGpuInstanceProfileInfoV' not in library.calls


def test_mig_mode_turned_off_after_a_reset(library, card):
    card.create('1g.10gb', 0)
    library.set_mig_mode(H100, 0)
    with pytest.raises(mig_ops.MIGUnavailable) as caught:
        card.create('1g.10gb', 1)
    assert str(caught.value) == (
        'NVML could not create a GPU instance 1g.10gb at start 1 on the GPU '
        'at 0000:00:06.0: the GPU does not support it, or MIG mode is off '
        '(NVML: Not Supported).')
    # The mode is read again.
    with pytest.raises(mig_ops.MIGUnavailable) as caught:
        card.instances()
    assert str(caught.value) == 'MIG mode is off on the GPU at 0000:00:06.0.'


def test_a_lost_gpu(library, card):
    instance = card.create('7g.80gb', 0)
    library.lose(H100)
    with pytest.raises(mig_ops.MIGUnavailable) as caught:
        card.destroy(instance)
    assert str(caught.value) == (
        'NVML could not find GPU instance 0 on the GPU at 0000:00:06.0: NVML '
        'has lost the GPU, which needs a reset.')


def test_threads_destroying_one_instance(library):
    # A card each, as the agent's RPC threads may have.
    cards = [mig_ops.MIGCard(H100) for _ in range(8)]
    for _ in range(5):
        instance = cards[0].create('1g.10gb', 3)
        results = race(8, lambda i, made=instance: cards[i].destroy(made))
        assert sorted(results, key=str) == [False] * 7 + [True]
        assert held(library) == []


def test_threads_creating_and_destroying(library, card):
    def work(start):
        instance = card.create('1g.10gb', start)
        return instance, card.destroy(instance)

    for _ in range(3):
        results = race(7, work)
        assert [r[0].start for r in results] == list(range(7))
        assert all(r[1] for r in results)
        assert held(library) == []
