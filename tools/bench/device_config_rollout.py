"""Benchmark a device configuration rollout over simulated hosts.

    python tools/bench/device_config_rollout.py [--hosts 20]
        [--widths 1,4] [--num-vfs 8] [--db sqlite|mysql|postgresql]

For each width (``[conductor] config_drain_hosts``): a fresh database and
Placement, ``--hosts`` hosts each with an agent (in this process, on the
in-process transport) whose Intel NIC driver reads a sysfs tree of its
own holding the recorded X710 port with 4 VFs, and the conductor's
rollout. One SR-IOV policy of ``--num-vfs`` VFs selects every port; the
rollout passes run back to back until every device is applied. Printed:
the seconds from the policy's creation to the last device applied, the
passes it took, and per playbook run the wall time and what the
privileged side's processes (setpriv, ansible-runner, ansible-playbook
and its modules) used: CPU seconds (user + system) and the largest
resident set of any of them.

The pieces are those of ``tests/functional/conductor/
test_device_config_rollout.py`` (its ``Rig``): the real ansible-runner
and ansible-core run the shipped ``sriov_vfs`` pair against each host's
tree, and a stand-in for the kernel makes the VFs the playbook asks for.
The hosts' agents share this process; their own CPU is small beside the
playbooks' and is not counted. The simulated hosts also share this
machine's cores, where real hosts each run their own playbook on their
own: a run is CPU-bound (ansible's start), so a width above the number
of cores here cannot show its speed-up; on real hosts a rollout takes
about hosts / width x the time of one run.
"""

import argparse
import contextlib
import os
import pathlib
import resource
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.db import session  # noqa: E402
from tests import db_servers  # noqa: E402
from tests import placement_service  # noqa: E402
from tests.conftest import create_schema  # noqa: E402
from tests.conftest import make_conf  # noqa: E402
from tests.functional.conductor import test_device_config_rollout as rig_module  # noqa: E402

MAX_PASSES = 1000


class Measured:
    """Wraps each host's kernel stand-in: times every playbook run and
    what its processes used."""

    def __init__(self):
        self.runs = []  # wall seconds of each run

    def wrap(self, kernel):
        follow = kernel.follow

        def measured(pair, action, variables):
            started = time.monotonic()
            result = follow(pair, action, variables)
            self.runs.append(time.monotonic() - started)
            return result
        agent = kernel.rig.agents[kernel.host]
        agent.run_playbook = measured


def one_request_at_a_time(app):
    """Placement's app behind a lock: its SQLite database takes one
    writer at a time, and the hosts' syncs come from several threads
    (a deployed Placement has a server database)."""
    lock = threading.Lock()

    def locked(environ, start_response):
        with lock:
            return list(app(environ, start_response))
    return locked


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rollout(args, width, directory):
    db_url = db_servers.create_database(args.db, directory)
    placement = None
    try:
        create_schema(db_url)
        conf = make_conf(db_url)
        db = session.Database(conf)
        placement = placement_service.PlacementService(directory).start()
        placement.app = one_request_at_a_time(placement.app)
        context = cyborg_context.admin_context(db)
        measured = Measured()
        with contextlib.ExitStack() as stack:
            rig = rig_module.Rig(conf, db, directory, placement, stack)
            rig.rollout.drain_hosts = width
            for n in range(args.hosts):
                measured.wrap(rig.add_host('host-%02d' % n))
            cpu_before = children_cpu()
            started = time.monotonic()
            made = rig_module.create_policy(rig.api, num_vfs=args.num_vfs)
            passes = 0
            while True:
                rig.rollout.run_pass(context)
                passes += 1
                states = [row['state'] for row in rig.api.get(
                    '%s/%s/status' % (rig_module.POLICIES, made['uuid']),
                    headers=rig_module.ADMIN).json['status']]
                if all(state == 'applied' for state in states):
                    break
                if 'failed' in states or passes >= MAX_PASSES:
                    raise RuntimeError('rollout stuck: %s' % states)
            seconds = time.monotonic() - started
            cpu = children_cpu() - cpu_before
        db.dispose()
        return {'seconds': seconds, 'passes': passes, 'devices': len(states),
                'runs': measured.runs, 'cpu_per_run': cpu / len(
                    measured.runs)}
    finally:
        if placement is not None:
            placement.stop()
        db_servers.drop_database(db_url)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=20)
    parser.add_argument('--widths', default='1,4')
    parser.add_argument('--num-vfs', type=int, default=8)
    parser.add_argument('--db', default='sqlite',
                        choices=('sqlite', 'mysql', 'postgresql'))
    args = parser.parse_args(argv)
    print('%d hosts, one policy of %d VFs on each X710 port, %s'
          % (args.hosts, args.num_vfs, args.db))
    for width in [int(w) for w in args.widths.split(',')]:
        with tempfile.TemporaryDirectory(prefix='rollout-bench-') as tmp:
            got = rollout(args, width, pathlib.Path(tmp))
        runs = got['runs']
        print('  %d draining at once: %d devices applied in %.1f s (%d '
              'passes); per playbook run: wall %.2f s median (max %.2f), '
              'CPU %.2f s' % (
                  width, got['devices'], got['seconds'], got['passes'],
                  statistics.median(runs), max(runs), got['cpu_per_run']))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print('  largest resident set of a playbook run\'s processes: %.0f MiB'
          % peak)
    return 0


if __name__ == '__main__':
    sys.exit(main())
