"""Benchmark a fleet of conductors: agents' reports, heartbeats and binds,
and a mass boot, at scale.

    python tools/bench/fleet.py [--conductors 1,3] [--hosts 1000]
        [--devices 8] [--duration 30] [--threads 32] [--steady 1,2]
        [--steady-duration 30] [--binds 1000] [--bind-threads 20]
        [--mass-boot 500] [--mass-boot-seconds 60]
        [--mass-boot-clients 16] [--mass-boot-background 1]
        [--placement-workers 2] [--phases ...] [--profile PHASE]
        [--max-runtime 900]

What runs, each a process of its own unless said otherwise:

- MariaDB: a fresh database, migrated to head (``tests/db_servers.py``),
  dropped at the end;
- RabbitMQ: a fresh virtual host, deleted at the end;
- Placement (openstack-placement) on its own fresh MariaDB database,
  migrated with Placement's own migrations, served by gunicorn
  (``--placement-workers`` processes of 4 threads): a SQLite Placement in
  one thread would measure SQLite's single writer, not the conductors,
  once thousands of providers are made;
- N ``cyborg-conductor`` processes (``conductor-0`` ...) from their
  console script, with a generated configuration: the virtual host, the
  database, Placement, a Nova stand-in, ``heartbeat_interval = 2`` and
  ``service_down_time = 6``. The Placement retry and reconcile passes are
  set to an hour, and each phase waits until the conductors and Placement
  are idle, so that no pass runs during a measurement (a conductor that
  joins compares its hosts with Placement once, at its start);
- the REST API, served by gunicorn (2 sync workers), for the binds;
- this process: the load generator, which is the agents of ``--hosts``
  hosts of ``--devices`` identical passthrough GPUs each (the report of
  ``tools/bench/inventory_report.py``: one PGPU deployable with two
  traits, one attribute and one PCI attach handle per GPU), and Nova:
  it makes each host's compute-node provider in Placement first, spawns
  instances through the API and receives the conductors'
  ``accelerator-request-bound`` events (``tests/nova_events.py``);
- for the mass boot, Nova's own cyborg client (``nova.accelerator.
  cyborg``) in ``--mass-boot-clients`` processes
  (``tests/functional/clients/nova_arq_probe.py``, one step at a time
  each).

Agents are not run: for a report, all an agent does is one RPC call
``report_host_inventory`` (``cyborg.conductor.rpcapi.ConductorAPI`` over
the real transport), to the conductor that the previous answer named as
the host's owner, as agents do; for a heartbeat, one cast
``agent_heartbeat`` to the owner, every device healthy, usage figures
observed at the send (``tools/bench/heartbeat.py``'s payload); and a bind
of a PCI passthrough handle makes no agent call (only MDEV handles are
prepared on the host).

The phases, for each number of conductors of ``--conductors`` in turn
(the conductors are added to, or stopped down to, that number and every
one sees the same ring before anything is measured):

1. first reports (only under the first number of conductors): every
   host's first report, ``--threads`` at a time; it creates the rows and
   the providers. Later numbers of conductors send one untimed report per
   host instead, to learn the hosts' new owners.
2. unchanged reports: ``--threads`` threads, each sending its share of
   the hosts' reports one after another for ``--duration`` seconds.
   reports/s, latency p50/p99 and the CPU seconds of the conductor
   processes per report (user + system from /proc/<pid>/stat, before and
   after), with MariaDB's and RabbitMQ's beside them.
3. steady: the agents on their timers, at the defaults of ``[agent]
   report_interval`` (60 s) and ``heartbeat_interval`` (5 s), times each
   multiple of ``--steady``: for 1,000 hosts, 16.7 reports and 200
   heartbeats per second are needed. The hosts' timers are spread evenly
   over the interval and each turn starts at its time whatever the
   conductors' pace (an open load: ``started late`` says when this
   process could not keep it). After one untimed heartbeat per host (the
   services rows and the conductors' health digests made) and the
   conductors' idle CPU, three windows of ``--steady-duration`` seconds:
   reports alone (``paced report``: CPU per report), heartbeats alone
   (``paced heartbeat``: CPU per heartbeat), then both at once
   (``both``: the cores the conductors keep busy). A heartbeat counts as
   done when the services row of its host holds its usage: a heartbeat
   window ends when every host's last one is stored, so that per s is
   what the conductors stored, not what was sent; a heartbeat queued
   longer than ``service_down_time`` is dropped by the conductor and
   counted (its logs). per s vs ``needed``: whether the conductors keep
   up; the CPU per op counts the conductors' idle work too (printed
   before the windows).
4. binds: a device profile of one PGPU and ``--binds`` ARQs are created
   through the API (not timed); then ``--bind-threads`` Nova threads bind
   them, one instance each, spread over the hosts (instance i on host i
   mod hosts): PATCH, wait for Nova's event, GET ?instance=&bind_state=
   resolved. binds/s (completed binds over the wall time) and PATCH sent
   -> resolved answer p50/p99. The ARQs are then removed in the database
   and the handles freed (a passthrough handle has nothing to release on
   the host), ready for the next number of conductors.
5. mass boot: ``--mass-boot`` instances of one GPU each, started at a
   steady rate over ``--mass-boot-seconds`` (500 over 60 s: 8.3 per
   second), each at its time whatever the pace of the ones before (up to
   ``--mass-boot-threads`` at once), while the agents report and
   heartbeat at ``--mass-boot-background`` times their default rates
   (rows ``meanwhile``). The GPUs are Placement's providers with a free
   PGPU, read once before (the scheduler's part; no allocation is
   claimed), instance i on host i mod hosts. Each instance, as Nova's
   conductor and compute manager do it with Nova's client:
   ``create_arqs_and_match_resource_providers`` (POST), ``bind_arqs``
   (PATCH: host, device_rp_uuid, instance_uuid), Nova's event, and
   ``get_arqs_for_instance(only_resolved=True)``, which must answer
   Bound. Figures: boots per s achieved vs the target, bind PATCH sent ->
   resolved ARQs answered p50/p99 (and -> event received), errors. The
   ARQs are then removed in the database, as after binds.

Latencies depend on what else runs on the machine; the CPU seconds per
operation much less so. ``--phases`` picks phases; new workloads are new
entries of ``PHASES``. ``--profile PHASE`` runs the conductors under
yappi (``tools/bench/profiled.py``: every thread, CPU time) and prints
where their time went during that phase; the profiler slows them down
several times, so the figures of that run are not comparable.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import itertools
import os
import pathlib
import pstats
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

import arqs as bench_arqs  # noqa: E402  (tools/bench)
import device_profiles as bench_http  # noqa: E402  (tools/bench)
import heartbeat as bench_heartbeat  # noqa: E402  (tools/bench)
import inventory_report  # noqa: E402  (tools/bench)
import sqlalchemy as sa  # noqa: E402

from cyborg import long_lived  # noqa: E402
from cyborg.conf import agent as agent_opts  # noqa: E402
from cyborg.db import migration  # noqa: E402
from cyborg.db import models  # noqa: E402
from tests import db_servers  # noqa: E402
from tests import placement_service  # noqa: E402

RABBIT = 'rabbit://guest:guest@127.0.0.1:5672/%s'
PROFILE = 'fleet-gpu'
ARQS = bench_arqs.ARQS
HEARTBEAT_INTERVAL = 2
SERVICE_DOWN_TIME = 6
RPC_TIMEOUT = 60
PLACEMENT_THREADS = 4
MYSQL_PROCESSES = bench_arqs.DB_PROCESSES['mysql']
# What an agent does by default: a report every minute, a heartbeat
# every 5 seconds.
_AGENT_DEFAULTS = {opt.name: opt.default for opt in agent_opts.opts}
REPORT_INTERVAL = _AGENT_DEFAULTS['report_interval']
AGENT_HEARTBEAT_INTERVAL = _AGENT_DEFAULTS['heartbeat_interval']


# Not an Exception: nothing on the way may swallow it.
Deadline = bench_arqs.Deadline


def percentile(values, p):
    return bench_arqs.percentile(sorted(values), p)


# --- Placement on MariaDB, in gunicorn ---------------------------------------

def placement_app():
    """gunicorn's app factory: Placement on ``FLEET_PLACEMENT_DB``.

    What the worker holds once the app is loaded is then frozen out of
    the collector's full passes (``cyborg.long_lived``), as cyborg's own
    services do: unfrozen, each full pass walks some 210,000 objects,
    100-140 ms in which the request that triggered it waits (one request
    in 30 of ``tools/bench/allocation_candidates.py``).
    ``FLEET_PLACEMENT_GC=default`` leaves Python's default.
    """
    from placement import db_api
    from placement import deploy
    conf = placement_service._placement_conf(
        os.environ['FLEET_PLACEMENT_DB'])
    db_api.configure(conf)
    app = deploy.loadapp(conf)
    if os.environ.get('FLEET_PLACEMENT_GC') != 'default':
        long_lived.settle()
    return app


def migrate_placement(url):
    """Placement's schema in the database ``url`` (its own migrations)."""
    from oslo_db.sqlalchemy import engines
    from placement.db.sqlalchemy import migration as placement_migration
    engine = engines.create_engine(url)
    reset = placement_service._patch_placement_engine(
        placement_service._placement_conf(url), engine)
    try:
        placement_migration.upgrade('head')
    finally:
        reset()
        engine.dispose()


