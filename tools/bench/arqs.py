"""Benchmark accelerator requests (ARQs): create, bind, list, delete.

    python tools/bench/arqs.py [--db sqlite|mysql|postgresql|a,b,c]
        [--quick] [--clients 1,10,100] [--nova-clients 1,10]
        [--threads 1,4] [--seconds S] [--resolve event|poll]
        [--sizes 1,10,100,1000] [--no-http] [--profile N]

For each database: a fresh database is migrated, the fake FPGA is stored
for enough hosts (16 attach handles each) that every concurrent instance
finds a free handle, a RabbitMQ virtual host is made (and deleted at the
end), the API is served by gunicorn (2 sync workers) and a
``cyborg-conductor`` process binds over RabbitMQ. The conductor's Placement
is openstack-placement on SQLite and its Nova is a stand-in for the
external-events endpoint (``tests/nova_events.py``), both served from this
process. Every caller is trusted (``auth_strategy = noauth``). Then:

1. create: POST /v2/accelerator_requests (one ARQ each) from 1, 10 and
   100 concurrent clients; latency p50/p99;
2. create+bind+resolved, as Nova spawns an instance: POST, PATCH (bind to
   the instance's host), wait for Nova's ``accelerator-request-bound``
   event at the stand-in, GET ?instance=&bind_state=resolved; then the
   instance is deleted (DELETE ?instance=, not timed), which frees the
   handle. 1, 10 and 100 concurrent instances; p50/p99 of the whole and
   of bind -> resolved (PATCH sent to resolved answer). ``--resolve poll``
   polls the GET until it stops answering 423 instead of waiting for the
   event. The same through Nova's own cyborg client (``nova.accelerator.
   cyborg``, one process per instance, ``--nova-clients``, 1 and 10):
   ``create_arqs_and_match_resource_providers``, ``bind_arqs``, the
   event, ``get_arqs_for_instance(only_resolved=True)``, then
   ``delete_arqs_for_instance``;
3. POST+DELETE pairs per second on 1 and 4 threads;
4. in this process (webtest, no server): SQL statements and time of
   GET /v2/accelerator_requests for N ARQs (a SQLAlchemy
   ``before_cursor_execute`` listener on the app's engine), and of each
   step of one instance's life (the conductor's part is
   ``Binder.bind`` called directly, with its HTTP call to the stand-in).
   ``--no-http`` runs only this part (no RabbitMQ, API or conductor).

Each workload runs ``--seconds`` (10; 2 with ``--quick``) per number of
clients, every client at least once: about two minutes per database by
default, one with ``--quick``. Clients are threads of this process, one
new TCP connection per request (gunicorn's sync workers close every
connection). What each operation costs in CPU is reported per process
group (``cpu ms/op``): unlike latencies, it hardly changes when other
work shares the cores, and it says which process a figure is made in.
``--profile N`` also profiles N in-process creates and binds (cProfile)
and prints where the time goes.
"""

import argparse
import contextlib
import cProfile
import dataclasses
import http.client
import json
import math
import os
import pathlib
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

import device_profiles as bench_http  # noqa: E402  (tools/bench)
import psutil  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from cyborg.db import migration  # noqa: E402
from cyborg.db import models  # noqa: E402
from cyborg.objects import inventory  # noqa: E402
from tests import db_servers  # noqa: E402
from tests import inventory_rows  # noqa: E402
from tests import nova_events  # noqa: E402
from tests import placement_service  # noqa: E402

ARQS = '/v2/accelerator_requests'
PROFILE = 'bench-dp'
PROFILE_GROUPS = [{'resources:FPGA': '1'}]
HANDLES_PER_HOST = 16  # the fake driver's deployable
RABBIT = 'rabbit://guest:guest@127.0.0.1:5672/%s'
JSON = {'Content-Type': 'application/json'}
EVENT_TIMEOUT = 30.0
# The processes whose CPU time each phase reports, by name.
DB_PROCESSES = {'mysql': ('mariadbd', 'mysqld'),
                'postgresql': ('postgres', 'postmaster')}
MQ_PROCESSES = ('beam.smp',)


Deadline = bench_http.Deadline


# --- figures ----------------------------------------------------------------

def percentile(sorted_values, p):
    if not sorted_values:
        return float('nan')
    index = min(len(sorted_values) - 1, int(p / 100.0 * len(sorted_values)))
    return sorted_values[index]


@dataclasses.dataclass
class Row:
    """One line of the summary."""
    workload: str
    clients: str
    count: int
    seconds: float
    latencies: list  # seconds, of each operation
    errors: int
    cpu: dict  # process group -> CPU seconds used during the run
    note: str = ''

    @property
    def rate(self):
        return self.count / self.seconds if self.seconds else float('nan')

    def p(self, pct):
        return percentile(sorted(self.latencies), pct) * 1e3

    def cpu_per_op(self):
        if not self.count:
            return ''
        # The Nova client processes show only where they ran.
        return ' '.join('%s %.1f' % (name, seconds * 1e3 / self.count)
                        for name, seconds in self.cpu.items()
                        if name != 'nova' or seconds > 0.0005 * self.count)


