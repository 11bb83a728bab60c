"""The MIG fitter against the H100 80GB's tables, as recorded from a real
card (``nvidia-smi mig -lgip``) and as NVIDIA publishes its placements
(copies in ``data/``)."""

import pathlib
import re

import pytest

from cyborg.device_config import mig

DATA = pathlib.Path(__file__).parent / 'data'
H100 = mig.H100_80GB


def _recorded_profiles():
    """{name: (GI profile id, instances)} of ``nvidia-smi mig -lgip``."""
    rows = re.findall(r'^\|\s+\d+\s+MIG (\S+)\s+(\d+)\s+\d+/(\d+)\s',
                      (DATA / 'h100-mig-lgip.txt').read_text(), re.M)
    return {name: (int(gi), int(total)) for name, gi, total in rows}


def published_placements():
    """{name: (GI id, max, memory slices, compute slices, starts)} of the
    table in ``h100-mig-placements.md``."""
    table = {}
    for line in (DATA / 'h100-mig-placements.md').read_text().splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        if len(cells) != 7 or not re.match(r'\d+g\.', cells[0]):
            continue
        # '0, 2, 4', '0–6 (uses ...)' or '0 (uses ...)'.
        starts = cells[6].split('(')[0].strip()
        if '–' in starts:
            low, high = starts.split('–')
            starts = tuple(range(int(low), int(high) + 1))
        else:
            starts = tuple(int(s) for s in starts.split(','))
        table[cells[0]] = (int(cells[1]), int(cells[2]), int(cells[4]),
                           int(cells[5]), starts)
    return table


def test_the_profiles_are_those_the_card_reported():
    recorded = _recorded_profiles()
    assert len(recorded) == 7
    assert {p.name: (p.gi_profile_id, p.max_instances)
            for p in H100.profiles} == recorded


def test_the_placements_are_those_published():
    published = published_placements()
    assert len(published) == 7
    assert {p.name: (p.gi_profile_id, p.max_instances, p.memory_slices,
                     p.compute_slices, p.starts)
            for p in H100.profiles} == published


@pytest.mark.parametrize('layout', [
    {'1g.10gb': 7},
    {'4g.40gb': 1, '3g.40gb': 1},
    {'7g.80gb': 1},
    {'3g.40gb': 2},
    {'2g.20gb': 3, '1g.10gb': 1},
    {'1g.20gb': 4},
    {'2g.20gb': 2, '3g.40gb': 1},
    {'1g.10gb': 3, '3g.40gb': 1},
    {'1g.10gb+me': 1, '1g.10gb': 6},
    {},
])
def test_layouts_that_fit(layout):
    placed = mig.place(H100, layout)

    assert sorted(name for name, _ in placed) == sorted(
        name for name, count in layout.items() for _ in range(count))
    memory, compute = set(), set()
    for name, start in placed:
        profile = H100.profile(name)
        assert start in profile.starts
        slices = set(range(start, start + profile.memory_slices))
        assert not slices & memory
        memory |= slices
        slices = set(range(start, start + profile.compute_slices))
        assert not slices & compute and max(slices) < H100.compute_slices
        compute |= slices


@pytest.mark.parametrize('layout, why', [
    ({'4g.40gb': 2}, 'offers at most 1 instance(s) of 4g.40gb, not 2.'),
    ({'1g.10gb': 8}, 'offers at most 7 instance(s) of 1g.10gb'),
    # Memory: 2 + 7 = 9 slices of 8.
    ({'1g.20gb': 1, '1g.10gb': 7}, 'cannot place'),
    # Memory: 4 + 4 + 1 = 9 of 8.
    ({'4g.40gb': 1, '3g.40gb': 1, '1g.10gb': 1}, 'cannot place'),
    # Memory 8 of 8, but compute 4 + 2 + 2 = 8 of 7: no 2g.20gb starts
    # at slot 6.
    ({'4g.40gb': 1, '2g.20gb': 2}, 'cannot place'),
    ({'2g.20gb': 3, '1g.20gb': 1, '1g.10gb': 1}, 'cannot place'),
    ({'7g.80gb': 1, '1g.10gb': 1}, 'cannot place'),
    ({'7g.80gb': 1, '1g.10gb+me': 1}, 'one media-engine set'),
    ({'1g.5gb': 1}, 'has no MIG profile 1g.5gb'),
])
def test_layouts_that_do_not_fit(layout, why):
    with pytest.raises(mig.Unfit, match=re.escape(why)):
        mig.place(H100, layout)
    assert not mig.fits(H100, layout)


def test_fragmentation_of_the_published_example():
    # 1g.10gb instances at slots 0, 1 and 5 leave 4 compute and 5 memory
    # slices free, yet neither a 3g.40gb (starts 0 or 4) nor a 4g.40gb
    # (start 0) can be created.
    held = [('1g.10gb', 0), ('1g.10gb', 1), ('1g.10gb', 5)]

    assert not mig.fits(H100, {'3g.40gb': 1}, held)
    assert not mig.fits(H100, {'4g.40gb': 1}, held)
    with pytest.raises(mig.Unfit, match='next to the instances it holds'):
        mig.place(H100, {'3g.40gb': 1}, held)
    # What is left still takes smaller instances, at their own starts.
    assert mig.place(H100, {'2g.20gb': 1}, held) == [('2g.20gb', 2)]
    assert mig.fits(H100, {'1g.10gb': 4}, held)
    assert not mig.fits(H100, {'1g.10gb': 5}, held)
    # The same instances, placed by the fitter, leave room for a 3g.40gb.
    assert mig.fits(H100, {'1g.10gb': 3, '3g.40gb': 1})


def test_the_h100_ids_name_its_table():
    assert mig.card_of('10de', '2330') is H100
    assert mig.card_of('10DE', '2331') is H100
    assert mig.card_of('10de', '20b0') is None