def placement_adapter(url):
    from keystoneauth1 import adapter as ks_adapter
    from keystoneauth1 import session as ks_session
    session = ks_session.Session(
        additional_headers=placement_service.ADMIN_HEADERS)
    return ks_adapter.Adapter(session, service_type='placement',
                              endpoint_override=url)


# --- the deployment ----------------------------------------------------------

def service_config(dep, host, log_path):
    return '\n'.join([
        '[DEFAULT]',
        'auth_strategy = noauth',
        'host = %s' % host,
        'transport_url = %s' % (RABBIT % dep.vhost),
        'rpc_response_timeout = %d' % RPC_TIMEOUT,
        'heartbeat_interval = %d' % HEARTBEAT_INTERVAL,
        'service_down_time = %d' % SERVICE_DOWN_TIME,
        'debug = false',
        'log_file = %s' % log_path,
        '[conductor]',
        'sync_retry_interval = 3600',
        'reconcile_interval = 3600',
        '[database]',
        'connection = %s' % dep.url,
        '[oslo_policy]',
        'policy_file = /nonexistent/cyborg-policy.yaml',
        '[placement]',
        'auth_type = admin_token',
        'endpoint = %s' % dep.placement_url,
        'token = admin',
        'endpoint_override = %s' % dep.placement_url,
        'timeout = 30',
        dep.nova.conf_section(),
    ])


