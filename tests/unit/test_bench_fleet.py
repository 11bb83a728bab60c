"""The open load of tools/bench/fleet.py: agents on their timers and
instances at their boot times (no fleet is started here)."""

import os
import pathlib
import signal
import threading
import time

import pytest

from tests import script_module

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'bench' / 'fleet.py'


@pytest.fixture(scope='module')
def fleet():
    return script_module.load(SCRIPT, 'bench_fleet')


def test_every_host_takes_its_turns_spread_over_the_interval(fleet):
    turns = fleet.every(['a', 'b', 'c', 'd'], 10.0, 25.0)

    assert turns == [(0.0, 'a'), (2.5, 'b'), (5.0, 'c'), (7.5, 'd'),
                     (10.0, 'a'), (12.5, 'b'), (15.0, 'c'), (17.5, 'd'),
                     (20.0, 'a'), (22.5, 'b')]


def test_the_default_intervals_are_the_agents(fleet):
    from cyborg.conf import agent
    defaults = {opt.name: opt.default for opt in agent.opts}
    intervals = (fleet.REPORT_INTERVAL, fleet.AGENT_HEARTBEAT_INTERVAL)
    assert intervals == (defaults['report_interval'],
                         defaults['heartbeat_interval'])


def test_paced_starts_each_op_at_its_time(fleet):
    started = {}

    def op(item):
        started[item] = time.perf_counter()
        return item, 'odd' if item % 2 else None

    run = fleet.paced([(0.1 * i, i) for i in range(5)], 4, op)

    assert sorted(run.samples) == [0, 2, 4]
    assert run.errors.count == 2 and run.errors.examples == ['odd', 'odd']
    for i in range(5):
        assert started[i] - run.started >= 0.1 * i
    assert run.ended >= started[4]
    assert len(run.late) == 5 and max(run.late) < 0.1


def test_paced_does_not_wait_for_the_slow(fleet):
    # An open load: when every thread is busy the next op starts late
    # rather than being skipped, and the lateness is kept.
    lock = threading.Lock()
    busy = []

    def op(item):
        with lock:
            busy.append(item)
        time.sleep(0.2)
        return item, None

    run = fleet.paced([(0.0, i) for i in range(4)], 2, op)

    assert sorted(run.samples) == [0, 1, 2, 3]
    late = sorted(run.late)
    assert late[1] < 0.1 and late[2] >= 0.15


def test_an_op_that_raises_is_an_error(fleet):
    def op(item):
        raise ValueError('broken %d' % item)

    run = fleet.paced([(0.0, 1)], 1, op)

    assert run.count == 0
    assert run.errors.examples == ['ValueError: broken 1']


def test_the_benchmarks_deadline_stops_the_run_and_disarms(fleet):
    # fleet.py imports tools/bench/device_profiles.py as bench_http.
    bench_http = fleet.bench_http
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(
        signal.SIGALRM)
    try:
        started = time.monotonic()
        with pytest.raises(bench_http.Deadline), bench_http.deadline(1):
            time.sleep(10)
        assert time.monotonic() - started < 5
        # After the block: no alarm left, SIGTERM ignored for the cleanup.
        assert signal.alarm(0) == 0
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        with bench_http.deadline(30), pytest.raises(SystemExit) as stopped:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert stopped.value.code == 128 + signal.SIGTERM
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGALRM, before[1])
