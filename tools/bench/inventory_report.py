"""Benchmark the conductor's handling of agents' inventory reports.

    python tools/bench/inventory_report.py [--db sqlite|mysql|postgresql|
        sqlite,mysql,postgresql] [--sizes 1,16,64,256] [--repeat 50]
        [--hosts 1000] [--host-devices 16] [--rounds 3]

What runs is what the conductor runs for an RPC ``report_host_inventory``:
``HostSync.report`` on the report as it arrives (a dict), against a fresh
database migrated to head and a real Placement (openstack-placement's
WSGI app on SQLite, in this process).

1. One host with N devices, for each N of ``--sizes``: the first report
   (rows created, providers made in Placement), then ``--repeat``
   unchanged reports. For the unchanged report the database says nothing
   changed and the host's last Placement sync succeeded, so Placement is
   skipped: its time is zero by construction and the figure is the
   conductor's own work (diff + three SELECTs).
2. ``--hosts`` hosts with ``--host-devices`` devices each: every host's
   first report is applied to the database, then every host reports an
   unchanged snapshot ``--rounds`` times, one after another, as one
   conductor would receive them. Placement is left out of this part
   (the hosts' first reports are synced to Placement on the first host
   only): an unchanged report makes no Placement call either way, and
   thousands of providers in a SQLite Placement would measure Placement.

Each device looks like a passthrough GPU: one deployable with two
traits, one attribute and one PCI attach handle.
"""

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import sqlalchemy as sa  # noqa: E402

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.conductor import host_sync as host_sync_module  # noqa: E402
from cyborg.conductor import inventory as inventory_sync  # noqa: E402
from cyborg.db import migration  # noqa: E402
from cyborg.db import session  # noqa: E402
from cyborg.objects import inventory  # noqa: E402
from tests import conftest  # noqa: E402
from tests import db_servers  # noqa: E402
from tests import placement_service  # noqa: E402


class Statements:
    """SQL statements run on the engines (not BEGIN/COMMIT): those of a
    ``Database`` are its ``engines``."""

    def __init__(self, *engines):
        self.count = 0
        for engine in engines:
            sa.event.listen(engine, 'before_cursor_execute', self._seen)

    def _seen(self, conn, cursor, statement, *args):
        if not statement.lstrip().upper().startswith(
                conftest.StatementCounter.TRANSACTION_CONTROL):
            self.count += 1


def device(index):
    address = inventory.PCIAddress('0000', '%02x' % (0x10 + index // 32),
                                   '%02x' % (index % 32), '0')
    return inventory.Device(
        type='GPU', vendor='10de', model='A100', controlpath_type='PCI',
        controlpath_info=address.as_info(),
        std_board_info={'vendor_id': '10de', 'product_id': '20b0'},
        deployables=[inventory.Deployable(
            name='gpu_%s' % str(address).replace(':', '_'),
            num_accelerators=1, resource_class='PGPU',
            driver_name='nvidia_gpu_driver',
            traits=['CUSTOM_GPU_NVIDIA', 'CUSTOM_GPU_PRODUCT_ID_20B0'],
            attach_handles=[inventory.AttachHandle('PCI',
                                                   address.as_info())],
            attributes={'numa_node': str(index % 2)})])


def host_report(hostname, devices):
    return inventory.HostInventory(
        hostname, [device(i) for i in range(devices)]).to_dict()


def timed(call):
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def one_host(context, placement, db, sizes, repeat):
    statements = Statements(*db.engines)
    sync = host_sync_module.HostSync(placement.client())
    print('  one host, N devices (first report includes Placement; the '
          'unchanged report skips it):')
    print('  %6s | %10s %5s %6s | %10s %10s %5s %6s' % (
        'N', 'first ms', 'SQL', 'HTTP', 'unch. p50', 'unch. max', 'SQL',
        'HTTP'))
    for size in sizes:
        hostname = 'bench-%d.example.com' % size
        placement_service.create_compute_node(placement.adapter(), hostname)
        report = host_report(hostname, size)
        statements.count = 0
        first, summary = timed(lambda r=report, h=hostname: sync.report(
            context, r, [h]))
        assert summary['placement']['status'] == 'synced', summary
        first_sql = statements.count
        first_http = summary['placement']['reads'] + summary[
            'placement']['writes']
        times = []
        sync.client.calls.reset()
        statements.count = 0
        for _ in range(repeat):
            elapsed, summary = timed(lambda r=report, h=hostname:
                                     sync.report(context, r, [h]))
            assert not summary['changed'], summary
            assert summary['placement'] == {'status': 'skipped'}, summary
            times.append(elapsed)
        print('  %6d | %10.1f %5d %6d | %10.2f %10.2f %5.1f %6d' % (
            size, first * 1000, first_sql, first_http,
            statistics.median(times) * 1000, max(times) * 1000,
            statements.count / repeat,
            sync.client.calls.reads + sync.client.calls.writes))


def many_hosts(context, db, hosts, devices, rounds):
    statements = Statements(*db.engines)
    reports = [host_report('node%04d.example.com' % i, devices)
               for i in range(hosts)]
    start = time.perf_counter()
    for report in reports:
        inventory_sync.apply_host_inventory(
            context, inventory.HostInventory.from_dict(report))
    first = time.perf_counter() - start
    print('  %d hosts x %d devices: first reports (database only) %.1f s, '
          '%.1f ms/report' % (hosts, devices, first, first * 1000 / hosts))
    for round_number in range(1, rounds + 1):
        statements.count = 0
        times = []
        start = time.perf_counter()
        for report in reports:
            elapsed, changes = timed(
                lambda r=report: inventory_sync.apply_host_inventory(
                    context, inventory.HostInventory.from_dict(r)))
            assert not changes.changed
            times.append(elapsed)
        total = time.perf_counter() - start
        times.sort()
        print('  unchanged round %d: %.0f reports/s, per report p50 %.2f ms '
              'p99 %.2f ms, %.2f SQL statements/report (Placement skipped: '
              'not called, not timed)' % (
                  round_number, hosts / total,
                  statistics.median(times) * 1000,
                  times[int(len(times) * 0.99) - 1] * 1000,
                  statements.count / hosts))


def run(engine_name, args, workdir):
    url = db_servers.create_database(engine_name, workdir)
    placement = None
    try:
        migration.upgrade(url)
        db = session.Database(conftest.make_conf(url))
        context = cyborg_context.admin_context(db)
        placement = placement_service.PlacementService(workdir).start()
        print('%s:' % engine_name)
        one_host(context, placement, db, args.sizes, args.repeat)
        if args.hosts:
            many_hosts(context, db, args.hosts, args.host_devices,
                       args.rounds)
        db.dispose()
    finally:
        if placement is not None:
            placement.stop()
        db_servers.drop_database(url)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--db', default='sqlite',
                        help='sqlite, mysql, postgresql or a comma list')
    parser.add_argument('--sizes', default='1,16,64,256',
                        type=lambda s: [int(n) for n in s.split(',')])
    parser.add_argument('--repeat', type=int, default=50)
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--host-devices', type=int, default=16)
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    for engine_name in args.db.split(','):
        with tempfile.TemporaryDirectory() as workdir:
            run(engine_name, args, pathlib.Path(workdir))


if __name__ == '__main__':
    main()
