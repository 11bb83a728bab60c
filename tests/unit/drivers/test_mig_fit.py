"""The start slots a card chooses for MIG instances, and what it tells
Placement, on the H100 80GB's table (``cyborg.device_config.mig``)."""

import pytest

from cyborg.accelerator.drivers.gpu import mig_fit
from cyborg.device_config import mig

H100 = mig.H100_80GB
BIG = ('3g.40gb', '4g.40gb')


def created(rule, steps):
    """The instances left after ``steps``: ('+', key, profile) creates at
    the rule's start, ('-', key) destroys what ``key`` created."""
    live = {}
    for step in steps:
        if step[0] == '+':
            _, key, name = step
            start = mig_fit.choose_start(H100, list(live.values()), name,
                                         rule)
            assert start is not None, (rule, step, live)
            live[key] = (name, start)
        else:
            del live[step[1]]
    return sorted(live.values(), key=lambda instance: instance[1])


def arrive(rule, names):
    """Create ``names`` in turn; the starts, None for a refusal."""
    held, starts = [], []
    for name in names:
        start = mig_fit.choose_start(H100, held, name, rule)
        starts.append(start)
        if start is not None:
            held.append((name, start))
    return starts


def test_creatable_is_what_the_fitter_can_add_in_every_reachable_state():
    # Every set of instances the card can hold, grown from an empty card.
    states, todo = set(), [frozenset()]
    while todo:
        held = todo.pop()
        if held in states:
            continue
        states.add(held)
        for profile in H100.profiles:
            for start in mig_fit.free_starts(H100, held, profile.name):
                todo.append(held | {(profile.name, start)})
    assert len(states) == 2319
    for held in states:
        creatable = mig_fit.creatable(H100, list(held))
        for profile in H100.profiles:
            most = 0
            while mig.fits(H100, {profile.name: most + 1}, list(held)):
                most += 1
            assert creatable[profile.name] == most, (held, profile.name)
        assert mig_fit.traits(H100, list(held)) == [
            name for name, count in creatable.items() if count]


def test_creatable_on_an_empty_card_and_next_to_the_media_engine():
    assert mig_fit.creatable(H100, []) == {
        '1g.10gb': 7, '1g.10gb+me': 1, '1g.20gb': 4, '2g.20gb': 3,
        '3g.40gb': 2, '4g.40gb': 1, '7g.80gb': 1}
    held = [('1g.10gb+me', 3)]
    assert mig_fit.creatable(H100, held) == {
        '1g.10gb': 6, '1g.10gb+me': 0, '1g.20gb': 3, '2g.20gb': 2,
        '3g.40gb': 1, '4g.40gb': 0, '7g.80gb': 0}


def test_free_starts():
    held = [('1g.10gb', 0), ('1g.10gb', 1), ('1g.10gb', 5)]
    assert mig_fit.free_starts(H100, held, '1g.10gb') == [2, 3, 4, 6]
    assert mig_fit.free_starts(H100, held, '2g.20gb') == [2]
    assert mig_fit.free_starts(H100, held, '1g.20gb') == [2, 6]
    assert mig_fit.free_starts(H100, held, '3g.40gb') == []
    # The media engine is taken, and one 4g.40gb is all a card offers.
    assert mig_fit.free_starts(H100, [('7g.80gb', 0)], '1g.10gb+me') == []
    assert mig_fit.free_starts(H100, [('4g.40gb', 0)], '4g.40gb') == []


def test_a_table_without_the_profile_or_with_overlaps_is_refused():
    with pytest.raises(mig.Unfit, match='no MIG profile 1g.5gb'):
        mig_fit.choose_start(H100, [], '1g.5gb')
    with pytest.raises(ValueError, match='overlaps'):
        mig_fit.counters(H100, [('2g.20gb', 2), ('1g.10gb', 3)])
    with pytest.raises(ValueError, match='cannot start at slot 7'):
        mig_fit.counters(H100, [('1g.10gb', 7)])
    with pytest.raises(ValueError, match='unknown rule'):
        mig_fit.choose_start(H100, [], '1g.10gb', rule='first-fit')