class Errors:
    """Failed operations: a count and the first few reasons."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0
        self.examples = []

    def add(self, what):
        with self._lock:
            self.count += 1
            if len(self.examples) < 5:
                self.examples.append(what)


# --- CPU accounting ---------------------------------------------------------

class CpuMeter:
    """CPU seconds (user + system) of named groups of processes."""

    def __init__(self, groups):
        self.groups = groups  # name -> callable returning psutil.Process

    @staticmethod
    def _times(processes):
        found = {}
        for process in processes:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                found[process.pid] = times.user + times.system
        return found

    def snapshot(self):
        return {name: self._times(find())
                for name, find in self.groups.items()}

    def since(self, before):
        now = self.snapshot()
        # A process born during the run counts whole; one that died is lost.
        return {name: sum(seconds - before[name].get(pid, 0.0)
                          for pid, seconds in now[name].items())
                for name in now}


def process_tree(pid):
    def find():
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            return [root] + root.children(recursive=True)
        return []
    return find


def processes_named(names):
    def find():
        return [p for p in psutil.process_iter(['name'])
                if p.info['name'] in names]
    return find


# --- the Nova stand-in ------------------------------------------------------

class NovaStandIn(nova_events.NovaEventsServer):
    """Nova's external-events endpoint that wakes the instance waiting for
    its event, and keeps no history (a run posts thousands)."""

    def __init__(self):
        super().__init__()
        self._waiters_lock = threading.Lock()
        self._waiters = {}

    def expect(self, instance_uuid):
        """A ``threading.Event`` set when the instance's event arrives;
        its ``received`` is then the ``ReceivedEvent``."""
        waiter = threading.Event()
        waiter.received = None
        with self._waiters_lock:
            self._waiters[instance_uuid] = waiter
        return waiter

    def forget(self, instance_uuid):
        with self._waiters_lock:
            self._waiters.pop(instance_uuid, None)

    def _record(self, call, events=()):
        # Called by the handler thread of each request it answered.
        if call.error:
            print('the Nova stand-in refused a request: %s' % call.error,
                  file=sys.stderr)
        for event in events:
            with self._waiters_lock:
                waiter = self._waiters.pop(event.server_uuid, None)
            if waiter is not None:
                waiter.received = event
                waiter.set()


# --- HTTP -------------------------------------------------------------------

def call(port, method, path, body=None, timeout=60):
    """(status, parsed body or raw bytes); status 0 if the connection
    failed."""
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    try:
        conn.request(method, path,
                     body=None if body is None else json.dumps(body),
                     headers=JSON if body is not None else {})
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        return 0, str(exc).encode()
    finally:
        conn.close()
    if data and resp.getheader('Content-Type', '').startswith(
            'application/json'):
        with contextlib.suppress(ValueError):
            return resp.status, json.loads(data)
    return resp.status, data


def describe(status, body):
    if isinstance(body, dict):
        body = body.get('error_message', body)
    return '%s %s' % (status, str(body)[:160])


def bind_body(arq_uuid, target, instance_uuid):
    """Nova's PATCH: RFC 6902 "add" operations per ARQ."""
    hostname, rp_uuid = target
    return {arq_uuid: [
        {'path': '/hostname', 'op': 'add', 'value': hostname},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance_uuid}]}


def drive(clients, seconds, op):
    """``clients`` threads, started together, each repeating ``op(index)``
    until ``seconds`` have passed (at least once). ``op`` returns
    ``(sample, error)``; returns (samples, Errors, wall seconds)."""
    barrier = threading.Barrier(clients + 1)
    samples, errors, failures = [], Errors(), []
    lock = threading.Lock()
    end = []

    def run(index):
        barrier.wait()
        mine = []
        try:
            while True:
                sample, error = op(index)
                if error:
                    errors.add(error)
                else:
                    mine.append(sample)
                if time.perf_counter() >= end[0]:
                    break
        except Exception as exc:  # reported, not hidden
            failures.append(exc)
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=run, args=(i,), daemon=True,
                                name='client-%d' % i)
               for i in range(clients)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    end.append(start + seconds)
    barrier.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError('%d client(s) failed; the first: %r'
                           % (len(failures), failures[0]))
    return samples, errors, elapsed


# --- the deployment ---------------------------------------------------------

def rabbitmqctl(*args):
    command = shutil.which('rabbitmqctl') or '/usr/sbin/rabbitmqctl'
    subprocess.run([command, '-q', *args], check=True, capture_output=True,
                   timeout=60)


