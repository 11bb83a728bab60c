"""tools/bench/mig_churn_sim.py on a few hundred requests: how requests
end adds up, and a card never refuses what traits in sync let through
one at a time (its refusal rates are not checked here)."""

import pathlib

import pytest

from tests import script_module

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'bench' / 'mig_churn_sim.py'
RULES = ('lowest-slot', 'best-fit')


@pytest.fixture(scope='module')
def sim():
    return script_module.load(SCRIPT)


@pytest.mark.parametrize('pick', ['random', 'pack'])
@pytest.mark.parametrize('mix', ['uniform', 'small-heavy'])
def test_traits_in_sync_one_at_a_time_leave_the_card_nothing_to_refuse(
        sim, mix, pick):
    requests = sim.arrivals(mix, 0.9, 8, 400, 'smoke')
    for rule in RULES:
        out = sim.simulate(requests, 8, rule, 'traits', 1, pick, 'smoke')
        assert out['card'] == 0
        assert out['placed'] + out['placement'] == 400
        # Loaded to 90 %, some requests find no card.
        assert out['placement'] > 0


def test_counters_alone_or_stale_traits_let_the_card_refuse(sim):
    requests = sim.arrivals('uniform', 0.9, 8, 400, 'smoke')
    for view, boots in (('counters', 1), ('traits', 16)):
        for rule in RULES:
            out = sim.simulate(requests, 8, rule, view, boots, 'random',
                               'smoke')
            assert sum(out.values()) == 400
            assert out['card'] > 0, (view, boots, rule)


def test_arrivals_offer_the_load_asked(sim):
    requests = sim.arrivals('small-heavy', 0.7, 8, 4000, 'smoke')
    slices = sum(sim.CARD.profile(name).compute_slices * lifetime
                 for _, name, lifetime in requests)
    # Slice-time offered over the time the requests span, per slice.
    offered = slices / requests[-1][0] / (8 * sim.CARD.compute_slices)
    assert offered == pytest.approx(0.7, rel=0.1)
    names = {name for _, name, _ in requests}
    assert names == set(sim.MIXES['small-heavy'])


def test_the_table_has_a_row_per_case_and_is_the_same_for_a_seed(
        sim, capsys):
    argv = ['--requests', '300', '--seed', '7']
    assert sim.main(argv) == 0
    first = capsys.readouterr().out
    assert sim.main(argv) == 0
    assert capsys.readouterr().out == first

    rows = [line.split() for line in first.splitlines()[2:]]
    # 2 mixes x 2 loads x 2 views x 2 boots x 2 rules.
    assert len(rows) == 32
    for row in rows:
        mix, load, view, boots, rule, requests, placed = row[:7]
        assert requests == '300' and int(placed) <= 300
        if view == 'traits' and boots == '1':
            assert row[8] == '0.00'
        # The ratio of refusals stands on the best-fit rows only.
        assert len(row) == (10 if rule == 'best-fit' else 9)