class Fleet:
    """Databases, virtual host, Placement, Nova stand-in, API and the
    conductors; ``close()`` undoes all of it."""

    def __init__(self, args):
        self.args = args
        self.directory = pathlib.Path(tempfile.mkdtemp(prefix='cyborg-fleet-'))
        self._cleanup = [lambda: shutil.rmtree(self.directory,
                                               ignore_errors=True)]
        self.env = dict(os.environ, PYTHONPATH=ROOT)
        self.conductors = {}  # host -> bench_http.Server
        self.owners = {}  # hostname -> the conductor that owns it
        self.reported = False
        self.profile_made = False
        self.novas = None  # NovaPool, started by the mass boot

    def _later(self, step):
        self._cleanup.append(step)

    def start(self):
        started = time.monotonic()
        self.url = db_servers.create_database('mysql', self.directory)
        self._later(lambda: db_servers.drop_database(self.url))
        migration.upgrade(self.url)
        self.engine = sa.create_engine(self.url)
        self._later(self.engine.dispose)

        placement_db = db_servers.create_database('mysql', self.directory)
        self._later(lambda: db_servers.drop_database(placement_db))
        migrate_placement(placement_db)
        port = bench_http.free_port()
        self.placement = bench_http.Server(
            [sys.executable, '-m', 'gunicorn', '--workers',
             str(self.args.placement_workers), '--threads',
             str(PLACEMENT_THREADS), '--bind', '127.0.0.1:%d' % port,
             '--chdir', HERE, '--log-level', 'warning',
             'fleet:placement_app()'],
            port, str(self.directory / 'placement.log'),
            dict(self.env, FLEET_PLACEMENT_DB=placement_db))
        self._later(self.placement.stop)
        self.placement_url = 'http://127.0.0.1:%d' % port
        self._wait_for_placement()

        self.vhost = 'cyborg-fleet-%s' % uuid.uuid4().hex[:12]
        bench_arqs.rabbitmqctl('add_vhost', self.vhost)
        self._later(lambda: bench_arqs.rabbitmqctl('delete_vhost',
                                                   self.vhost))
        bench_arqs.rabbitmqctl('set_permissions', '-p', self.vhost, 'guest',
                               '.*', '.*', '.*')
        self.nova = bench_arqs.NovaStandIn()
        self.nova.start()
        self._later(self.nova.stop)

        api_conf = self.directory / 'api.conf'
        api_conf.write_text(service_config(self, 'fleet-api',
                                           self.directory / 'api.log'))
        port = bench_http.free_port()
        self.api = bench_http.Server(
            [sys.executable, '-m', 'gunicorn', '--workers', '2',
             '--worker-class', 'sync', '--bind', '127.0.0.1:%d' % port,
             '--log-level', 'warning', 'cyborg.wsgi.api:application'],
            port, str(self.directory / 'gunicorn.log'),
            dict(self.env, CYBORG_CONFIG_FILES=str(api_conf)))
        self._later(self.api.stop)
        self.api.wait_ready()

        self.cpu = bench_arqs.CpuMeter({
            'cond': self._conductor_processes,
            'db': bench_arqs.processes_named(MYSQL_PROCESSES),
            'mq': bench_arqs.processes_named(bench_arqs.MQ_PROCESSES),
            'plc': bench_arqs.process_tree(self.placement.proc.pid),
            'api': bench_arqs.process_tree(self.api.proc.pid),
            'gen': lambda: [bench_arqs.psutil.Process()],
            'nova': self._nova_processes,
        })
        self._rpc_client()
        print('set up in %.1f s: Placement %s (%d x %d threads), API port %d, '
              'vhost %s' % (time.monotonic() - started, self.placement_url,
                            self.args.placement_workers, PLACEMENT_THREADS,
                            self.api.port, self.vhost), flush=True)
        return self

    def _wait_for_placement(self, timeout=60):
        adapter = placement_adapter(self.placement_url)
        deadline = time.monotonic() + timeout
        answered = 0
        # Every worker fills the standard traits on its first request:
        # asked one at a time, they do not race each other for it.
        while answered < 4 * self.args.placement_workers:
            if self.placement.proc.poll() is not None or (
                    time.monotonic() > deadline):
                raise RuntimeError('Placement did not start:\n%s'
                                   % self.placement.log_tail())
            with contextlib.suppress(Exception):
                if adapter.get('/traits', raise_exc=False,
                               microversion='1.6').status_code == 200:
                    answered += 1
                    continue
            time.sleep(0.2)
        self.placement_adapter = adapter

    def _rpc_client(self):
        from cyborg import context as cyborg_context
        from cyborg import rpc
        from cyborg.conductor import rpcapi
        from tests import conductor_rpc
        from tests import conftest
        conf = conftest.make_conf(self.url)
        conductor_rpc.use_fake_transport(conf, timeout=RPC_TIMEOUT)
        # One connection per reporting thread, and the replies' and
        # heartbeats' own.
        conf.set_override('rpc_conn_pool_size', self.args.threads + 8,
                          group='oslo_messaging_rabbit')
        conf.set_override('transport_url', RABBIT % self.vhost)
        self.transport = rpc.get_transport(conf)
        self._later(self.transport.cleanup)
        self.conductor_api = rpcapi.ConductorAPI(self.transport,
                                                 timeout=RPC_TIMEOUT)
        self.context = cyborg_context.admin_context(None)

    def _nova_processes(self):
        found = []
        for pid in self.novas.pids() if self.novas else ():
            with contextlib.suppress(bench_arqs.psutil.Error):
                found.append(bench_arqs.psutil.Process(pid))
        return found

    # -- conductors

    def _conductor_processes(self):
        found = []
        for server in list(self.conductors.values()):
            found += bench_arqs.process_tree(server.proc.pid)()
        return found

    def scale_conductors(self, count):
        """Start or stop conductors until ``count`` run and every one of
        them (and the API) sees the same live set."""
        wanted = ['conductor-%d' % i for i in range(count)]
        command = shutil.which('cyborg-conductor',
                               path=os.path.dirname(sys.executable))
        for host in sorted(set(self.conductors) - set(wanted)):
            self.conductors.pop(host).stop()
        for host in wanted:
            if host in self.conductors:
                continue
            conf = self.directory / ('%s.conf' % host)
            log = self.directory / ('%s.log' % host)
            conf.write_text(service_config(self, host, log))
            argv = [command, '--config-file', str(conf)]
            if self.args.profile:
                argv[:1] = [sys.executable, os.path.join(HERE, 'profiled.py'),
                            str(self.directory / ('%s.prof' % host)),
                            'cyborg.cmd.conductor:main']
            server = bench_http.Server(
                argv, None,
                str(self.directory / ('%s.out' % host)), self.env)
            self.conductors[host] = server
            self._later(server.stop)
            bench_arqs.Deployment._wait_for_log(
                log, 'cyborg-conductor started', server)
        deadline = time.monotonic() + 60
        while self._live_conductors() != wanted:
            if time.monotonic() > deadline:
                raise RuntimeError('live conductors %s, not %s' % (
                    self._live_conductors(), wanted))
            time.sleep(0.5)
        # Each conductor reads the live set at its next heartbeat, the API
        # every 3 s.
        time.sleep(HEARTBEAT_INTERVAL + 3)

    @contextlib.contextmanager
    def profiling(self, name):
        """Profile the conductors (``--profile``) while in the block;
        print where their CPU time went."""
        if self.args.profile != name:
            yield
            return
        for server in self.conductors.values():
            os.kill(server.proc.pid, signal.SIGUSR1)
        try:
            yield
        finally:
            paths = []
            for host, server in self.conductors.items():
                path = self.directory / ('%s.prof' % host)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                os.kill(server.proc.pid, signal.SIGUSR2)
                paths.append(path)
            deadline = time.monotonic() + 60
            while not all(p.exists() for p in paths) and (
                    time.monotonic() < deadline):
                time.sleep(0.5)
            time.sleep(1)  # written
            stats = pstats.Stats(*[str(p) for p in paths if p.exists()],
                                 stream=sys.stdout)
            print('--- the conductors\' CPU time during %s (yappi, all '
                  'threads, %d processes):' % (name, len(paths)))
            stats.sort_stats('tottime').print_stats(30)
            stats.sort_stats('cumulative').print_stats(60)

    def _live_conductors(self):
        table = models.Service.__table__
        cutoff = models.utcnow() - datetime.timedelta(
            seconds=SERVICE_DOWN_TIME)
        with self.engine.connect() as conn:
            return sorted(conn.execute(sa.select(table.c.host).where(
                table.c.binary == 'cyborg-conductor',
                table.c.last_seen_at >= cutoff)).scalars())

    # -- agents

    def report(self, hostname, report):
        """One agent's report to the host's owner (to any conductor when
        the owner is not known yet); returns the answer."""
        answer = self.conductor_api.report_host_inventory(
            self.context, report, [hostname],
            server=self.owners.get(hostname))
        self.owners[hostname] = answer.get('owner')
        return answer

    def print_logs(self, lines=25):
        for path in sorted(self.directory.glob('*.log')) + sorted(
                self.directory.glob('*.out')):
            tail = path.read_text(errors='replace').splitlines()[-lines:]
            if tail:
                print('--- the end of %s:\n%s' % (path.name,
                                                  '\n'.join(tail)),
                      file=sys.stderr)

    def close(self):
        for step in reversed(self._cleanup):
            try:
                step()
            except Exception as e:  # keep cleaning up the rest
                print('cleanup: %s' % e, file=sys.stderr)
        self._cleanup = []


