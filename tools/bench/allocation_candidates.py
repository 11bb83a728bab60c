"""Benchmark GET /allocation_candidates: one provider per GPU, or a pool.

    python tools/bench/allocation_candidates.py [--hosts 100] [--gpus 8]
        [--layouts per-device,pooled] [--asks 1,2,4,8] [--rounds 20]
        [--db mysql|sqlite] [--placement-workers 2] [--slow 60]
        [--placement-gc freeze|default] [--timeout 120] [--max-runtime 900]

A real Placement (openstack-placement) on a fresh database migrated with
Placement's own migrations (MariaDB by default, dropped at the end,
through the driver cyborg's services choose: mysqlclient where it is
installed; or a SQLite file), served by gunicorn from
``tools/bench/fleet.py``'s app factory with sync workers; each worker
freezes what it holds once Placement is loaded out of the garbage
collector's full passes (see ``fleet.placement_app``; ``--placement-gc
default`` does not).
``--hosts`` compute-node providers are made as Nova makes them (VCPU
and MEMORY_MB inventories, ``tests/placement_service.py``) and carry
COMPUTE_ACCELERATORS, as Nova's compute does for a host that supports
accelerators. Each host gets ``--gpus`` identical GPUs, published in
one of two layouts, in turn:

- per-device (``[placement] provider_layout = per_device``): each GPU a
  child provider of the compute node with a PGPU inventory of 1;
- pooled (``provider_layout = pooled``): the host's identical GPUs in one
  child provider with a PGPU inventory of ``--gpus`` and the trait
  CUSTOM_NUMA_NODE_0.

Both are what the conductor publishes for the GPUs of
``tools/bench/inventory_report.py`` (all on NUMA node 0), computed by
``placement_sync.desired_providers`` and written by the conductor's own
``placement_sync.sync_provider_tree``.

For each number of GPUs asked (``--asks``) the query is Nova's at
microversion 1.36 (``nova.scheduler.client.report``): the flavor's
``resources=MEMORY_MB:512,VCPU:1`` unnumbered, ``root_required=
COMPUTE_ACCELERATORS,!COMPUTE_STATUS_DISABLED`` (Nova's accelerators and
compute-status prefilters), ``group_policy=none``, ``limit=1000`` (Nova's
``[scheduler] max_placement_results``) and the device profile's groups as
granular numbered groups: one ``resourcesN=PGPU:1`` group per GPU for
per-device (a group is served by a single provider), a single
``resources1=PGPU:N`` group for pooled.

Each case sends two warm-up requests, then ``--rounds`` timed ones, one
after another; the time is from sending the request to the last byte of
the answer (one new connection each: sync workers close it). The table
gives p50/p99, the allocation requests returned and the provider
summaries. Placement runs with its defaults, so ``limit`` is applied
only after every candidate was generated. A request that runs past
``--slow`` seconds ends its case: gunicorn kills the worker at that age
(its ``--timeout``), the row shows '> N s' and the next case goes on;
``--timeout`` bounds the client's wait on top of that.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import http.client
import importlib.metadata
import json
import os
import pathlib
import shutil
import sqlite3
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

import arqs as bench_arqs  # noqa: E402  (tools/bench)
import device_profiles as bench_http  # noqa: E402  (tools/bench)
import fleet  # noqa: E402  (tools/bench)
import inventory_report  # noqa: E402  (tools/bench)
import sqlalchemy as sa  # noqa: E402

from cyborg.clients import placement as placement_client  # noqa: E402
from cyborg.conductor import inventory as inventory_sync  # noqa: E402
from cyborg.conductor import placement_sync  # noqa: E402
from cyborg.db import session  # noqa: E402
from tests import db_servers  # noqa: E402
from tests import placement_service  # noqa: E402

MICROVERSION = '1.36'  # nova.scheduler.client.report.SAME_SUBTREE_VERSION
LIMIT = 1000  # Nova's [scheduler] max_placement_results
WARMUP = 2
FLAVOR = 'MEMORY_MB:512,VCPU:1'
ROOT_REQUIRED = 'COMPUTE_ACCELERATORS,!COMPUTE_STATUS_DISABLED'
COMPUTE_TRAITS = {'COMPUTE_ACCELERATORS'}
GC_MODES = {'freeze': 'what a worker holds once loaded is frozen',
            'default': "Python's default"}

Deadline = bench_arqs.Deadline


# --- Placement ---------------------------------------------------------------

class Placement:
    """Placement on a fresh database, served by gunicorn sync workers;
    ``close()`` stops it and drops the database."""

    def __init__(self, args):
        self.args = args
        self.directory = pathlib.Path(
            tempfile.mkdtemp(prefix='cyborg-alloc-cand-'))
        self._cleanup = [lambda: shutil.rmtree(self.directory,
                                               ignore_errors=True)]

    def start(self):
        args = self.args
        self.db_url = db_servers.create_database(args.db, self.directory)
        self._cleanup.append(lambda: db_servers.drop_database(self.db_url))
        # The driver cyborg's services choose (mysqlclient where it is
        # installed): Placement reads every trait and resource class on
        # each request, thousands of rows that PyMySQL decodes in Python.
        self.db_url = session.with_mysql_driver(self.db_url)
        fleet.migrate_placement(self.db_url)
        self.port = bench_http.free_port()
        # Sync workers, not threads: gunicorn kills a sync worker whose
        # request runs past --timeout, so a request that generates
        # candidates for minutes cannot keep a core and memory after the
        # client gave up on it.
        self.server = bench_http.Server(
            [sys.executable, '-m', 'gunicorn', '--workers',
             str(args.placement_workers), '--timeout', str(args.slow),
             '--bind', '127.0.0.1:%d' % self.port, '--chdir', HERE,
             '--log-level', 'warning', 'fleet:placement_app()'],
            self.port, str(self.directory / 'placement.log'),
            dict(os.environ, PYTHONPATH=ROOT,
                 FLEET_PLACEMENT_DB=self.db_url,
                 FLEET_PLACEMENT_GC=args.placement_gc))
        self._cleanup.append(self.server.stop)
        self.url = 'http://127.0.0.1:%d' % self.port
        self._wait_ready()
        self.client = placement_client.PlacementClient(
            fleet.placement_adapter(self.url))
        return self

    def _wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        answered = 0
        # Every worker fills the standard traits and resource classes on
        # its first request: asked one at a time, they do not race.
        while answered < 4 * self.args.placement_workers:
            if self.server.proc.poll() is not None or (
                    time.monotonic() > deadline):
                raise RuntimeError('Placement did not start:\n%s'
                                   % self.server.log_tail())
            with contextlib.suppress(OSError, http.client.HTTPException):
                if self.get('/traits', '1.6', timeout=5)[0] == 200:
                    answered += 1
                    continue
            time.sleep(0.2)

    def get(self, path, microversion, timeout):
        """(status, body bytes) of one GET on a new connection."""
        conn = http.client.HTTPConnection('127.0.0.1', self.port,
                                          timeout=timeout)
        try:
            conn.request('GET', path, headers=dict(
                placement_service.ADMIN_HEADERS, Accept='application/json',
                **{'OpenStack-API-Version': 'placement %s' % microversion}))
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def engine_name(self):
        url = sa.engine.make_url(self.db_url)
        if url.get_backend_name() == 'sqlite':
            return 'SQLite %s (a file)' % sqlite3.sqlite_version
        engine = sa.create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                version = conn.execute(sa.text('SELECT VERSION()')).scalar()
        finally:
            engine.dispose()
        return 'MariaDB %s through %s (database %s, dropped at the end)' % (
            version, url.get_driver_name(), url.database)

    def close(self):
        for step in reversed(self._cleanup):
            try:
                step()
            except Exception as e:  # keep cleaning up the rest
                print('cleanup: %s' % e, file=sys.stderr)
        self._cleanup = []


# --- the two layouts ---------------------------------------------------------

def host_deployables(gpus):
    """The host's GPUs as the conductor lists them for Placement: those
    of the inventory report, all on NUMA node 0."""
    listing = []
    for index in range(gpus):
        device = inventory_report.device(index)
        deployable = device.deployables[0]
        board = dict(device.std_board_info, numa_node='0')
        listing.append(inventory_sync.ProviderDeployable(
            id=index, uuid=None, name=deployable.name,
            resource_class=deployable.resource_class,
            total=deployable.num_accelerators,
            traits=tuple(deployable.traits), disabled=False, missing=False,
            rp_uuid=None, pool=inventory_sync.pool_key(
                device.type, device.vendor, device.model, board, None,
                deployable.driver_name, deployable.resource_class,
                deployable.traits, {})))
    return listing


def per_device(hostname, gpus):
    """One provider per GPU (``[placement] provider_layout =
    per_device``)."""
    return placement_sync.desired_providers(
        hostname, host_deployables(gpus), layout=placement_sync.PER_DEVICE)


def pooled(hostname, gpus):
    """One provider holding the host's GPUs (``pooled``)."""
    return placement_sync.desired_providers(
        hostname, host_deployables(gpus), layout=placement_sync.POOLED)


