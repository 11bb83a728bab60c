"""Benchmark the API's request path: its figures against their targets.

    python tools/bench/request_path.py [--profiles 20] [--seconds 5]
        [--rounds 3] [--connections 1,4] [--pair-threads 1,4]
        [--binds 8] [--starts 3] [--generator auto|wrk|python]
        [--only dp,pairs,first-bind,rss] [--profile N] [--max-runtime 600]

Everything runs on this machine's MariaDB and RabbitMQ, in databases and
a virtual host of its own that it removes at the end, as do the
processes it starts.

1. ``dp``: GET /v2/device_profiles with ``--profiles`` profiles, served by
   gunicorn (2 sync workers, ``tools/bench/device_profiles.py``), beside a
   bare pecan app (``make_bare_app`` below) that answers the very body the
   API gave, under the same gunicorn settings. Each number of connections
   runs ``--rounds`` times, the two apps in turn, ``--seconds`` each; the
   best round of each counts (other work on the machine only lowers a
   figure). Target: ours >= 50% of the bare app on 1 and 4 connections.
2. ``pairs``: POST+DELETE of one ARQ per pair against the deployment of
   ``tools/bench/arqs.py`` (API in gunicorn, 2 sync workers;
   ``cyborg-conductor`` over RabbitMQ; Placement and a Nova stand-in in
   this process): from wrk on 1 connection, when it drives 1. (a Lua
   script, ``PAIRS_LUA``, deletes each POST's ARQ next), then from 1 (and
   4) Python client threads. Target: >= 300 pairs/s on 1 connection.
   The CPU time per pair of each group of processes is printed too: it
   moves much less than the rate when other work shares the cores.
3. ``first-bind``: ``--starts`` times, a fresh API of one gunicorn worker
   on that deployment answers one GET, then binds ``--binds`` instances
   one after another (POST, PATCH, Nova's event, DELETE); the PATCH of
   the worker's first bind against the median of its later ones. Target:
   the first no slower (within noise: 10 ms).
4. ``rss``: the resident memory of an idle API worker (the fresh one of
   3., after its one GET), of the deployment's ``cyborg-conductor`` and of
   a ``cyborg-agent`` (fake driver) started idle on the same virtual
   host. Target: each <= 100 MiB.

``wrk`` (in C) drives 1. when installed, else one Python process per
connection, which shares the 2 cores with the server and reads low; the
output says which. ``--profile N`` prints a cProfile of N in-process
GETs of 1. Latencies and rates move with whatever else runs on the
machine: the load average is printed beside them.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

import arqs as bench_arqs  # noqa: E402  (tools/bench)
import device_profiles as bench_http  # noqa: E402  (tools/bench)
import psutil  # noqa: E402

from cyborg.db import migration  # noqa: E402

PARTS = ('dp', 'pairs', 'first-bind', 'rss')
BODY_ENV = 'CYBORG_BENCH_BARE_BODY'
MIB = 1024 * 1024
RSS_TARGET_MIB = 100
FIRST_BIND_SLACK_MS = 10.0

Deadline = bench_arqs.Deadline


# --- the bare app ------------------------------------------------------------

def make_bare_app():
    """gunicorn's app factory: pecan answering GET /v2/device_profiles
    with the document in the file ``$CYBORG_BENCH_BARE_BODY``, rendered
    by pecan's own JSON renderer on every request."""
    with open(os.environ[BODY_ENV]) as f:
        return bench_http.bare_pecan_app(json.load(f))


# --- helpers -----------------------------------------------------------------

class Report:
    """The lines of the final table: (part, what, figure, target, verdict)."""

    def __init__(self):
        self.rows = []
        self.notes = []

    def add(self, part, what, figure, target='', ok=None):
        verdict = '' if ok is None else ('ok' if ok else 'MISSED')
        self.rows.append((part, what, figure, target, verdict))
        print('  %-28s %14s  %-16s %s' % (what, figure, target, verdict),
              flush=True)

    def print(self):
        print('\n=== request path: %d cores, load average %.1f %.1f %.1f ==='
              % ((os.cpu_count(),) + os.getloadavg()))
        print('%-11s %-28s %14s  %-16s %s' % ('part', 'what', 'figure',
                                               'target', ''))
        for row in self.rows:
            print('%-11s %-28s %14s  %-16s %s' % row)
        for note in self.notes:
            print(note)