# --- figures -----------------------------------------------------------------

@dataclasses.dataclass
class Row:
    phase: str
    conductors: int
    count: int
    seconds: float
    latencies: list
    errors: int
    cpu: dict  # process group -> CPU seconds during the phase
    note: str = ''

    def line(self):
        lat = sorted(self.latencies)
        # The Nova client processes show only where they ran.
        per_op = ' '.join('%s %.2f' % (name, seconds * 1e3 / self.count)
                          for name, seconds in self.cpu.items()
                          if name != 'nova' or seconds
                          ) if self.count else ''
        return '  %-20s %5d %7d %7.1f %8.1f %8.1f %8.1f %6d  %s%s' % (
            self.phase, self.conductors, self.count, self.seconds,
            self.count / self.seconds if self.seconds else 0.0,
            bench_arqs.percentile(lat, 50) * 1e3,
            bench_arqs.percentile(lat, 99) * 1e3, self.errors, per_op,
            ('; ' + self.note) if self.note else '')


HEADER = '  %-20s %5s %7s %7s %8s %8s %8s %6s  %s' % (
    'phase', 'cond', 'n', 'wall s', 'per s', 'p50 ms', 'p99 ms', 'errors',
    'CPU ms per op')


class Errors(bench_arqs.Errors):
    pass


def in_parallel(threads, items, op):
    """``op(item)`` for every item on ``threads`` threads; returns
    (latencies, Errors, wall seconds). ``op`` returns an error or None."""
    errors = Errors()
    latencies = []
    lock = threading.Lock()

    def one(item):
        start = time.perf_counter()
        try:
            error = op(item)
        except Exception as exc:  # counted and shown, not hidden
            error = '%s: %s' % (type(exc).__name__, exc)
        elapsed = time.perf_counter() - start
        if error:
            errors.add(error)
        else:
            with lock:
                latencies.append(elapsed)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, items))
    return latencies, errors, time.perf_counter() - start


def print_errors(what, errors):
    if errors.count:
        print('  %s: %d failed, e.g. %s' % (what, errors.count,
                                             '; '.join(errors.examples[:3])),
              flush=True)


# --- the phases --------------------------------------------------------------

class Agents:
    """The hosts' reports, made once: node0000 ... with ``devices`` GPUs."""

    def __init__(self, hosts, devices):
        self.names = ['node%04d.fleet' % i for i in range(hosts)]
        self.reports = {name: inventory_report.host_report(name, devices)
                        for name in self.names}


def compute_nodes(fleet, agents):
    """Each host's compute-node provider, as Nova makes it."""
    def op(name):
        placement_service.create_compute_node(fleet.placement_adapter, name)

    latencies, errors, wall = in_parallel(8, agents.names, op)
    print_errors('compute nodes', errors)
    if errors.count:
        raise RuntimeError('the compute-node providers were not made')
    print('%d compute-node providers made in %.1f s' % (len(latencies),
                                                        wall), flush=True)


def first_reports(fleet, agents, conductors):
    """Phase 1, or (once hosts have reported) a round that finds owners."""
    first = not fleet.reported

    def op(name):
        answer = fleet.report(name, agents.reports[name])
        if first and answer.get('placement', {}).get('status') != 'synced':
            return 'placement %s' % answer.get('placement')
        return None

    before = fleet.cpu.snapshot()
    latencies, errors, wall = in_parallel(fleet.args.threads, agents.names,
                                          op)
    cpu = fleet.cpu.since(before)
    fleet.reported = True
    print_errors('first reports' if first else 'owner round', errors)
    if not first:
        print('  (untimed) one report per host to learn the new owners: '
              '%.1f s; owners: %s' % (wall, owner_counts(fleet)), flush=True)
        return []
    return [Row('first report', conductors, len(latencies), wall, latencies,
                errors.count, cpu, 'owners: %s' % owner_counts(fleet))]


def owner_counts(fleet):
    counts = {}
    for owner in fleet.owners.values():
        counts[owner] = counts.get(owner, 0) + 1
    return ', '.join('%s %d' % item for item in sorted(counts.items()))


def unchanged_reports(fleet, agents, conductors):
    """Phase 2: every thread reports its hosts in turn for ``duration``."""
    args = fleet.args
    threads = min(args.threads, len(agents.names))
    errors = Errors()
    latencies = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads + 1)
    end = []
    changed = []

    def run(index):
        mine = agents.names[index::threads]
        samples = []
        barrier.wait()
        for name in itertools.cycle(mine):
            start = time.perf_counter()
            try:
                answer = fleet.report(name, agents.reports[name])
            except Exception as exc:  # counted and shown, not hidden
                errors.add('%s: %s' % (type(exc).__name__, exc))
            else:
                samples.append(time.perf_counter() - start)
                if answer.get('changed'):
                    changed.append(name)
            if time.perf_counter() >= end[0]:
                break
        with lock:
            latencies.extend(samples)

    workers = [threading.Thread(target=run, args=(i,), daemon=True)
               for i in range(threads)]
    for worker in workers:
        worker.start()
    before = fleet.cpu.snapshot()
    start = time.perf_counter()
    end.append(start + args.duration)
    barrier.wait()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - start
    cpu = fleet.cpu.since(before)
    print_errors('unchanged reports', errors)
    note = '%d threads' % threads
    if changed:
        note += '; %d reports CHANGED something' % len(changed)
    return [Row('unchanged report', conductors, len(latencies), wall,
                latencies, errors.count, cpu, note)]


def device_targets(fleet, count):
    """``count`` (hostname, rp_uuid) of distinct GPUs, host by host in turn:
    the i-th on host i mod hosts."""
    devices = models.Device.__table__
    deployables = models.Deployable.__table__
    with fleet.engine.connect() as conn:
        rows = conn.execute(
            sa.select(devices.c.hostname, deployables.c.rp_uuid).join(
                devices, deployables.c.device_id == devices.c.id).order_by(
                devices.c.hostname, deployables.c.name)).all()
    by_host = {}
    for hostname, rp_uuid in rows:
        by_host.setdefault(hostname, []).append((hostname, rp_uuid))
    spread = [t for group in itertools.zip_longest(*by_host.values())
              for t in group if t is not None]
    if len(spread) < count:
        raise RuntimeError('%d binds asked for, %d GPUs stored' % (
            count, len(spread)))
    return spread[:count]