@pytest.mark.parametrize('held, name, lowest, best', [
    # Empty card: a 3g.40gb at 4 leaves the 4g.40gb at 0 creatable; at
    # 0 it would leave only another 3g.40gb.
    ([], '3g.40gb', 0, 4),
    # A 1g.10gb fills the first half from 0 up: both rules agree.
    ([('1g.10gb', 0), ('1g.10gb', 1)], '1g.10gb', 2, 2),
    # Left at 4 by its neighbours: at 0 it would block both halves for
    # the 40gb profiles; at 5 the 4g.40gb still fits at 0.
    ([('1g.10gb', 4)], '1g.10gb', 0, 5),
    # Next to a 1g.20gb at 6 a 2g.20gb at 0 or 2 breaks the first half;
    # at 4 it leaves the 4g.40gb room.
    ([('1g.20gb', 6)], '2g.20gb', 0, 4),
    # Size before layouts: at 6 a 1g.20gb would leave more ways to fill
    # the card with small instances, and no 40gb profile; at 2 the
    # 3g.40gb at 4 stays.
    ([('1g.10gb', 1)], '1g.20gb', 2, 2),
    # Nowhere to go.
    ([('7g.80gb', 0)], '1g.10gb', None, None),
])
def test_each_rules_pick(held, name, lowest, best):
    assert mig_fit.choose_start(H100, held, name, 'lowest-slot') == lowest
    assert mig_fit.choose_start(H100, held, name, 'best-fit') == best
    assert mig_fit.choose_start(H100, held, name) == best


def test_best_fit_breaks_a_tie_of_sizes_with_the_layouts_left():
    # A first 1g.10gb leaves a 40gb profile creatable wherever it goes:
    # the 3g.40gb at 4 from 0-3, the 4g.40gb at 0 from 4-6. Counting
    # the free starts left would take 6 (the first half's profiles keep
    # theirs); counting the layouts left takes 0, where slot 7 is not
    # stranded and four 1g.10gb still leave the 3g.40gb room.
    def free_starts_after(start):
        held = [('1g.10gb', start)]
        return sum(len(mig_fit.free_starts(H100, held, profile.name))
                   for profile in H100.profiles)

    assert [free_starts_after(start) for start in range(7)] == [
        18, 18, 18, 18, 19, 19, 20]
    assert mig_fit.choose_start(H100, [], '1g.10gb') == 0
    # A 2g.20gb next to a 3g.40gb at 4 has 0 and 2, each leaving one
    # more 2g.20gb or two 1g.10gb: the lowest wins the tie.
    held = [('3g.40gb', 4)]
    assert mig_fit.free_starts(H100, held, '2g.20gb') == [0, 2]
    assert mig_fit.choose_start(H100, held, '2g.20gb') == 0


def test_best_fit_avoids_the_fragmentation_lowest_slot_falls_into():
    # Two 2g.20gb and a 1g.10gb; the 2g.20gb go, another 1g.10gb comes.
    steps = [('+', 'a', '2g.20gb'), ('+', 'b', '2g.20gb'),
             ('+', 'c', '1g.10gb'), ('-', 'a'), ('-', 'b'),
             ('+', 'd', '1g.10gb')]

    lowest = created('lowest-slot', steps)
    best = created('best-fit', steps)

    # lowest-slot: 2g.20gb at 0 and 2, 1g.10gb at 4 and then 0: five
    # compute and six memory slices free, yet no 40gb profile fits.
    assert lowest == [('1g.10gb', 0), ('1g.10gb', 4)]
    assert mig_fit.counters(H100, lowest) == (5, 6, 1)
    assert not set(BIG) & set(mig_fit.traits(H100, lowest))
    # The same two instances placed by best fit leave the 4g.40gb room.
    assert sorted(name for name, _ in best) == ['1g.10gb', '1g.10gb']
    assert '4g.40gb' in mig_fit.traits(H100, best)
    assert mig.fits(H100, {'4g.40gb': 1}, best)