LAYOUTS = {'per-device': per_device, 'pooled': pooled}


def in_parallel(threads, items, op):
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return list(pool.map(op, items))


def make_compute_nodes(placement, hostnames, threads):
    adapter = fleet.placement_adapter(placement.url)

    def one(hostname):
        node = placement_service.create_compute_node(adapter, hostname)
        placement.client.put_traits(node['uuid'], node['generation'],
                                    COMPUTE_TRAITS)
        return node['uuid']

    return dict(zip(hostnames, in_parallel(threads, hostnames, one),
                    strict=True))


def publish(placement, layout, compute_nodes, gpus, threads):
    """The children of every compute node in ``layout``, written by the
    conductor's own sync (``placement_sync.sync_provider_tree``); returns
    their UUIDs."""
    client = placement.client
    wanted = {hostname: LAYOUTS[layout](hostname, gpus)
              for hostname in compute_nodes}
    custom = set()
    for providers in wanted.values():
        for provider in providers:
            custom |= {t for t in provider.traits if t.startswith('CUSTOM_')}
    for trait in sorted(custom):
        client.ensure_trait(trait)

    def one(hostname):
        result = placement_sync.sync_provider_tree(
            client, {'uuid': compute_nodes[hostname]}, wanted[hostname])
        if result.failed:
            raise RuntimeError('%s: %s' % (hostname, result.failed))
        return [provider.uuid for provider in wanted[hostname]]

    return [uuid for made in in_parallel(threads, list(wanted), one)
            for uuid in made]