def seed(url, hosts):
    """The bench's device profile, and the fake FPGA on ``hosts`` hosts;
    returns [(hostname, rp_uuid)]."""
    engine = sa.create_engine(url)
    targets = []
    try:
        with engine.begin() as conn:
            profile_id = conn.execute(sa.insert(models.DeviceProfile).values(
                uuid=str(uuid.uuid4()), name=PROFILE,
                profile_json={'groups': PROFILE_GROUPS},
                created_at=models.utcnow())).inserted_primary_key[0]
            # Its first revision, by which its ARQs bind.
            conn.execute(sa.insert(models.DeviceProfileRevision).values(
                device_profile_id=profile_id, revision=1, name=PROFILE,
                profile_json={'groups': PROFILE_GROUPS},
                created_at=models.utcnow()))
        for index in range(hosts):
            hostname = 'bench-host-%03d' % index
            address = inventory.PCIAddress('0000', '%02x' % (0x10 + index),
                                           '00', '0')
            stored, = inventory_rows.add_host(
                engine, hostname, inventory_rows.fake_devices(
                    controlpath_info=address.as_info()))
            deployable = stored.deployables['FakeDevice']
            with engine.connect() as conn:
                rp_uuid = conn.execute(
                    sa.select(models.Deployable.rp_uuid).where(
                        models.Deployable.id == deployable.id)).scalar_one()
            targets.append((hostname, rp_uuid))
    finally:
        engine.dispose()
    return targets


def write_config(path, log_path, url, vhost, placement_url, nova):
    path.write_text('\n'.join([
        '[DEFAULT]',
        'auth_strategy = noauth',
        'host = bench-conductor',
        'transport_url = %s' % (RABBIT % vhost),
        'debug = false',
        'log_file = %s' % log_path,
        '[database]',
        'connection = %s' % url,
        '[oslo_policy]',
        # A policy file left on the machine must not change the figures.
        'policy_file = /nonexistent/cyborg-policy.yaml',
        '[placement]',
        'auth_type = admin_token',
        'endpoint = %s' % placement_url,
        'token = admin',
        'endpoint_override = %s' % placement_url,
        nova.conf_section(),
    ]))
    return path