@pytest.mark.parametrize('position', range(5))
def test_a_3g_40gb_and_four_1g_10gb_fit_in_any_arrival_order(position):
    names = ['1g.10gb'] * 4
    names.insert(position, '3g.40gb')

    starts = arrive('best-fit', names)

    assert None not in starts
    assert starts[position] == 4
    assert sorted(starts[:position] + starts[position + 1:]) == [0, 1, 2, 3]


def test_lowest_slot_refuses_the_last_1g_10gb_after_a_3g_40gb():
    names = ['3g.40gb'] + ['1g.10gb'] * 4

    # The 3g.40gb at 0 leaves 4, 5 and 6: slot 3 is its memory.
    assert arrive('lowest-slot', names) == [0, 4, 5, 6, None]
    assert arrive('best-fit', names) == [4, 0, 1, 2, 3]


def test_traits_after_a_3g_40gb():
    at_4 = mig_fit.traits(H100, [('3g.40gb', 4)])
    at_0 = mig_fit.traits(H100, [('3g.40gb', 0)])

    # At 4 the first half is whole: a 4g.40gb (compute 0-3) still fits.
    assert at_4 == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                    '3g.40gb', '4g.40gb']
    # At 0 the 4g.40gb, which only starts at 0, is gone.
    assert at_0 == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                    '3g.40gb']
    both = [('3g.40gb', 0), ('3g.40gb', 4)]
    # Compute slice 3 is left, but every profile's memory is taken.
    assert mig_fit.traits(H100, both) == []
    assert mig_fit.counters(H100, both) == (1, 0, 1)


def test_counters():
    assert mig_fit.counters(H100, []) == (7, 8, 1)
    assert mig_fit.counters(H100, [('7g.80gb', 0)]) == (0, 0, 0)
    # The published example: 4 compute and 5 memory slices free, the
    # media engine too, and no 40gb profile creatable.
    held = [('1g.10gb', 0), ('1g.10gb', 1), ('1g.10gb', 5)]
    assert mig_fit.counters(H100, held) == (4, 5, 1)
    assert not set(BIG) & set(mig_fit.traits(H100, held))
    assert mig_fit.counters(
        H100, [('1g.10gb+me', 6), ('1g.20gb', 0), ('2g.20gb', 2)]) == (
            3, 3, 0)


def test_best_fit_leaves_a_start_for_the_profiles_waiting_for_the_card():
    # Alone, a first 1g.10gb goes to slot 0, the 4g.40gb's only start.
    assert mig_fit.choose_start(H100, [], '1g.10gb') == 0
    start = mig_fit.choose_start(H100, [], '1g.10gb', waiting=['4g.40gb'])
    assert start >= 4
    assert mig_fit.choose_start(H100, [('1g.10gb', start)],
                                '4g.40gb') == 0
    # A profile that could not follow anyway changes nothing.
    assert mig_fit.choose_start(H100, [], '1g.10gb',
                                waiting=['7g.80gb']) == 0
    # NVML's implicit choice knows nothing of waiting binds.
    assert mig_fit.choose_start(H100, [], '1g.10gb', 'lowest-slot',
                                waiting=['4g.40gb']) == 0


def test_still_fit_packs_the_waiting_profiles_largest_first():
    # In the order given, the 1g.10gb would take the 4g.40gb's start.
    assert mig_fit.still_fit(H100, [], ['1g.10gb', '4g.40gb']) == 2
    # Next to a 3g.40gb at 4, four compute and memory slices are left.
    held = [('3g.40gb', 4)]
    assert mig_fit.still_fit(H100, held, ['4g.40gb']) == 1
    assert mig_fit.still_fit(H100, held, ['2g.20gb'] * 3) == 2
    assert mig_fit.still_fit(H100, held, ['1g.10gb'] * 5) == 4