def unpublish(placement, uuids, threads):
    in_parallel(threads, uuids, placement.client.delete_provider)


# --- the queries -------------------------------------------------------------

def query(layout, asked):
    """Nova's GET /allocation_candidates for a flavor with a device
    profile of ``asked`` GPUs, in ``layout``."""
    params = [('resources', FLAVOR), ('root_required', ROOT_REQUIRED),
              ('group_policy', 'none'), ('limit', LIMIT)]
    if layout == 'per-device':
        params += [('resources%d' % group, 'PGPU:1')
                   for group in range(1, asked + 1)]
    else:
        params.append(('resources1', 'PGPU:%d' % asked))
    # Nova sorts its parameters (ResourceRequest.to_querystring).
    return '/allocation_candidates?' + urllib.parse.urlencode(sorted(params))


@dataclasses.dataclass
class Row:
    layout: str
    asked: int
    latencies: list  # seconds, of the timed rounds
    candidates: int = None
    summaries: int = None
    slow: float = None  # seconds the request that was cut short ran

    def line(self, args):
        lat = sorted(self.latencies)
        if self.slow is not None:
            times = '%17s' % ('> %d s' % args.slow)
        else:
            times = '%8.1f %8.1f' % (bench_arqs.percentile(lat, 50) * 1e3,
                                     bench_arqs.percentile(lat, 99) * 1e3)
        return '  %-11s %4d %s %6d %10s %9s' % (
            self.layout, self.asked, times, len(lat),
            '-' if self.candidates is None else self.candidates,
            '-' if self.summaries is None else self.summaries)


HEADER = '  %-11s %4s %8s %8s %6s %10s %9s' % (
    'layout', 'GPUs', 'p50 ms', 'p99 ms', 'rounds', 'candidates',
    'summaries')


def measure(placement, layout, asked, args):
    path = query(layout, asked)
    row = Row(layout, asked, [])
    for index in range(WARMUP + args.rounds):
        started = time.perf_counter()
        try:
            status, body = placement.get(path, MICROVERSION, args.timeout)
        except (OSError, http.client.HTTPException):
            # The client's timeout, or the worker killed before it could
            # answer.
            row.slow = time.perf_counter() - started
            return row
        elapsed = time.perf_counter() - started
        if elapsed >= args.slow:
            # Gunicorn's abort unwinds the request as an exception, which
            # Placement answers with a 500.
            row.slow = elapsed
            return row
        if status != 200:
            raise RuntimeError('GET %s: %d %s' % (path, status, body[:500]))
        if row.candidates is None:
            # The same data gives the same answer: read it once.
            answer = json.loads(body)
            row.candidates = len(answer['allocation_requests'])
            row.summaries = len(answer['provider_summaries'])
        if index >= WARMUP:
            row.latencies.append(elapsed)
    return row