def rss_mib(pid):
    return psutil.Process(pid).memory_info().rss / MIB


def workers_of(server):
    """The worker processes of a gunicorn master."""
    return psutil.Process(server.proc.pid).children()


def cleaning(cleanup):
    for step in reversed(cleanup):
        try:
            step()
        except Exception as e:  # keep cleaning up the rest
            print('cleanup: %s' % e, file=sys.stderr)
    cleanup.clear()


# --- 1. GET /v2/device_profiles against the bare app -------------------------

def bench_dp(args, report, cleanup):
    print('\n--- dp: GET %s, %d profiles, MariaDB, gunicorn 2 sync workers'
          % (bench_http.PATH, args.profiles), flush=True)
    directory = tempfile.mkdtemp(prefix='cyborg-request-path-')
    cleanup.append(lambda: shutil.rmtree(directory, ignore_errors=True))
    url = bench_http.create_database('mysql', directory)
    cleanup.append(lambda: bench_http.drop_database(url))
    migration.upgrade(url)
    config_path = bench_http.write_config(directory, url, 0)
    ours = bench_http.start_server('gunicorn', 'cyborg', 2, directory,
                                   config_path)
    cleanup.append(ours.stop)
    size = bench_http.create_profiles(ours.port, args.profiles)
    status, body = bench_http.request(ours.port, 'GET', bench_http.PATH)
    body_path = os.path.join(directory, 'body.json')
    with open(body_path, 'wb') as f:
        f.write(body)
    bare = bench_http.start_server(
        'gunicorn', 'bare', 2, directory,
        bare_app='request_path:make_bare_app()', env={BODY_ENV: body_path})
    cleanup.append(bare.stop)
    status, bare_body = bench_http.request(bare.port, 'GET', bench_http.PATH)
    if json.loads(bare_body) != json.loads(body):
        raise RuntimeError('the bare app answers another document')
    statements, ms = bench_http.in_process_figures(config_path, args.profile)
    print('  response %d bytes (bare app %d); %d SQL statement(s) and %.2f '
          'ms per GET in-process (webtest, no server)'
          % (size, len(bare_body), statements, ms), flush=True)

    run = bench_http.run_wrk if args.generator == 'wrk' else (
        bench_http.run_python)
    for server in (ours, bare):
        run(server.port, max(args.connections), 2)  # warm both
    best = {}
    for connections in args.connections:
        for round_ in range(args.rounds):
            for name, server in (('cyborg', ours), ('bare', bare)):
                got = run(server.port, connections, args.seconds)
                print('  round %d %-6s %d conn: %8.1f req/s  p50 %6.2f  '
                      'p99 %6.2f ms  errors %d'
                      % (round_ + 1, name, connections, got['rps'],
                         got['p50'], got['p99'], got['errors']), flush=True)
                key = (name, connections)
                if got['errors'] == 0 and got['rps'] > best.get(key, 0):
                    best[key] = got['rps']
    for connections in args.connections:
        ratio = best[('cyborg', connections)] / best[('bare', connections)]
        report.add('dp', 'cyborg %d conn, req/s' % connections,
                   '%.1f' % best[('cyborg', connections)])
        report.add('dp', 'bare pecan %d conn, req/s' % connections,
                   '%.1f' % best[('bare', connections)])
        report.add('dp', 'cyborg/bare %d conn' % connections,
                   '%.0f%%' % (ratio * 100), '>= 50%', ratio >= 0.5)
    report.add('dp', 'in-process ms per GET', '%.2f' % ms)
    report.notes.append(
        'dp: %s, best of %d rounds of %d s per app and number of '
        'connections; gunicorn sync workers open a TCP connection per '
        'request.' % ('wrk -t1' if args.generator == 'wrk'
                      else 'Python clients (sharing the cores)',
                      args.rounds, args.seconds))
    ours.stop()
    bare.stop()


# --- 2.-4. ARQs, the first bind and the idle memory --------------------------

