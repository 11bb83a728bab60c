"""Benchmark a fleet of conductors: agents' reports and binds at scale.

    python tools/bench/fleet.py [--conductors 1,3] [--hosts 1000]
        [--devices 8] [--duration 30] [--threads 32] [--binds 1000]
        [--bind-threads 20] [--placement-workers 2] [--max-runtime 900]

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
  ``accelerator-request-bound`` events (``tests/nova_events.py``).

Agents are not run: for a report, all an agent does is one RPC call
``report_host_inventory`` (``cyborg.conductor.rpcapi.ConductorAPI`` over
the real transport), to the conductor that the previous answer named as
the host's owner, as agents do; and a bind of a PCI passthrough handle
makes no agent call (only MDEV handles are prepared on the host).

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
3. binds: a device profile of one PGPU and ``--binds`` ARQs are created
   through the API (not timed); then ``--bind-threads`` Nova threads bind
   them, one instance each, spread over the hosts (instance i on host i
   mod hosts): PATCH, wait for Nova's event, GET ?instance=&bind_state=
   resolved. binds/s (completed binds over the wall time) and PATCH sent
   -> resolved answer p50/p99. The ARQs are then removed in the database
   and the handles freed (a passthrough handle has nothing to release on
   the host), ready for the next number of conductors.

Latencies depend on what else runs on the machine; the CPU seconds per
operation much less so. ``--phases`` picks phases; new workloads are new
entries of ``PHASES``.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import itertools
import os
import pathlib
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
import inventory_report  # noqa: E402  (tools/bench)
import sqlalchemy as sa  # noqa: E402

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


# Not an Exception: nothing on the way may swallow it.
Deadline = bench_arqs.Deadline


def percentile(values, p):
    return bench_arqs.percentile(sorted(values), p)


# --- Placement on MariaDB, in gunicorn ---------------------------------------

def placement_app():
    """gunicorn's app factory: Placement on ``FLEET_PLACEMENT_DB``."""
    from placement import db_api
    from placement import deploy
    conf = placement_service._placement_conf(
        os.environ['FLEET_PLACEMENT_DB'])
    db_api.configure(conf)
    return deploy.loadapp(conf)


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
            server = bench_http.Server(
                [command, '--config-file', str(conf)], None,
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
        per_op = ' '.join('%s %.2f' % (name, seconds * 1e3 / self.count)
                          for name, seconds in self.cpu.items()
                          ) if self.count else ''
        return '  %-18s %5d %7d %7.1f %8.1f %8.1f %8.1f %6d  %s%s' % (
            self.phase, self.conductors, self.count, self.seconds,
            self.count / self.seconds if self.seconds else 0.0,
            bench_arqs.percentile(lat, 50) * 1e3,
            bench_arqs.percentile(lat, 99) * 1e3, self.errors, per_op,
            ('; ' + self.note) if self.note else '')


HEADER = '  %-18s %5s %7s %7s %8s %8s %8s %6s  %s' % (
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


PHASES = {'first': first_reports, 'unchanged': unchanged_reports,
          'binds': binds}


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
                for row in PHASES[name](fleet, agents, count):
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
          'Placement (plc), the API (api) and this process (gen: the '
          'agents and Nova).')


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])

    def numbers(text):
        return [int(n) for n in text.split(',') if n]

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
    parser.add_argument('--placement-workers', type=int, default=2)
    parser.add_argument('--phases', default=','.join(PHASES),
                        help='a comma list of %s' % ', '.join(PHASES))
    parser.add_argument('--max-runtime', type=int, default=900,
                        help='give up after this many seconds')
    args = parser.parse_args(argv)
    args.phases = [p for p in args.phases.split(',') if p]
    if not set(args.phases) <= set(PHASES):
        parser.error('--phases takes %s' % ', '.join(PHASES))
    if args.binds > args.hosts * args.devices:
        args.binds = args.hosts * args.devices
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGALRM, bench_arqs._raise_deadline)
    signal.signal(signal.SIGTERM, bench_arqs._raise_exit)
    signal.alarm(args.max_runtime)
    print('%d cores, load average %.1f; %d hosts x %d GPUs; conductors %s; '
          'at most %d s' % (os.cpu_count(), os.getloadavg()[0], args.hosts,
                            args.devices, args.conductors, args.max_runtime),
          flush=True)
    try:
        rows, load = bench(args)
        print_summary(rows, load, args)
    except Deadline as e:
        print('stopped: %s' % e, file=sys.stderr)
        return 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return 0


if __name__ == '__main__':
    sys.exit(main())