def ensure_profile(fleet):
    """The device profile of one passthrough GPU, made once."""
    if fleet.profile_made:
        return
    status, body = bench_arqs.call(
        fleet.api.port, 'POST', '/v2/device_profiles',
        [{'name': PROFILE, 'groups': [{'resources:PGPU': '1'}]}])
    if status != 201:
        raise RuntimeError('device profile: %s' % bench_arqs.describe(
            status, body))
    fleet.profile_made = True


def create_arq(port):
    """(uuid of a new ARQ of the profile, None) or (None, error)."""
    status, body = bench_arqs.call(port, 'POST', ARQS,
                                   {'device_profile_name': PROFILE})
    if status != 201:
        return None, bench_arqs.describe(status, body)
    return body['arqs'][0]['uuid'], None


def binds(fleet, agents, conductors):
    """Phase 3: ``--binds`` instances, one ARQ each, bound concurrently."""
    args = fleet.args
    ensure_profile(fleet)
    port = fleet.api.port
    targets = device_targets(fleet, args.binds)

    def create(_):
        arq, error = create_arq(port)
        created.append(arq)
        return error

    created = []
    _, errors, wall = in_parallel(args.bind_threads, range(args.binds),
                                  create)
    print_errors('creating ARQs', errors)
    created = [a for a in created if a]
    print('  (untimed) %d ARQs created in %.1f s' % (len(created), wall),
          flush=True)
    work = list(zip(created, targets, strict=False))
    bind_latencies = []
    lock = threading.Lock()

    def bind(item):
        arq, target = item
        instance = str(uuid.uuid4())
        waiter = fleet.nova.expect(instance)
        try:
            start = time.perf_counter()
            status, body = bench_arqs.call(
                port, 'PATCH', ARQS,
                bench_arqs.bind_body(arq, target, instance))
            if status != 202:
                return 'bind: ' + bench_arqs.describe(status, body)
            if not waiter.wait(bench_arqs.EVENT_TIMEOUT):
                return 'no event within %ds' % bench_arqs.EVENT_TIMEOUT
            if waiter.received.status != 'completed':
                return 'Nova was told %s' % waiter.received.status
            status, body = bench_arqs.call(
                port, 'GET', '%s?instance=%s&bind_state=resolved'
                % (ARQS, instance))
            elapsed = time.perf_counter() - start
            if status != 200:
                return 'resolved: ' + bench_arqs.describe(status, body)
            states = [a['state'] for a in body.get('arqs', ())]
            if states != ['Bound']:
                return 'ARQ %s resolved as %s' % (arq, states)
            with lock:
                bind_latencies.append(elapsed)
            return None
        finally:
            fleet.nova.forget(instance)

    before = fleet.cpu.snapshot()
    _, errors, wall = in_parallel(args.bind_threads, work, bind)
    cpu = fleet.cpu.since(before)
    print_errors('binds', errors)
    reset_arqs(fleet)
    return [Row('bind', conductors, len(bind_latencies), wall,
                bind_latencies, errors.count, cpu,
                '%d Nova threads; latency: PATCH -> resolved'
                % args.bind_threads)]


def reset_arqs(fleet):
    """No ARQs and every handle free, as after Nova deleted the instances
    (a passthrough handle has nothing to release on its host)."""
    with fleet.engine.begin() as conn:
        conn.execute(sa.delete(models.ExtendedAcceleratorRequest))
        conn.execute(sa.update(models.AttachHandle).values(in_use=False))


# --- paced load: agents on their timers, instances at their boot times -----

@dataclasses.dataclass
class Paced:
    """What ``paced`` ran: each op's sample, how late each started."""

    samples: list
    late: list  # seconds between an op's time and its start
    errors: Errors
    started: float  # perf_counter of offset 0
    ended: float  # perf_counter when the last op ended

    @property
    def count(self):
        return len(self.samples)