def bench_arq_parts(args, report, cleanup):
    deployment_args = argparse.Namespace(clients=[1], workers=2,
                                         no_http=False)
    print('\n--- setting up the ARQ deployment (MariaDB, RabbitMQ, '
          'conductor, API)', flush=True)
    dep = bench_arqs.Deployment('mysql', deployment_args)
    cleanup.append(dep.close)
    try:
        dep.start()
        conductor_idle = rss_mib(dep.conductor.proc.pid)
        if 'pairs' in args.only:
            bench_arqs.warm_up(dep)
            print('--- pairs: POST+DELETE of one ARQ (load average %.1f)'
                  % os.getloadavg()[0], flush=True)
            if args.generator == 'wrk':
                row, p50, p99 = wrk_pairs(dep, args.seconds)
                report.add('pairs', 'POST+DELETE wrk 1 conn, /s',
                           '%.1f' % row.rate, '>= 300/s',
                           row.rate >= 300 and not row.errors)
                report.add('pairs', '  one request p50 / p99 ms',
                           '%.2f / %.2f' % (p50, p99))
                report.add('pairs', '  errors', '%d' % row.errors)
                report.notes.append(
                    'pairs, wrk: CPU ms per pair: %s (api: the gunicorn '
                    'workers; db: MariaDB; bench: wrk is not counted)'
                    % row.cpu_per_op())
            for threads in args.pair_threads:
                row, errors = bench_arqs.measure_pairs(dep, threads,
                                                       args.seconds)
                bench_arqs.print_errors('pairs', errors)
                # With wrk, the target is its figure's.
                target = '>= 300/s' if (
                    threads == 1 and args.generator != 'wrk') else ''
                report.add('pairs', 'POST+DELETE %d Python thread(s), /s'
                           % threads, '%.1f' % row.rate, target,
                           (row.rate >= 300 and not errors.count)
                           if target else None)
                report.add('pairs', '  p50 / p99 ms', '%.1f / %.1f' % (
                    row.p(50), row.p(99)))
                report.notes.append(
                    'pairs, %d thread(s): CPU ms per pair: %s (api: the '
                    'gunicorn workers; db: MariaDB; bench: the clients)'
                    % (threads, row.cpu_per_op()))
        api_idle = None
        if {'first-bind', 'rss'} & set(args.only):
            api_idle = first_binds(dep, args, report)
        if 'rss' in args.only:
            print('--- rss: idle processes', flush=True)
            if api_idle is not None:
                report.add('rss', 'API worker idle, MiB', '%.1f' % api_idle,
                           '<= %d' % RSS_TARGET_MIB,
                           api_idle <= RSS_TARGET_MIB)
            report.add('rss', 'conductor idle, MiB', '%.1f' % conductor_idle,
                       '<= %d' % RSS_TARGET_MIB,
                       conductor_idle <= RSS_TARGET_MIB)
            report.add('rss', 'conductor after the load', '%.1f'
                       % rss_mib(dep.conductor.proc.pid))
            agent = agent_rss(dep)
            report.add('rss', 'agent idle, MiB', '%.1f' % agent,
                       '<= %d' % RSS_TARGET_MIB, agent <= RSS_TARGET_MIB)
    except Exception:
        dep.print_logs()
        raise


# wrk alternates POST and DELETE on its one connection: each POST's ARQ
# is the next DELETE's, and every answer is counted by its kind.
PAIRS_LUA = '''
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  arq, asked, posts, deletes, failed = nil, nil, 0, 0, 0
end
function request()
  if arq ~= nil then
    local path = "%(arqs)s/" .. arq
    arq, asked = nil, "DELETE"
    return wrk.format("DELETE", path)
  end
  asked = "POST"
  return wrk.format("POST", "%(arqs)s",
                    {["Content-Type"] = "application/json"},
                    '{"device_profile_name": "%(profile)s"}')
end
function response(status, headers, body)
  if asked == "POST" and status == 201 then
    arq = string.match(body, '"uuid": *"([%%x%%-]+)"')
    posts = posts + 1
  elseif asked == "DELETE" and status == 204 then
    deletes = deletes + 1
  else
    failed = failed + 1
  end
end
function done(summary, latency, requests)
  local t = threads[1]
  io.write(string.format("PAIRS %%d %%d %%d %%d %%.3f %%.3f\\n",
    t:get("posts"), t:get("deletes"), t:get("failed"), summary.duration,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
'''


