"""tools/bench/mig_churn.py at a tiny size: its whole stack (API,
conductor, agent, NVML stand-in, a real Placement, Nova's events) serves
a few requests; how they ended adds up, and one boot at a time the card
refuses nothing."""

import io
import pathlib

import pytest

from tests import script_module

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'bench' / 'mig_churn.py'


@pytest.fixture(scope='module')
def bench():
    return script_module.load(SCRIPT, 'bench_mig_churn')


# Sixteen at a time with both databases on MariaDB, as ``--db mysql``
# runs it; one at a time with the conductor packing GPUs (the default).
@pytest.mark.parametrize('boots,engine,choice', [
    (1, 'sqlite', 'fullest-when-alone'), (16, 'mysql', 'scheduler')])
def test_every_request_ends_placed_or_refused_once(bench, boots, engine,
                                                   choice):
    out = io.StringIO()
    rows = bench.main(['--requests', '20', '--warmup', '1', '--mixes',
                       'uniform', '--loads', '0.9', '--boots', str(boots),
                       '--rules', 'best-fit', '--seed', 'smoke',
                       '--db', engine, '--gpu-choice', choice], out=out)

    (cells, row), = rows
    assert cells[:4] == ('uniform', '90%', str(boots), 'best-fit')
    assert row.requests == 20
    assert row.placed + row.placement + row.card == 20
    assert row.placed > 0
    # One bind-to-event time per bind, whatever its end.
    assert len(row.seconds) == len(row.estimated) == row.placed + row.card
    assert all(s > 0 for s in row.seconds)
    if boots == 1:
        # The traits Placement filters on are always current.
        assert row.card == 0
    printed = out.getvalue()
    assert ('GPU choice %s (best fit), scheduler (lowest slot); databases '
            'on %s' % (choice, engine)) in printed
    assert 'run time' in printed
    assert printed.count('best-fit') >= 2  # the row and its total