def paced(schedule, threads, op):
    """``op(item)`` for each ``(offset, item)`` of ``schedule`` (sorted;
    seconds from now), at its time or, when all ``threads`` are busy, as
    soon as one is free: an open load, which does not slow down when the
    service does (the late starts say so). ``op`` returns
    ``(sample, error)``."""
    lock = threading.Lock()
    pending = iter(schedule)
    result = Paced([], [], Errors(), time.perf_counter(), 0.0)

    def work():
        while True:
            with lock:
                entry = next(pending, None)
            if entry is None:
                return
            offset, item = entry
            due = result.started + offset
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            begin = time.perf_counter()
            try:
                sample, error = op(item)
            except Exception as exc:  # counted and shown, not hidden
                sample, error = None, '%s: %s' % (type(exc).__name__, exc)
            end = time.perf_counter()
            with lock:
                result.late.append(begin - due)
                result.ended = max(result.ended, end)
                if error:
                    result.errors.add(error)
                else:
                    result.samples.append(sample)

    workers = [threading.Thread(target=work, daemon=True)
               for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return result


def every(names, interval, seconds):
    """``(offset, name)`` of each host's turns within ``seconds``, every
    ``interval`` seconds, the hosts' timers spread evenly over it."""
    turns = []
    for index, name in enumerate(names):
        offset = interval * index / len(names)
        while offset < seconds:
            turns.append((offset, name))
            offset += interval
    return sorted(turns, key=lambda turn: turn[0])


class Heartbeats:
    """The agents' heartbeat casts: every device healthy, usage figures
    observed now (``tools/bench/heartbeat.py``'s), to the host's owner."""

    def __init__(self, fleet, agents):
        self.fleet = fleet
        self.healthy = dict.fromkeys(
            bench_heartbeat.addresses(fleet.args.devices), 'healthy')
        self.names = agents.names
        self.lock = threading.Lock()
        self.last_sent = {}  # hostname -> observed_at of its last one

    def send(self, name):
        now = time.time()
        payload = bench_heartbeat.heartbeat(self.healthy, now)
        start = time.perf_counter()
        self.fleet.conductor_api.agent_heartbeat(
            self.fleet.context, name, bench_heartbeat.VERSION,
            bench_heartbeat.RPC_VERSION, server=self.fleet.owners.get(name),
            **payload)
        with self.lock:
            self.last_sent[name] = now
        return time.perf_counter() - start, None

    def behind(self):
        """The hosts whose services row lacks their last heartbeat."""
        table = models.Service.__table__
        with self.fleet.engine.connect() as conn:
            rows = conn.execute(sa.select(table.c.host, table.c.usage).where(
                table.c.binary == 'cyborg-agent')).all()
        stored = {host: next(iter(usage.values()), {}).get('observed_at')
                  for host, usage in rows if usage}
        with self.lock:
            return [name for name, sent in self.last_sent.items()
                    if stored.get(name) != sent]

    def wait_stored(self, timeout=60):
        """perf_counter when every host's last heartbeat was seen stored
        (polled every 0.2 s), None if not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.behind():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2)
        return time.perf_counter()

    def warm_up(self, rounds=10):
        """Heartbeats until every host's is stored, untimed: the services
        rows inserted and the conductors' digests of the hosts' health
        made. A first heartbeat writes its devices' health: the
        conductors may fall behind and drop some as stale, whose hosts
        send again, as agents do at their next interval."""
        started = time.monotonic()
        names = self.names
        for _ in range(rounds):
            turns = every(names, AGENT_HEARTBEAT_INTERVAL,
                          AGENT_HEARTBEAT_INTERVAL)
            run = paced(turns, 8, self.send)
            print_errors('heartbeats (warm-up)', run.errors)
            self.wait_stored(timeout=SERVICE_DOWN_TIME + 2)
            names = self.behind()
            if not names:
                return time.monotonic() - started
        raise RuntimeError('%d hosts\' heartbeats not stored after %d '
                           'rounds' % (len(names), rounds))


class ConnectionPeak:
    """The most connections to the service's database at once (the
    conductors', the API's and this process's, this sampler's one
    included), read from the server's process list every 0.5 s while in
    the ``with`` block: each conductor may open one per RPC thread busy
    with the database, and the server has a limit (MariaDB's
    ``max_connections``, 151 by default, for all of its databases)."""

    def __init__(self, fleet):
        self.fleet = fleet
        self.engine = fleet.engine
        self.peak = 0
        self.holders = ''  # who held them at the peak
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()

    def _sample(self):
        clients = sa.text('SELECT host FROM information_schema.processlist '
                          'WHERE db = :db')
        with self.engine.connect() as conn:
            while True:
                hosts = conn.execute(clients, {
                    'db': self.engine.url.database}).scalars().all()
                conn.rollback()
                if len(hosts) > self.peak:
                    self.peak = len(hosts)
                    self.holders = self._holders(hosts)
                if self._stop.wait(0.5):
                    return

    def _holders(self, hosts):
        """'conductor-0 12, api 3, ...' of the server's client addresses
        (``host:port``), by the local process whose port it is."""
        labels = {os.getpid(): 'gen'}
        for name, server in list(self.fleet.conductors.items()) + [
                ('api', self.fleet.api)]:
            for process in bench_arqs.process_tree(server.proc.pid)():
                labels[process.pid] = name
        owners = {}
        with contextlib.suppress(bench_arqs.psutil.Error):
            for connection in bench_arqs.psutil.net_connections('tcp'):
                if connection.laddr and connection.pid:
                    owners[connection.laddr.port] = labels.get(
                        connection.pid, 'other')
        counts = {}
        for host in hosts:
            port = host.rpartition(':')[2]
            label = owners.get(int(port), 'other') if port.isdigit() else (
                'other')
            counts[label] = counts.get(label, 0) + 1
        return ', '.join('%s %d' % item for item in sorted(counts.items()))


def stale_drops(fleet):
    """Heartbeats the conductors dropped as too old, so far (their logs)."""
    return sum(path.read_text(errors='replace').count(
        'Dropping a heartbeat') for path in fleet.directory.glob(
        'conductor-*.log'))


def agent_load(fleet, agents, heartbeats, multiple, seconds, reports=True,
               beats=True):
    """The agents on their timers for ``seconds``: each host reports
    every ``[agent] report_interval`` and heartbeats every ``[agent]
    heartbeat_interval`` seconds (defaults), ``multiple`` times as often.
    Returns ({'report'|'heartbeat': Paced}, stale drops); a heartbeat
    run ends when the last heartbeat of every host is stored."""
    runs = {}
    dropped = stale_drops(fleet)

    def report(name):
        start = time.perf_counter()
        answer = fleet.report(name, agents.reports[name])
        if answer.get('changed'):
            return None, 'the report of %s changed something' % name
        return time.perf_counter() - start, None

    def run(kind, interval, threads, op):
        runs[kind] = paced(every(agents.names, interval / multiple, seconds),
                           threads, op)

    workers = []
    if reports:
        workers.append(threading.Thread(
            target=run, daemon=True, args=('report', REPORT_INTERVAL,
                                           fleet.args.threads, report)))
    if beats:
        workers.append(threading.Thread(
            target=run, daemon=True,
            args=('heartbeat', AGENT_HEARTBEAT_INTERVAL, 8,
                  heartbeats.send)))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if beats:
        stored = heartbeats.wait_stored()
        hb = runs['heartbeat']
        if stored is None:
            hb.errors.add('%d hosts\' last heartbeats not stored within '
                          '60 s' % len(heartbeats.behind()))
        else:
            hb.ended = stored
    return runs, stale_drops(fleet) - dropped


def needed(kind, hosts, multiple):
    interval = (REPORT_INTERVAL if kind == 'report'
                else AGENT_HEARTBEAT_INTERVAL)
    return hosts * multiple / interval


def load_rows(label, runs, dropped, cpu, conductors, hosts, multiple,
              connections=None):
    """A row per kind of ``runs``; the CPU per op where one kind ran
    alone, the cores the conductors kept busy and the peak of database
    connections in the note."""
    rows = []
    for kind, run in sorted(runs.items(),
                            key=lambda item: item[0] != 'report'):
        wall = run.ended - run.started
        late = bench_arqs.percentile(sorted(run.late), 99)
        note = 'x%g: needed %.1f/s; started late p99 %.0f ms' % (
            multiple, needed(kind, hosts, multiple), late * 1e3)
        if kind == 'heartbeat':
            note += ('; latency: the cast; %d dropped as stale'
                     % dropped)
        if cpu and not rows:
            note += '; conductors %.2f cores busy' % (cpu['cond'] / wall)
        if connections and not rows:
            note += '; database connections peak %d (%s)' % (
                connections.peak, connections.holders)
        print_errors('%s %ss' % (label, kind), run.errors)
        rows.append(Row('%s %s' % (label, kind), conductors, run.count,
                        wall, run.samples, run.errors.count,
                        cpu if len(runs) == 1 else {}, note))
    return rows


def steady(fleet, agents, conductors):
    """Phase 3: the agents at their default intervals (times each of
    ``--steady``): reports alone, heartbeats alone, then both."""
    args = fleet.args
    heartbeats = Heartbeats(fleet, agents)
    warm = heartbeats.warm_up()
    settle(fleet)
    before = fleet.cpu.snapshot()
    time.sleep(5)
    idle = fleet.cpu.since(before)['cond'] / 5
    print('  (untimed) every host\'s first heartbeat stored in %.1f s; the '
          'conductors idle use %.3f cores' % (warm, idle), flush=True)
    rows = []
    for multiple in args.steady:
        for label, reports, beats in (('paced', True, False),
                                      ('paced', False, True),
                                      ('both', True, True)):
            settle(fleet)
            before = fleet.cpu.snapshot()
            with ConnectionPeak(fleet) as connections:
                runs, dropped = agent_load(fleet, agents, heartbeats,
                                           multiple, args.steady_duration,
                                           reports, beats)
            rows += load_rows(label, runs, dropped, fleet.cpu.since(before),
                              conductors, len(agents.names), multiple,
                              connections)
    return rows


# --- the mass boot -----------------------------------------------------------

@dataclasses.dataclass
class Boot:
    """One instance's times, in seconds."""

    create: float  # Nova's create_arqs_and_match_resource_providers
    event: float  # bind PATCH sent -> Nova's event received
    resolved: float  # bind PATCH sent -> the resolved ARQs answered