def wrk_pairs(dep, seconds):
    """POST+DELETE pairs from wrk (one thread, one connection): the row
    (pairs, seconds, errors, CPU) and the p50 and p99 ms of a request."""
    script = dep.directory / 'pairs.lua'
    script.write_text(PAIRS_LUA % {'arqs': bench_arqs.ARQS,
                                   'profile': bench_arqs.PROFILE})
    before = dep.cpu.snapshot()
    out = subprocess.run(
        ['wrk', '-t1', '-c1', '-d%ds' % seconds, '--timeout', '5s',
         '-s', str(script), 'http://127.0.0.1:%d' % dep.api.port],
        capture_output=True, text=True, check=True,
        timeout=seconds + 30).stdout
    cpu = dep.cpu.since(before)
    _posts, deletes, failed, micros, p50, p99 = re.search(
        r'^PAIRS (\d+) (\d+) (\d+) (\d+) ([\d.]+) ([\d.]+)$', out,
        re.M).groups()
    errors = int(failed) + sum(int(n) for n in re.findall(
        r'(?:connect|read|write|timeout) (\d+)', out))
    pairs = int(deletes)
    dep.delete_all_arqs()
    row = bench_arqs.Row('POST+DELETE pairs', 'wrk', pairs,
                         int(micros) / 1e6, [], errors, cpu)
    return row, float(p50), float(p99)


def fresh_api(dep, name):
    """The deployment's API again, as one fresh gunicorn worker."""
    port = bench_http.free_port()
    server = bench_http.Server(
        [sys.executable, '-m', 'gunicorn', '--workers', '1',
         '--worker-class', 'sync', '--bind', '127.0.0.1:%d' % port,
         '--log-level', 'warning', 'cyborg.wsgi.api:application'],
        port, str(dep.directory / ('%s.log' % name)),
        dict(os.environ, PYTHONPATH=ROOT,
             CYBORG_CONFIG_FILES=str(dep.directory / 'api.conf')))
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def patch_once(dep, port, target):
    """One instance: POST, PATCH (timed), the event, DELETE; the PATCH's
    seconds."""
    arq, error = bench_arqs.create_one(port)
    if error:
        raise RuntimeError('create: %s' % error)
    instance = str(uuid.uuid4())
    waiter = dep.nova.expect(instance)
    try:
        start = time.perf_counter()
        status, body = bench_arqs.call(
            port, 'PATCH', bench_arqs.ARQS,
            bench_arqs.bind_body(arq, target, instance))
        elapsed = time.perf_counter() - start
        if status != 202:
            raise RuntimeError('bind: %s' % bench_arqs.describe(status, body))
        if not waiter.wait(bench_arqs.EVENT_TIMEOUT):
            raise RuntimeError('no event for instance %s' % instance)
    finally:
        dep.nova.forget(instance)
        bench_arqs.call(port, 'DELETE', '%s?instance=%s'
                        % (bench_arqs.ARQS, instance))
    return elapsed


def first_binds(dep, args, report):
    """Part 3; returns the idle RSS (MiB) of the last fresh worker."""
    print('--- first-bind: %d fresh one-worker APIs, %d binds each'
          % (args.starts, args.binds), flush=True)
    firsts, laters, idle, grown = [], [], [], []
    target = dep.targets[0]
    for start in range(args.starts):
        server = fresh_api(dep, 'fresh-api-%d' % start)
        try:
            worker, = workers_of(server)
            time.sleep(0.5)
            idle.append(worker.memory_info().rss / MIB)
            if 'first-bind' not in args.only:
                continue
            got = [patch_once(dep, server.port, target)
                   for _ in range(args.binds)]
            grown.append(worker.memory_info().rss / MIB - idle[-1])
        finally:
            server.stop()
        firsts.append(got[0] * 1e3)
        laters.append(statistics.median(got[1:]) * 1e3)
        print('  start %d: idle worker %.1f MiB; first PATCH %.1f ms, later '
              'median %.1f ms; the worker grew %.1f MiB'
              % (start + 1, idle[-1], firsts[-1], laters[-1], grown[-1]),
              flush=True)
    if firsts:
        first, later = statistics.median(firsts), statistics.median(laters)
        report.add('first-bind', 'first PATCH ms (median)', '%.1f' % first,
                   '<= later + %d' % FIRST_BIND_SLACK_MS,
                   first <= later + FIRST_BIND_SLACK_MS)
        report.add('first-bind', 'later PATCH ms (median)', '%.1f' % later)
        report.add('first-bind', 'worker growth over binds, MiB',
                   '%.1f' % statistics.median(grown))
    dep.delete_all_arqs()
    return statistics.median(idle)