# --- the run -----------------------------------------------------------------

def bench(args):
    placement = Placement(args)
    threads = 2 * args.placement_workers
    rows = []
    try:
        started = time.monotonic()
        placement.start()
        print('Placement %s on %s; gunicorn %d sync worker(s); garbage '
              'collector: %s' % (
                  importlib.metadata.version('openstack-placement'),
                  placement.engine_name(), args.placement_workers,
                  GC_MODES[args.placement_gc]), flush=True)
        hostnames = ['compute-%04d' % i for i in range(args.hosts)]
        compute_nodes = make_compute_nodes(placement, hostnames, threads)
        print('%d hosts (VCPU 16, MEMORY_MB 65536 each) made in %.1f s' % (
            args.hosts, time.monotonic() - started), flush=True)
        for layout in args.layouts:
            started = time.monotonic()
            children = publish(placement, layout, compute_nodes, args.gpus,
                               threads)
            print('\n%s: %d GPU providers published in %.1f s' % (
                layout, len(children), time.monotonic() - started),
                flush=True)
            print(HEADER, flush=True)
            for asked in args.asks:
                row = measure(placement, layout, asked, args)
                print(row.line(args), flush=True)
                rows.append(row)
            unpublish(placement, children, threads)
        return rows
    except BaseException:
        server = getattr(placement, 'server', None)
        if server is not None:
            print('--- the end of the Placement log:\n%s'
                  % server.log_tail(), file=sys.stderr)
        raise
    finally:
        placement.close()


def print_summary(rows, args):
    print('\n=== GET /allocation_candidates: %d hosts x %d GPUs, '
          'microversion %s, limit %d, %d timed rounds after %d warm-up; '
          '%d cores, load average %.1f ===' % (
              args.hosts, args.gpus, MICROVERSION, LIMIT, args.rounds,
              WARMUP, os.cpu_count(), os.getloadavg()[0]))
    print(HEADER)
    for row in rows:
        print(row.line(args))
    print("  per-device: resources=%s&resources1..N=PGPU:1; pooled: "
          "resources1=PGPU:N; both root_required=%s, group_policy=none.\n"
          "  candidates: allocation requests returned (at most the limit); "
          "summaries: provider summaries returned.\n"
          "  Placement's defaults: max_allocation_candidates -1, "
          "depth-first, optimize_for_wide_provider_trees false; garbage "
          "collector: %s."
          % (FLAVOR, ROOT_REQUIRED, GC_MODES[args.placement_gc]))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])

    def numbers(text):
        return [int(n) for n in text.split(',') if n]

    parser.add_argument('--hosts', type=int, default=100)
    parser.add_argument('--gpus', type=int, default=8,
                        help='GPUs per host')
    parser.add_argument('--layouts', type=lambda text: text.split(','),
                        default=list(LAYOUTS),
                        help='comma separated, of %s' % ', '.join(LAYOUTS))
    parser.add_argument('--asks', type=numbers, default=[1, 2, 4, 8],
                        help='GPUs per request, a comma list')
    parser.add_argument('--rounds', type=int, default=20,
                        help='timed requests per case')
    parser.add_argument('--db', choices=('mysql', 'sqlite'),
                        default='mysql',
                        help="Placement's database engine")
    parser.add_argument('--placement-workers', type=int, default=2)
    parser.add_argument('--placement-gc', choices=sorted(GC_MODES),
                        default='freeze',
                        help="Placement workers' garbage collector")
    parser.add_argument('--slow', type=int, default=60,
                        help='seconds after which a request ends its case')
    parser.add_argument('--timeout', type=int, default=120,
                        help="seconds the client waits for an answer")
    parser.add_argument('--max-runtime', type=int, default=900,
                        help='give up after this many seconds')
    args = parser.parse_args(argv)
    if args.db == 'sqlite':
        # SQLite has a single writer: one worker never meets 'database
        # is locked' while the providers are made.
        args.placement_workers = 1
    if max(args.asks) > args.gpus:
        parser.error('--asks goes up to --gpus (%d)' % args.gpus)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    print('%d cores, load average %.1f; %d hosts x %d GPUs; asks %s; '
          'at most %d s' % (os.cpu_count(), os.getloadavg()[0], args.hosts,
                            args.gpus, args.asks, args.max_runtime),
          flush=True)
    try:
        with bench_http.deadline(args.max_runtime):
            rows = bench(args)
            print_summary(rows, args)
    except Deadline as e:
        print('stopped: %s' % e, file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