def placement_targets(fleet, count):
    """``count`` (compute node name, GPU provider uuid), as Nova's
    scheduler finds them in Placement: providers with a free PGPU, host by
    host in turn (instance i on host i mod hosts)."""
    def get(params=None):
        response = fleet.placement_adapter.get(
            '/resource_providers', params=params, microversion='1.14',
            raise_exc=False)
        if response.status_code != 200:
            raise RuntimeError('Placement: %s %s' % (response.status_code,
                                                     response.text[:200]))
        return response.json()['resource_providers']

    names = {rp['uuid']: rp['name'] for rp in get()}
    gpus = sorted((names[rp['root_provider_uuid']], rp['name'], rp['uuid'])
                  for rp in get({'resources': 'PGPU:1'}))
    by_host = {}
    for host, _, rp_uuid in gpus:
        by_host.setdefault(host, []).append((host, rp_uuid))
    spread = [t for group in itertools.zip_longest(*by_host.values())
              for t in group if t is not None]
    if len(spread) < count:
        raise RuntimeError('%d instances asked for, Placement has %d free '
                           'GPUs' % (count, len(spread)))
    return spread[:count]


class NovaPool:
    """Nova's own cyborg client (``nova.accelerator.cyborg``) in
    ``size`` processes (``tests/functional/clients/nova_arq_probe.py``),
    each taken by one step at a time."""

    def __init__(self, fleet, size):
        started = time.monotonic()
        self.processes = [bench_arqs.NovaProcess(fleet.directory, i)
                          for i in range(size)]
        self.free = queue.Queue()
        for process in self.processes:
            # Each waits until its Nova is imported: all import at once.
            process.connect('http://127.0.0.1:%d/v2' % fleet.api.port)
            self.free.put(process)
        print('  (untimed) %d Nova client processes ready in %.1f s'
              % (size, time.monotonic() - started), flush=True)

    def ask(self, op, **arguments):
        process = self.free.get()
        try:
            return process.ask(op, **arguments)
        finally:
            self.free.put(process)

    def pids(self):
        return [p.process.pid for p in self.processes]

    def close(self):
        for process in self.processes:
            process.close()


def boot(fleet, novas, target):
    """One instance, as Nova's conductor and compute manager take it
    through its ARQs: create them matched to the GPU's provider, bind
    them to the compute node, wait for the event, read the resolved
    ARQs. Returns (Boot, None) or (None, error)."""
    hostname, rp_uuid = target
    instance = str(uuid.uuid4())
    start = time.perf_counter()
    got = novas.ask('create', dp_name=PROFILE,
                    rg_rp_map={'device_profile_0': [rp_uuid]})
    if 'error' in got:
        return None, 'create: %s' % got['message'][:160]
    arqs = got['arqs']
    waiter = fleet.nova.expect(instance)
    try:
        bind_start = time.perf_counter()
        got = novas.ask('bind', bindings={
            arq['uuid']: {'hostname': hostname,
                          'device_rp_uuid': arq['device_rp_uuid'],
                          'instance_uuid': instance} for arq in arqs})
        if 'error' in got:
            return None, 'bind: %s' % got['message'][:160]
        if not waiter.wait(bench_arqs.EVENT_TIMEOUT):
            return None, 'no event for %s within %ds' % (
                instance, bench_arqs.EVENT_TIMEOUT)
        evented = time.perf_counter()
        if waiter.received.status != 'completed':
            return None, 'Nova was told %s' % waiter.received.status
        got = novas.ask('arqs', instance_uuid=instance, only_resolved=True)
        resolved = time.perf_counter()
    finally:
        fleet.nova.forget(instance)
    if 'error' in got:
        return None, 'resolved: %s' % got['message'][:160]
    states = [a['state'] for a in got['arqs']]
    if states != ['Bound'] * len(arqs):
        return None, 'ARQs of %s resolved as %s' % (instance, states)
    return Boot(bind_start - start, evented - bind_start,
                resolved - bind_start), None


def mass_boot(fleet, agents, conductors):
    """Phase 5: ``--mass-boot`` instances of one GPU each, booted at a
    steady rate over ``--mass-boot-seconds``, through Nova's client, the
    agents' reports and heartbeats going on at ``--mass-boot-background``
    times their default rates."""
    args = fleet.args
    if not args.mass_boot:
        return []
    ensure_profile(fleet)
    targets = placement_targets(fleet, args.mass_boot)
    if fleet.novas is None:
        fleet.novas = NovaPool(fleet, args.mass_boot_clients)
        fleet._later(fleet.novas.close)
    heartbeats = Heartbeats(fleet, agents)
    multiple = args.mass_boot_background
    if multiple:
        heartbeats.warm_up()
    settle(fleet)
    interval = args.mass_boot_seconds / args.mass_boot
    schedule = [(i * interval, target) for i, target in enumerate(targets)]
    background = {}

    def agents_meanwhile():
        background['runs'] = agent_load(fleet, agents, heartbeats, multiple,
                                        args.mass_boot_seconds)

    other = threading.Thread(target=agents_meanwhile, daemon=True)
    before = fleet.cpu.snapshot()
    with ConnectionPeak(fleet) as connections:
        if multiple:
            other.start()
        run = paced(schedule, args.mass_boot_threads,
                    lambda target: boot(fleet, fleet.novas, target))
        if multiple:
            other.join()
    cpu = fleet.cpu.since(before)
    print_errors('mass boot', run.errors)
    reset_arqs(fleet)
    boots = run.samples

    def ms(values, p):
        return bench_arqs.percentile(sorted(values), p) * 1e3

    wall = run.ended - run.started
    rows = [Row(
        'mass boot', conductors, run.count, wall,
        [b.resolved for b in boots], run.errors.count, cpu,
        'target %.1f/s; latency: bind PATCH -> resolved ARQs; bind -> '
        'event p50 %.0f p99 %.0f ms; create p50 %.0f p99 %.0f ms; started '
        'late p99 %.0f ms; %d Nova client processes; conductors %.2f '
        'cores busy; database connections peak %d (%s)%s' % (
            args.mass_boot / args.mass_boot_seconds,
            ms([b.event for b in boots], 50), ms([b.event for b in boots], 99),
            ms([b.create for b in boots], 50),
            ms([b.create for b in boots], 99), ms(run.late, 99),
            args.mass_boot_clients, cpu['cond'] / wall, connections.peak,
            connections.holders,
            '; CPU per boot with the agents\' meanwhile' if multiple
            else ''))]
    if multiple:
        runs, dropped = background['runs']
        rows += load_rows('meanwhile', runs, dropped, {}, conductors,
                          len(agents.names), multiple)
    return rows