class Deployment:
    """Database, RabbitMQ vhost, Placement, Nova stand-in, conductor and
    API for one database engine; ``close()`` undoes all of it."""

    def __init__(self, db_kind, args):
        self.db_kind = db_kind
        self.args = args
        self.directory = pathlib.Path(tempfile.mkdtemp(prefix='cyborg-arqs-'))
        self._cleanup = [lambda: shutil.rmtree(self.directory,
                                               ignore_errors=True)]
        self.url = None
        self.api = None
        self.conductor = None
        self.nova = None
        self.targets = []

    def _later(self, step):
        self._cleanup.append(step)

    def start(self):
        args = self.args
        self.url = db_servers.create_database(self.db_kind, self.directory)
        self._later(lambda: db_servers.drop_database(self.url))
        migration.upgrade(self.url)
        hosts = max(1, math.ceil(max(args.clients) / HANDLES_PER_HOST))
        self.targets = seed(self.url, hosts)
        self.nova = NovaStandIn()
        self.nova.start()
        self._later(self.nova.stop)
        if args.no_http:
            return self

        self.vhost = 'cyborg-bench-%s' % uuid.uuid4().hex[:12]
        rabbitmqctl('add_vhost', self.vhost)
        self._later(lambda: rabbitmqctl('delete_vhost', self.vhost))
        rabbitmqctl('set_permissions', '-p', self.vhost, 'guest', '.*', '.*',
                    '.*')

        placement = placement_service.PlacementService(self.directory)
        placement.start()
        self._later(placement.stop)
        placement_url = placement.serve()

        env = dict(os.environ, PYTHONPATH=ROOT)
        conductor_conf = write_config(
            self.directory / 'conductor.conf',
            self.directory / 'conductor.log', self.url, self.vhost,
            placement_url, self.nova)
        api_conf = write_config(
            self.directory / 'api.conf', self.directory / 'api.log',
            self.url, self.vhost, placement_url, self.nova)
        command = shutil.which('cyborg-conductor',
                               path=os.path.dirname(sys.executable))
        command = [command] if command else [
            sys.executable, '-c',
            'from cyborg.cmd import conductor; conductor.main()']
        self.conductor = bench_http.Server(
            command + ['--config-file', str(conductor_conf)],
            None, str(self.directory / 'conductor.out'), env)
        self._later(self.conductor.stop)
        self._wait_for_log(self.directory / 'conductor.log',
                           'cyborg-conductor started', self.conductor)

        env['CYBORG_CONFIG_FILES'] = str(api_conf)
        port = bench_http.free_port()
        self.api = bench_http.Server(
            [sys.executable, '-m', 'gunicorn', '--workers',
             str(args.workers), '--worker-class', 'sync', '--bind',
             '127.0.0.1:%d' % port, '--log-level', 'warning',
             'cyborg.wsgi.api:application'],
            port, str(self.directory / 'gunicorn.log'), env)
        self._later(self.api.stop)
        self.api.wait_ready()

        groups = {'api': process_tree(self.api.proc.pid),
                  'cond': process_tree(self.conductor.proc.pid)}
        if self.db_kind in DB_PROCESSES:
            groups['db'] = processes_named(DB_PROCESSES[self.db_kind])
        groups['mq'] = processes_named(MQ_PROCESSES)
        groups['bench'] = lambda: [psutil.Process()]
        self.cpu = CpuMeter(groups)
        return self

    @staticmethod
    def _wait_for_log(path, text, server, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists() and text in path.read_text(errors='replace'):
                return
            if server.proc.poll() is not None:
                break
            time.sleep(0.1)
        log = path.read_text(errors='replace') if path.exists() else ''
        raise RuntimeError('%r not logged within %d s:\n%s%s' % (
            text, timeout, log[-3000:], server.log_tail()))

    def print_logs(self, lines=25):
        """The end of each service's log, to tell why a run failed."""
        for name in ('conductor.log', 'conductor.out', 'api.log',
                     'gunicorn.log'):
            path = self.directory / name
            if path.exists():
                tail = path.read_text(errors='replace').splitlines()[-lines:]
                print('--- the end of %s:\n%s' % (name, '\n'.join(tail)),
                      file=sys.stderr)

    def delete_all_arqs(self):
        engine = sa.create_engine(self.url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.delete(models.ExtendedAcceleratorRequest))
                conn.execute(sa.update(models.AttachHandle).values(
                    in_use=False))
        finally:
            engine.dispose()

    def close(self):
        for step in reversed(self._cleanup):
            try:
                step()
            except Exception as e:  # keep cleaning up the rest
                print('cleanup: %s' % e, file=sys.stderr)
        self._cleanup = []


# --- the workloads over HTTP ------------------------------------------------

def create_one(port):
    status, body = call(port, 'POST', ARQS,
                        {'device_profile_name': PROFILE})
    if status != 201:
        return None, describe(status, body)
    return body['arqs'][0]['uuid'], None


def timed_create(port):
    start = time.perf_counter()
    _, error = create_one(port)
    return time.perf_counter() - start, error


def measure_create(dep, clients, seconds):
    before = dep.cpu.snapshot()
    latencies, errors, elapsed = drive(
        clients, seconds, lambda index: timed_create(dep.api.port))
    row = Row('create: POST, 1 ARQ', str(clients), len(latencies), elapsed,
              latencies, errors.count, dep.cpu.since(before))
    dep.delete_all_arqs()
    return row, errors


@dataclasses.dataclass
class Cycle:
    whole: float  # POST sent -> resolved answer
    bind: float  # PATCH sent -> resolved answer
    wait: float  # PATCH answered -> event (or last 423) received
    polls: int  # GETs answered 423


def instance_cycle(dep, target, resolve):
    """One instance: create, bind, resolved, then delete (not timed).
    Returns (Cycle or None, error or None)."""
    port = dep.api.port
    instance = str(uuid.uuid4())
    start = time.perf_counter()
    arq, error = create_one(port)
    if error:
        return None, 'create: ' + error
    waiter = dep.nova.expect(instance) if resolve == 'event' else None
    try:
        bind_start = time.perf_counter()
        status, body = call(port, 'PATCH', ARQS,
                            bind_body(arq, target, instance))
        if status != 202:
            return None, 'bind: ' + describe(status, body)
        answered = time.perf_counter()
        if waiter is not None and not waiter.wait(EVENT_TIMEOUT):
            return None, 'no event for %s within %ds' % (instance,
                                                         EVENT_TIMEOUT)
        waited = time.perf_counter()
        path = '%s?instance=%s&bind_state=resolved' % (ARQS, instance)
        polls = 0
        while True:
            status, body = call(port, 'GET', path)
            if status != 423:
                break
            polls += 1
            waited = time.perf_counter()
            if waited - answered > EVENT_TIMEOUT:
                return None, 'still unresolved after %ds' % EVENT_TIMEOUT
            time.sleep(0.005)
        end = time.perf_counter()
        if status != 200:
            return None, 'resolved: ' + describe(status, body)
        state = body['arqs'][0]['state'] if body.get('arqs') else None
        if state != 'Bound':
            return None, 'ARQ %s ended %s' % (arq, state)
        if waiter is not None and waiter.received.status != 'completed':
            return None, 'Nova was told %s' % waiter.received.status
        return Cycle(end - start, end - bind_start, waited - answered,
                     polls), None
    finally:
        if waiter is not None:
            dep.nova.forget(instance)
        # As Nova deletes the instance: the handle is free again.
        status, body = call(port, 'DELETE', '%s?instance=%s'
                            % (ARQS, instance))
        if status != 204:
            print('deleting instance %s: %s' % (instance,
                                                describe(status, body)),
                  file=sys.stderr)


def measure_binds(dep, clients, seconds, resolve):
    def op(index):
        # Instance i binds on host i mod hosts: at most 16 per host.
        return instance_cycle(dep, dep.targets[index % len(dep.targets)],
                              resolve)

    before = dep.cpu.snapshot()
    cycles, errors, elapsed = drive(clients, seconds, op)
    cpu = dep.cpu.since(before)
    polls = sum(c.polls for c in cycles)
    wait = percentile(sorted(c.wait for c in cycles), 50) * 1e3
    note = ('event wait p50 %.1f ms' % wait if resolve == 'event'
            else '%.1f polls (423) per instance' % (
                polls / max(1, len(cycles))))
    rows = [
        Row('create+bind+resolved', str(clients), len(cycles), elapsed,
            [c.whole for c in cycles], errors.count, cpu, note),
        Row('  bind -> resolved', str(clients), len(cycles), elapsed,
            [c.bind for c in cycles], errors.count, {}),
    ]
    dep.delete_all_arqs()
    return rows, errors


def pair(port):
    start = time.perf_counter()
    arq, error = create_one(port)
    if error is None:
        status, body = call(port, 'DELETE', '%s/%s' % (ARQS, arq))
        if status != 204:
            error = 'delete: ' + describe(status, body)
    return time.perf_counter() - start, error


def measure_pairs(dep, threads, seconds):
    before = dep.cpu.snapshot()
    latencies, errors, elapsed = drive(threads, seconds,
                                       lambda index: pair(dep.api.port))
    row = Row('POST+DELETE pairs', '%d thr' % threads, len(latencies),
              elapsed, latencies, errors.count, dep.cpu.since(before))
    dep.delete_all_arqs()
    return row, errors


NOVA_PROBE = os.path.join(ROOT, 'tests', 'functional', 'clients',
                          'nova_arq_probe.py')


class NovaProcess:
    """Nova's own cyborg client (``nova.accelerator.cyborg``) in a child
    process: ``tests/functional/clients/nova_arq_probe.py``, one JSON step
    a line. A child, because Nova registers its options on the global
    ``cfg.CONF``."""

    def __init__(self, directory, index):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}  # no cloud of the caller's
        env.update(HOME=str(directory), PYTHONWARNINGS='ignore')
        with open(directory / ('nova-client-%d.log' % index), 'ab') as log:
            self.process = subprocess.Popen(
                [sys.executable, NOVA_PROBE], env=env, cwd=str(directory),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                text=True, bufsize=1)

    def _answer(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError('the Nova client process exited (%s)'
                               % self.process.poll())
        answer = json.loads(line)
        if 'crash' in answer:
            raise RuntimeError(answer['crash'])
        return answer

    def connect(self, endpoint):
        """Once Nova is imported: ``[cyborg] endpoint_override``."""
        if self._answer() != {'ready': True}:
            raise RuntimeError('the Nova client process did not start')
        self.ask('connect', endpoint=endpoint)

    def ask(self, op, **arguments):
        """The step's answer; ``error`` in it when Nova's client raised."""
        self.process.stdin.write(json.dumps({'op': op, **arguments}) + '\n')
        self.process.stdin.flush()
        return self._answer()

    def close(self):
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def nova_cycle(dep, nova, target):
    """One instance as Nova's conductor and compute manager see it:
    create the ARQ matched to the provider, bind, wait for the event, read
    the resolved ARQs; then delete the instance's (not timed)."""
    hostname, rp_uuid = target
    instance = str(uuid.uuid4())
    start = time.perf_counter()
    got = nova.ask('create', dp_name=PROFILE,
                   rg_rp_map={'device_profile_0': [rp_uuid]})
    if 'error' in got:
        return None, 'create: %s' % got['message'][:160]
    arq = got['arqs'][0]['uuid']
    waiter = dep.nova.expect(instance)
    try:
        bind_start = time.perf_counter()
        got = nova.ask('bind', bindings={arq: {
            'hostname': hostname, 'device_rp_uuid': rp_uuid,
            'instance_uuid': instance}})
        if 'error' in got:
            return None, 'bind: %s' % got['message'][:160]
        answered = time.perf_counter()
        if not waiter.wait(EVENT_TIMEOUT):
            return None, 'no event for %s within %ds' % (instance,
                                                         EVENT_TIMEOUT)
        waited = time.perf_counter()
        got = nova.ask('arqs', instance_uuid=instance, only_resolved=True)
        end = time.perf_counter()
        if 'error' in got:
            return None, 'resolved: %s' % got['message'][:160]
        states = [a['state'] for a in got['arqs']]
        if states != ['Bound']:
            return None, 'ARQ %s resolved as %s' % (arq, states)
        return Cycle(end - start, end - bind_start, waited - answered,
                     0), None
    finally:
        dep.nova.forget(instance)
        got = nova.ask('delete', instance_uuid=instance)
        if 'error' in got:
            print('Nova deleting instance %s: %s' % (instance,
                                                     got['message'][:160]),
                  file=sys.stderr)


def measure_nova_binds(dep, novas, clients, seconds):
    def op(index):
        return nova_cycle(dep, novas[index],
                          dep.targets[index % len(dep.targets)])

    before = dep.cpu.snapshot()
    cycles, errors, elapsed = drive(clients, seconds, op)
    cpu = dep.cpu.since(before)
    wait = percentile(sorted(c.wait for c in cycles), 50) * 1e3
    rows = [
        Row('Nova client: c+b+r', str(clients), len(cycles), elapsed,
            [c.whole for c in cycles], errors.count, cpu,
            'event wait p50 %.1f ms' % wait),
        Row('  bind -> resolved', str(clients), len(cycles), elapsed,
            [c.bind for c in cycles], errors.count, {}),
    ]
    dep.delete_all_arqs()
    return rows, errors


def warm_up(dep):
    """Every worker connected to the database and to RabbitMQ."""
    def op(index):
        return instance_cycle(dep, dep.targets[index % len(dep.targets)],
                              'event')

    for _ in range(2):
        _, errors, _ = drive(4, 0.5, op)
        if errors.count:
            raise RuntimeError('warm-up: %s' % errors.examples[0])
    dep.delete_all_arqs()


# --- in-process figures -----------------------------------------------------

class InProcess:
    """The API app and the conductor's Binder in this process, on the
    deployment's database; every SQL statement they run is counted."""

    def __init__(self, dep):
        import webtest

        from cyborg import context as cyborg_context
        from cyborg import rpc
        from cyborg.api import app as api_app
        from cyborg.clients import nova as nova_client
        from cyborg.conductor import binding
        from cyborg.db import session
        from tests import conductor_rpc
        from tests import conftest

        self.dep = dep
        conf = conftest.make_conf(dep.url)
        # Casts go to an in-process queue that nobody reads: the bench
        # calls the conductor's Binder itself.
        conductor_rpc.use_fake_transport(conf)
        dep.nova.configure(conf)
        self.db = session.Database(conf)
        self.transport = rpc.get_transport(conf)
        self.client = webtest.TestApp(api_app.build_app(
            conf, self.db, transport=self.transport))
        # The fake FPGA's TEST_PCI handles need no agent.
        self.binder = binding.Binder(
            conf, agent=None, nova=nova_client.NovaClient.from_conf(conf),
            owner='bench-in-process')
        self.context = cyborg_context.admin_context(self.db)
        self.counter = conftest.StatementCounter(*self.db.engines)

    def close(self):
        self.counter.close()
        self.transport.cleanup()
        self.db.dispose()

    # One instance's life, step by step.

    def create(self):
        got = self.client.post_json(ARQS, {'device_profile_name': PROFILE})
        return got.json['arqs'][0]['uuid']

    def bind(self, arq, instance):
        self.client.patch_json(ARQS, bind_body(arq, self.dep.targets[0],
                                               instance), status=202)

    def conductor_bind(self, arq):
        self.binder.bind(self.context, [arq])

    def resolved(self, instance):
        got = self.client.get(ARQS, {'instance': instance,
                                     'bind_state': 'resolved'})
        assert got.json['arqs'][0]['state'] == 'Bound', got.json

    def delete(self, instance):
        self.client.delete('%s?instance=%s' % (ARQS, instance), status=204)

    STEPS = ('POST (create)', 'PATCH (bind, API)', 'conductor bind + event',
             'GET resolved', 'DELETE ?instance=')

    def steps(self, repeat):
        """[(step, SQL statements, wall ms, CPU ms)] of one instance's
        life; the statements of the last run (they do not vary)."""
        self._life({}, {})  # warms up
        totals, counts = {}, {}
        for _ in range(repeat):
            self._life(totals, counts)
        return [(name, counts[name], totals[name][0] / repeat * 1e3,
                 totals[name][1] / repeat * 1e3) for name in self.STEPS]

    def _life(self, totals, counts):
        instance = str(uuid.uuid4())

        def step(index, func, *args):
            name = self.STEPS[index]
            self.counter.reset()
            wall, cpu = time.perf_counter(), time.thread_time()
            result = func(*args)
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            before = totals.get(name, (0.0, 0.0))
            totals[name] = (before[0] + wall, before[1] + cpu)
            counts[name] = len(self.counter)
            return result

        arq = step(0, self.create)
        step(1, self.bind, arq, instance)
        step(2, self.conductor_bind, arq)
        step(3, self.resolved, instance)
        step(4, self.delete, instance)

    def listing(self, sizes, repeat):
        """[(N, SQL statements, ms, bytes)] of GET /v2/accelerator_requests
        with N ARQs, the first min(N, handles) of them bound."""
        results = []
        for size in sizes:
            fill_arqs(self.db.engine, size, self.dep.targets)
            got = self.client.get(ARQS)  # warm
            assert len(got.json['arqs']) == size
            self.counter.reset()
            self.client.get(ARQS)
            statements = len(self.counter)
            count = max(3, repeat // max(1, size // 10))
            start = time.perf_counter()
            for _ in range(count):
                self.client.get(ARQS)
            ms = (time.perf_counter() - start) / count * 1e3
            results.append((size, statements, ms, len(got.body)))
        self.dep.delete_all_arqs()
        return results

    def profile(self, count):
        for what, run in (('create (POST)', self._profile_create),
                          ('bind (PATCH + conductor bind + GET resolved)',
                           self._profile_bind)):
            profiler = cProfile.Profile()
            run(profiler, count)
            stats = pstats.Stats(profiler, stream=sys.stdout)
            stats.strip_dirs()
            print('\n--- cProfile of %d in-process %s (times are totals) '
                  '---' % (count, what))
            stats.sort_stats('cumulative').print_stats(35)
            stats.sort_stats('tottime').print_stats(20)

    def _profile_create(self, profiler, count):
        self.create()
        profiler.enable()
        for _ in range(count):
            self.create()
        profiler.disable()
        self.dep.delete_all_arqs()

    def _profile_bind(self, profiler, count):
        for _ in range(count):
            instance = str(uuid.uuid4())
            arq = self.create()
            profiler.enable()
            self.bind(arq, instance)
            self.conductor_bind(arq)
            self.resolved(instance)
            profiler.disable()
            self.delete(instance)


def fill_arqs(engine, count, targets):
    """Exactly ``count`` ARQs of the bench profile; as many as there are
    attach handles are Bound to one, the rest Initial."""
    arq_table = models.ExtendedAcceleratorRequest
    handle = models.AttachHandle
    deployable = models.Deployable
    with engine.begin() as conn:
        conn.execute(sa.delete(arq_table))
        conn.execute(sa.update(handle).values(in_use=False))
        profile_id = conn.execute(sa.select(models.DeviceProfile.id).where(
            models.DeviceProfile.name == PROFILE)).scalar_one()
        rp_to_host = {rp: host for host, rp in targets}
        handles = conn.execute(
            sa.select(handle.id, handle.deployable_id, deployable.rp_uuid)
            .join(deployable, deployable.id == handle.deployable_id)
            .order_by(handle.id).limit(count)).all()
        now = models.utcnow()
        rows = []
        for index in range(count):
            row = {'uuid': str(uuid.uuid4()), 'project_id': 'noauth-project',
                   'state': 'Initial', 'device_profile_id': profile_id,
                   'device_profile_group_id': 0, 'created_at': now,
                   'hostname': None, 'device_rp_uuid': None,
                   'instance_uuid': None, 'attach_handle_id': None,
                   'deployable_id': None}
            if index < len(handles):
                h = handles[index]
                row.update(state='Bound', hostname=rp_to_host[h.rp_uuid],
                           device_rp_uuid=h.rp_uuid,
                           instance_uuid=str(uuid.uuid4()),
                           attach_handle_id=h.id,
                           deployable_id=h.deployable_id)
            rows.append(row)
        if rows:
            conn.execute(sa.insert(arq_table), rows)
        if handles:
            conn.execute(sa.update(handle).where(
                handle.id.in_([h.id for h in handles])).values(in_use=True))


# --- the run ----------------------------------------------------------------

def print_errors(what, errors):
    if errors.count:
        print('  %s: %d failed, e.g. %s' % (what, errors.count,
                                             '; '.join(errors.examples[:3])))


def print_row(row):
    print('  %-22s %7s %6d %8.1f %8.1f %8.1f %6d  %s%s' % (
        row.workload, row.clients, row.count, row.p(50), row.p(99),
        row.rate, row.errors, row.cpu_per_op(),
        ('; ' + row.note) if row.note else ''), flush=True)


HEADER = '  %-22s %7s %6s %8s %8s %8s %6s  %s' % (
    'workload', 'clients', 'n', 'p50 ms', 'p99 ms', 'per s', 'errors',
    'cpu ms/op')


def over_http(dep, args, novas):
    started = time.monotonic()
    warm_up(dep)
    for nova in novas:
        nova.connect('http://127.0.0.1:%d/v2' % dep.api.port)
    if novas:
        processes = [psutil.Process(n.process.pid) for n in novas]
        dep.cpu.groups['nova'] = lambda: processes
    print('%s ready (warmed up in %.1f s): %d hosts x %d handles, API port '
          '%s, conductor pid %d, vhost %s; load average %.1f' % (
              dep.db_kind, time.monotonic() - started, len(dep.targets),
              HANDLES_PER_HOST, dep.api.port, dep.conductor.proc.pid,
              dep.vhost, os.getloadavg()[0]), flush=True)
    print(HEADER)
    rows = []
    for clients in args.clients:
        row, errors = measure_create(dep, clients, args.seconds)
        print_row(row)
        print_errors('create', errors)
        rows.append(row)
    for clients in args.clients:
        got, errors = measure_binds(dep, clients, args.seconds,
                                    args.resolve)
        for row in got:
            print_row(row)
        print_errors('bind', errors)
        rows += got
    for clients in args.nova_clients:
        got, errors = measure_nova_binds(dep, novas, clients, args.seconds)
        for row in got:
            print_row(row)
        print_errors('bind through Nova\'s client', errors)
        rows += got
    for threads in args.threads:
        row, errors = measure_pairs(dep, threads, args.seconds)
        print_row(row)
        print_errors('pairs', errors)
        rows.append(row)
    return rows


def bench(db_kind, args):
    print('\n##### %s: setting up' % db_kind, flush=True)
    dep = Deployment(db_kind, args)
    novas = []
    try:
        started = time.monotonic()
        if not args.no_http:
            # Nova imports for seconds: meanwhile the rest is set up.
            novas = [NovaProcess(dep.directory, i)
                     for i in range(max(args.nova_clients, default=0))]
        dep.start()
        print('set up in %.1f s' % (time.monotonic() - started), flush=True)
        rows, load = [], None
        if not args.no_http:
            rows = over_http(dep, args, novas)
            load = os.getloadavg()
            dep.api.stop()
            dep.conductor.stop()

        local = InProcess(dep)
        try:
            steps = local.steps(args.repeat)
            listing = local.listing(args.sizes, args.repeat)
            if args.profile:
                local.profile(args.profile)
        finally:
            local.close()
        return rows, steps, listing, load
    except Exception:
        dep.print_logs()
        raise
    finally:
        for nova in novas:
            nova.close()
        dep.close()


def print_summary(db_kind, rows, steps, listing, load, args):
    print('\n=== ARQs on %s: %d cores, gunicorn %d sync workers, '
          'cyborg-conductor over RabbitMQ, Nova stand-in, resolve by %s ==='
          % (db_kind, os.cpu_count(), args.workers, args.resolve))
    if rows:
        print(HEADER)
        for row in rows:
            print_row(row)
        print('  load average at the end (1, 5, 15 min): %.1f %.1f %.1f '
              '(other work on the machine shares the cores)' % load)
        print('  cpu ms/op: CPU time per operation of the gunicorn master '
              'and workers (api), the conductor (cond), the DB server (db) '
              'and RabbitMQ (mq), both shared with anything else running, '
              'this process (bench: the clients, the Nova stand-in) and the '
              'Nova client processes (nova).')
    print('  in-process (webtest; SQL statements without BEGIN/COMMIT), one '
          'instance, %d runs:' % args.repeat)
    for name, statements, ms, cpu in steps:
        print('    %-24s %3d SQL %7.2f ms (CPU %.2f ms)'
              % (name, statements, ms, cpu))
    print('  in-process GET %s, N ARQs (min(N, %d) bound):'
          % (ARQS, HANDLES_PER_HOST * max(
              1, math.ceil(max(args.clients) / HANDLES_PER_HOST))))
    for size, statements, ms, size_bytes in listing:
        print('    N=%-5d %3d SQL %8.2f ms %9d bytes'
              % (size, statements, ms, size_bytes))
    counts = {statements for _, statements, _, _ in listing}
    print('    SQL statements per GET %s' % (
        'constant' if len(counts) == 1 else 'GROW WITH N: %s' % sorted(
            counts)))
    print('  Aim: pairs 1 / 4 threads >= 300 / >= 450 per s (upstream ~45 '
          '/ ~70); bind -> resolved p99 <= 30 ms at 1 instance, <= 150 ms '
          'at 10 (upstream p50 ~97 ms / p99 ~800 ms).')


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--db', default='sqlite',
                        help='sqlite, mysql, postgresql, comma separated')
    parser.add_argument('--quick', action='store_true',
                        help='a short run (a smoke test)')
    parser.add_argument('--clients', default='1,10,100',
                        help='concurrent clients/instances of 1. and 2.')
    parser.add_argument('--nova-clients',
                        help='concurrent instances bound through Nova\'s '
                             'own client, one process each (default 1,10; '
                             'quick 1; empty: none)')
    parser.add_argument('--threads', default='1,4',
                        help='threads of the POST+DELETE pairs')
    parser.add_argument('--seconds', type=float,
                        help='seconds of each workload at each number of '
                             'clients or threads (default 10, quick 2); '
                             'every client runs at least once')
    parser.add_argument('--resolve', default='event',
                        choices=('event', 'poll'),
                        help='wait for the Nova event before GET resolved '
                             '(as Nova does) or poll GET until not 423')
    parser.add_argument('--sizes', default='1,10,100,1000',
                        help='numbers of ARQs listed in-process')
    parser.add_argument('--repeat', type=int,
                        help='in-process runs per figure (default 50, '
                             'quick 10)')
    parser.add_argument('--no-http', action='store_true',
                        help='only the in-process figures (no RabbitMQ, '
                             'API server or conductor process)')
    parser.add_argument('--workers', type=int, default=2,
                        help='gunicorn worker processes')
    parser.add_argument('--profile', type=int, default=0, metavar='N',
                        help='also cProfile N in-process creates and binds')
    parser.add_argument('--max-runtime', type=int, default=0,
                        help='give up after this many seconds (default: '
                             '300 per database, 150 with --quick)')
    args = parser.parse_args(argv)
    args.dbs = [d for d in args.db.split(',') if d]
    if not set(args.dbs) <= set(db_servers.ENGINES):
        parser.error('--db takes %s' % ', '.join(db_servers.ENGINES))

    def numbers(text):
        return [int(n) for n in text.split(',') if n]

    args.clients = numbers(args.clients)
    args.threads = numbers(args.threads)
    args.sizes = numbers(args.sizes)
    defaults = ({'seconds': 2.0, 'repeat': 10, 'nova_clients': '1'}
                if args.quick else
                {'seconds': 10.0, 'repeat': 50, 'nova_clients': '1,10'})
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.nova_clients = numbers(args.nova_clients)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    budget = args.max_runtime or len(args.dbs) * (150 if args.quick
                                                  else 300)
    print('%d cores; databases %s; clients are threads of this process; '
          'at most %d s' % (os.cpu_count(), ', '.join(args.dbs), budget),
          flush=True)
    results = []
    try:
        with bench_http.deadline(budget):
            for db_kind in args.dbs:
                results.append((db_kind, *bench(db_kind, args)))
            for result in results:
                print_summary(*result, args)
    except Deadline as e:
        print('stopped: %s' % e, file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