def agent_rss(dep):
    """The RSS (MiB) of a cyborg-agent of the fake driver, once started
    and idle, on the deployment's virtual host."""
    conf = dep.directory / 'agent.conf'
    log = dep.directory / 'agent.log'
    text = (dep.directory / 'api.conf').read_text()
    text = text.replace('host = bench-conductor', 'host = bench-agent')
    text = text.replace(str(dep.directory / 'api.log'), str(log))
    conf.write_text(text + '\n[agent]\nenabled_drivers = fake_driver\n')
    command = shutil.which('cyborg-agent',
                           path=os.path.dirname(sys.executable))
    command = [command] if command else [
        sys.executable, '-c', 'from cyborg.cmd import agent; agent.main()']
    agent = bench_http.Server(command + ['--config-file', str(conf)], None,
                              str(dep.directory / 'agent.out'),
                              dict(os.environ, PYTHONPATH=ROOT))
    try:
        bench_arqs.Deployment._wait_for_log(log, 'cyborg-agent started',
                                            agent)
        # Its first report and the Placement lookups are done by then.
        time.sleep(3)
        return rss_mib(agent.proc.pid)
    finally:
        agent.stop()


# --- the run -----------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])

    def numbers(text):
        return [int(n) for n in text.split(',') if n]

    parser.add_argument('--profiles', type=int, default=20)
    parser.add_argument('--seconds', type=int, default=5,
                        help='seconds of each measured run')
    parser.add_argument('--rounds', type=int, default=3,
                        help='runs of each app at each number of '
                             'connections (the best counts)')
    parser.add_argument('--connections', type=numbers, default=[1, 4])
    parser.add_argument('--pair-threads', type=numbers, default=[1, 4])
    parser.add_argument('--binds', type=int, default=8,
                        help='binds of each fresh API worker')
    parser.add_argument('--starts', type=int, default=3,
                        help='fresh API workers whose first bind is timed')
    parser.add_argument('--generator', default='auto',
                        choices=('auto', 'wrk', 'python'))
    parser.add_argument('--only', default=','.join(PARTS),
                        help='a comma list of %s' % ', '.join(PARTS))
    parser.add_argument('--profile', type=int, default=0, metavar='N',
                        help='also cProfile N in-process GETs of dp')
    parser.add_argument('--max-runtime', type=int, default=600,
                        help='give up after this many seconds')
    args = parser.parse_args(argv)
    args.only = [p for p in args.only.split(',') if p]
    if not set(args.only) <= set(PARTS):
        parser.error('--only takes %s' % ', '.join(PARTS))
    if args.generator == 'auto':
        args.generator = 'wrk' if shutil.which('wrk') else 'python'
    if args.binds < 2:
        parser.error('--binds needs at least 2 (a first and a later one)')
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    print('%d cores, load average %.1f; generator %s; parts %s; at most '
          '%d s' % (os.cpu_count(), os.getloadavg()[0], args.generator,
                    ', '.join(args.only), args.max_runtime), flush=True)
    report = Report()
    cleanup = []
    try:
        with bench_http.deadline(args.max_runtime):
            if 'dp' in args.only:
                bench_dp(args, report, cleanup)
                cleaning(cleanup)
            if set(args.only) - {'dp'}:
                bench_arq_parts(args, report, cleanup)
            report.print()
    except Deadline as e:
        print('stopped: %s' % e, file=sys.stderr)
        report.print()
        return 2
    finally:
        cleaning(cleanup)
    return 0


if __name__ == '__main__':
    sys.exit(main())