PHASES = {'first': first_reports, 'unchanged': unchanged_reports,
          'steady': steady, 'binds': binds, 'massboot': mass_boot}


def settle(fleet, idle=0.2, window=2.0, timeout=180):
    """Wait until the conductors and Placement use less than ``idle`` of
    a core: a conductor that just joined compares its hosts with Placement
    at once (its reconcile pass), which is not the load being measured."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = fleet.cpu.snapshot()
        time.sleep(window)
        used = fleet.cpu.since(before)
        busy = (used['cond'] + used['plc']) / window
        if busy < idle:
            break
    waited = time.monotonic() - started
    if waited > 2 * window:
        print('  (waited %.0f s for the conductors and Placement to go '
              'idle: %.2f cores busy at the end)' % (waited, busy),
              flush=True)


# --- the run -----------------------------------------------------------------

def bench(args):
    fleet = Fleet(args)
    rows = []
    try:
        fleet.start()
        agents = Agents(args.hosts, args.devices)
        compute_nodes(fleet, agents)
        for count in args.conductors:
            started = time.monotonic()
            fleet.scale_conductors(count)
            print('\n%d conductor(s) live and agreed on the ring in %.1f s; '
                  'load average %.1f' % (count, time.monotonic() - started,
                                         os.getloadavg()[0]), flush=True)
            print(HEADER)
            for name in args.phases:
                settle(fleet)
                with fleet.profiling(name):
                    phase_rows = PHASES[name](fleet, agents, count)
                for row in phase_rows:
                    print(row.line(), flush=True)
                    rows.append(row)
        return rows, os.getloadavg()
    except BaseException:
        fleet.print_logs()
        raise
    finally:
        fleet.close()


def print_summary(rows, load, args):
    print('\n=== fleet: %d hosts x %d passthrough GPUs, MariaDB, RabbitMQ, '
          'Placement on MariaDB (gunicorn %d x %d threads), API gunicorn 2 '
          'sync workers; %d cores ===' % (
              args.hosts, args.devices, args.placement_workers,
              PLACEMENT_THREADS, os.cpu_count()))
    print(HEADER)
    for row in rows:
        print(row.line())
    print('  load average at the end (1, 5, 15 min): %.1f %.1f %.1f (other '
          'work on the machine shares the cores)' % load)
    print('  CPU ms per op: the conductors (cond), MariaDB (db) and '
          'RabbitMQ (mq), both shared with anything else running, '
          'Placement (plc), the API (api), this process (gen: the '
          'agents and Nova\'s events) and Nova\'s client processes '
          '(nova); a window of both kinds (both, meanwhile) says the '
          'cores the conductors kept busy instead.')
    print('  per s: done over the wall time; a heartbeat is done once its '
          'usage is in its host\'s services row. The agents\' defaults: '
          'a report every %d s, a heartbeat every %d s (needed: hosts / '
          'interval).' % (REPORT_INTERVAL, AGENT_HEARTBEAT_INTERVAL))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])

    def numbers(text):
        return [int(n) for n in text.split(',') if n]

    def multiples(text):
        return [float(n) for n in text.split(',') if n]

    parser.add_argument('--conductors', default='1,3', type=numbers,
                        help='numbers of conductor processes, in turn')
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--devices', type=int, default=8,
                        help='GPUs per host')
    parser.add_argument('--duration', type=float, default=30.0,
                        help='seconds of unchanged reports per number of '
                             'conductors')
    parser.add_argument('--threads', type=int, default=32,
                        help='agents reporting at the same time')
    parser.add_argument('--binds', type=int, default=1000,
                        help='instances bound per number of conductors')
    parser.add_argument('--bind-threads', type=int, default=20,
                        help='instances being bound at the same time')
    parser.add_argument('--steady', default='1', type=multiples,
                        help='multiples of the agents\' default report '
                             'and heartbeat rates, in turn')
    parser.add_argument('--steady-duration', type=float, default=30.0,
                        help='seconds of each steady window')
    parser.add_argument('--mass-boot', type=int, default=500,
                        help='instances of the mass boot (0: none)')
    parser.add_argument('--mass-boot-seconds', type=float, default=60.0,
                        help='seconds over which they are booted')
    parser.add_argument('--mass-boot-clients', type=int, default=16,
                        help='processes of Nova\'s cyborg client')
    parser.add_argument('--mass-boot-threads', type=int, default=100,
                        help='instances being booted at the same time, '
                             'at most')
    parser.add_argument('--mass-boot-background', type=float, default=1.0,
                        help='the agents\' reports and heartbeats during '
                             'the mass boot, as a multiple of their '
                             'default rates (0: none)')
    parser.add_argument('--placement-workers', type=int, default=2)
    parser.add_argument('--phases', default=','.join(PHASES),
                        help='a comma list of %s' % ', '.join(PHASES))
    parser.add_argument('--profile', choices=list(PHASES),
                        help='profile the conductors (yappi, every thread) '
                             'during this phase and print where their CPU '
                             'time went')
    parser.add_argument('--max-runtime', type=int, default=900,
                        help='give up after this many seconds')
    args = parser.parse_args(argv)
    args.phases = [p for p in args.phases.split(',') if p]
    if not set(args.phases) <= set(PHASES):
        parser.error('--phases takes %s' % ', '.join(PHASES))
    if args.binds > args.hosts * args.devices:
        args.binds = args.hosts * args.devices
    if args.mass_boot > args.hosts * args.devices:
        parser.error('--mass-boot: %d GPUs in all' % (args.hosts
                                                      * args.devices))
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    print('%d cores, load average %.1f; %d hosts x %d GPUs; conductors %s; '
          'at most %d s' % (os.cpu_count(), os.getloadavg()[0], args.hosts,
                            args.devices, args.conductors, args.max_runtime),
          flush=True)
    try:
        with bench_http.deadline(args.max_runtime):
            rows, load = bench(args)
            print_summary(rows, load, args)
    except Deadline as e:
        print('stopped: %s' % e, file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
