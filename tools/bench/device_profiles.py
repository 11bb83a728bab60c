"""Benchmark GET /v2/device_profiles over real HTTP.

    python tools/bench/device_profiles.py [--db sqlite|mysql|sqlite,mysql]
        [--profiles N] [--seconds S] [--connections 1,4]
        [--server gunicorn|gthread|cheroot] [--generator auto|wrk|python]

For each database: a fresh database is migrated, a noauth configuration is
written, N device profiles are created through the API, the API is served
(gunicorn with sync workers by default, or ``cyborg-api`` on cheroot) and
GET /v2/device_profiles is driven with each number of connections for S
seconds. A bare pecan app returning static JSON is measured the same way,
as the ceiling of the framework on this machine.

gunicorn's sync workers close the connection after every response, so with
``--server gunicorn`` each request opens a new TCP connection whatever the
client asks for; ``gthread`` and ``cheroot`` keep connections alive.

``wrk`` (one thread, in C) is the load generator when installed; otherwise
one Python process per connection, which competes with the server for the
same cores and so reads low. The output says which one ran.

``--profile N`` also profiles N in-process requests (cProfile) and prints
where the time goes.
"""

import argparse
import collections
import contextlib
import http.client
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

PATH = '/v2/device_profiles'
MYSQL_SERVER = os.environ.get(
    'CYBORG_BENCH_MYSQL',
    os.environ.get('CYBORG_TEST_MYSQL', 'mysql+pymysql://root@127.0.0.1:3306'))
HERE = os.path.dirname(os.path.abspath(__file__))

# What the bare app answers: one profile, about the size of a real one.
STATIC_DOCUMENT = {'device_profiles': [{
    'uuid': '2f8b6a9c-3d4e-4f50-8a61-7b2c9d0e1f23',
    'name': 'static',
    'description': None,
    'groups': [{'resources:FPGA': '1', 'trait:CUSTOM_FPGA_X': 'required'}],
    'created_at': '2026-01-01T00:00:00+00:00',
    'updated_at': None,
    'links': [{'href': 'http://127.0.0.1/v2/device_profiles/'
                       '2f8b6a9c-3d4e-4f50-8a61-7b2c9d0e1f23',
               'rel': 'self'}],
}]}

Result = collections.namedtuple(
    'Result', 'app db server generator connections rps p50 p90 p99 errors '
              'requests')


class Deadline(BaseException):
    # Not an Exception: the app's error handling must not swallow it.
    pass


# --- the calibration app ----------------------------------------------------

def bare_pecan_app(document):
    """A pecan app that answers GET /v2/device_profiles with ``document``,
    rendered by pecan's own JSON renderer on every request."""
    import pecan

    class V2:
        @pecan.expose('json')
        def device_profiles(self):
            return document

    class Root:
        v2 = V2()

    return pecan.Pecan(Root())


def make_bare_app():
    """A pecan app that answers GET /v2/device_profiles with static JSON."""
    return bare_pecan_app(STATIC_DOCUMENT)


# --- databases and configuration --------------------------------------------

def create_database(kind, directory):
    import sqlalchemy as sa
    if kind == 'sqlite':
        return 'sqlite:///%s/cyborg.sqlite' % directory
    name = 'cyborg_bench_%s' % uuid.uuid4().hex[:12]
    admin = sa.create_engine(MYSQL_SERVER + '/')
    with admin.connect() as conn:
        conn.execute(sa.text('CREATE DATABASE %s CHARACTER SET utf8mb4'
                             % name))
    admin.dispose()
    return '%s/%s?charset=utf8mb4' % (MYSQL_SERVER, name)


def drop_database(url):
    import sqlalchemy as sa
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != 'mysql':
        return  # the SQLite file goes with the temporary directory
    admin = sa.create_engine(MYSQL_SERVER + '/')
    with admin.connect() as conn:
        conn.execute(sa.text('DROP DATABASE IF EXISTS %s' % parsed.database))
    admin.dispose()


def write_config(directory, url, port):
    path = os.path.join(directory, 'cyborg.conf')
    with open(path, 'w') as f:
        f.write('[DEFAULT]\n'
                'auth_strategy = noauth\n'
                'log_file = %s\n'
                '[api]\n'
                'host_ip = 127.0.0.1\n'
                'port = %d\n'
                '[database]\n'
                'connection = %s\n'
                % (os.path.join(directory, 'cyborg.log'), port, url))
    return path


# --- servers ----------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Server:
    """A server process group on 127.0.0.1:port, stopped by ``stop()``."""

    def __init__(self, argv, port, log_path, env=None):
        self.port = port
        self.log_path = log_path
        # The child keeps its own copy of the log's descriptor.
        with open(log_path, 'ab') as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                status, _ = request(self.port, 'GET', PATH, timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError('server did not answer on port %d; its log:\n%s'
                           % (self.port, self.log_tail()))

    def log_tail(self, lines=30):
        with open(self.log_path, errors='replace') as f:
            return ''.join(f.readlines()[-lines:])

    def stop(self):
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def start_server(kind, app, workers, directory, config_path=None,
                 bare_app='device_profiles:make_bare_app()', env=None):
    """Serve ``app`` ('cyborg' or 'bare') with ``kind`` of server.

    ``bare_app`` is gunicorn's name of the bare app (a module of this
    folder); ``env`` adds to the server's environment.
    """
    port = free_port()
    env = dict(os.environ, **(env or {}))
    if config_path:
        env['CYBORG_CONFIG_FILES'] = config_path
    log_path = os.path.join(directory, '%s-%s.log' % (app, kind))
    py = sys.executable
    if kind == 'cheroot':
        if app == 'cyborg':
            rewrite_port(config_path, port)
            argv = [py, '-c', 'from cyborg.cmd import api; api.main()',
                    '--config-file', config_path]
        else:
            argv = [py, os.path.abspath(__file__), '--serve-bare', str(port)]
    else:
        argv = [py, '-m', 'gunicorn', '--workers', str(workers),
                '--bind', '127.0.0.1:%d' % port, '--log-level', 'warning']
        if kind == 'gthread':
            # One thread per worker: the sync model, with keep-alive.
            argv += ['--worker-class', 'gthread', '--threads', '1',
                     '--keep-alive', '30']
        else:
            argv += ['--worker-class', 'sync']
        if app == 'cyborg':
            argv.append('cyborg.wsgi.api:application')
        else:
            argv += ['--pythonpath', HERE, bare_app]
    server = Server(argv, port, log_path, env)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def rewrite_port(config_path, port):
    with open(config_path) as f:
        text = f.read()
    with open(config_path, 'w') as f:
        f.write(re.sub(r'(?m)^port = \d+$', 'port = %d' % port, text))


def serve_bare_cheroot(port):
    from cheroot import wsgi
    server = wsgi.Server(('127.0.0.1', port), make_bare_app(), numthreads=16)
    signal.signal(signal.SIGTERM, lambda *a: server.stop())
    try:
        server.safe_start()
    finally:
        server.stop()


# --- HTTP helpers -----------------------------------------------------------

def request(port, method, path, body=None, timeout=10):
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    try:
        headers = {'Content-Type': 'application/json'} if body else {}
        conn.request(method, path,
                     body=json.dumps(body) if body is not None else None,
                     headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def create_profiles(port, count):
    for i in range(count):
        profile = {
            'name': 'bench-%03d' % i,
            'description': 'benchmark profile %d' % i,
            'groups': [{'resources:FPGA': '1',
                        'trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10': 'required',
                        'accel:bitstream_id': str(uuid.uuid4())}],
        }
        status, body = request(port, 'POST', PATH, [profile])
        if status != 201:
            raise RuntimeError('creating a profile: %d %s' % (status, body))
    status, body = request(port, 'GET', PATH)
    found = len(json.loads(body)['device_profiles'])
    if status != 200 or found != count:
        raise RuntimeError('GET %s gave %d with %d profiles, not %d'
                           % (PATH, status, found, count))
    return len(body)


# --- load generators --------------------------------------------------------

_WRK_UNITS = {'us': 1e-3, 'ms': 1.0, 's': 1e3}


def _wrk_ms(text):
    match = re.match(r'([\d.]+)(us|ms|s)$', text)
    return float(match.group(1)) * _WRK_UNITS[match.group(2)]


def run_wrk(port, connections, seconds):
    # One thread: enough for a few connections, and it leaves the cores
    # to the server.
    argv = ['wrk', '-t1', '-c%d' % connections, '-d%ds' % seconds,
            '--latency', '--timeout', '5s',
            'http://127.0.0.1:%d%s' % (port, PATH)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         timeout=seconds + 30).stdout
    latency = dict(re.findall(r'^\s+(50|90|99)%\s+(\S+)$', out, re.M))
    errors = sum(int(n) for n in re.findall(
        r'(?:connect|read|write|timeout) (\d+)', out))
    non_2xx = re.search(r'Non-2xx or 3xx responses: (\d+)', out)
    errors += int(non_2xx.group(1)) if non_2xx else 0
    return {
        'rps': float(re.search(r'Requests/sec:\s+([\d.]+)', out).group(1)),
        'p50': _wrk_ms(latency['50']), 'p90': _wrk_ms(latency['90']),
        'p99': _wrk_ms(latency['99']), 'errors': errors,
        'requests': int(re.search(r'(\d+) requests in', out).group(1)),
    }


def _python_client(port, seconds, pipe):
    """One keep-alive connection, reopened whenever the server closes it."""
    latencies, errors = [], 0
    conn = None
    end = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        if start >= end:
            break
        try:
            if conn is None:
                conn = http.client.HTTPConnection('127.0.0.1', port,
                                                  timeout=5)
            conn.request('GET', PATH)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                errors += 1
            if resp.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            errors += 1
            if conn is not None:
                conn.close()
            conn = None
            continue
        latencies.append(time.perf_counter() - start)
    pipe.send((latencies, errors))
    pipe.close()


def run_python(port, connections, seconds):
    ctx = multiprocessing.get_context('fork')
    procs = []
    for _ in range(connections):
        ours, theirs = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_python_client,
                           args=(port, seconds, theirs))
        proc.start()
        procs.append((proc, ours))
    latencies, errors = [], 0
    try:
        for _proc, pipe in procs:
            if not pipe.poll(seconds + 30):
                raise RuntimeError('a client process did not report')
            got, errs = pipe.recv()
            latencies += got
            errors += errs
    finally:
        for proc, _ in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
    latencies.sort()

    def pct(p):
        if not latencies:
            return float('nan')
        return latencies[min(len(latencies) - 1,
                             int(p / 100.0 * len(latencies)))] * 1e3

    return {'rps': len(latencies) / seconds, 'p50': pct(50), 'p90': pct(90),
            'p99': pct(99), 'errors': errors, 'requests': len(latencies)}


# --- in-process measurements ------------------------------------------------

@contextlib.contextmanager
def in_process_app(config_path):
    """The API built in this process from the config file, with its DB."""
    from cyborg import conf as cyborg_conf
    from cyborg.api import app as api_app
    from cyborg.db import session
    conf = cyborg_conf.load(default_config_files=[config_path])
    db = session.Database(conf)
    try:
        yield api_app.build_app(conf, db), db
    finally:
        db.dispose()


def in_process_figures(config_path, profile_requests=0):
    """SQL statements and app time per GET, without any HTTP server.

    Returns (statements, ms per request) and prints a profile when asked.
    """
    import sqlalchemy as sa
    import webtest
    with in_process_app(config_path) as (app, db):
        client = webtest.TestApp(app)
        client.get(PATH)  # warm caches, pools and compiled statements
        statements = []

        def seen(*args):
            statements.append(args[2])

        for engine in db.engines:
            sa.event.listen(engine, 'before_cursor_execute', seen)
        client.get(PATH)
        for engine in db.engines:
            sa.event.remove(engine, 'before_cursor_execute', seen)
        count = 200
        start = time.perf_counter()
        for _ in range(count):
            client.get(PATH)
        ms = (time.perf_counter() - start) / count * 1e3
        if profile_requests:
            profile(client, profile_requests)
    return len(statements), ms


def profile(client, count):
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(count):
        client.get(PATH)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs()
    print('\n--- cProfile of %d in-process GET %s (times are totals) ---'
          % (count, PATH))
    stats.sort_stats('cumulative').print_stats(45)
    stats.sort_stats('tottime').print_stats(30)


# --- the run ----------------------------------------------------------------

def measure(app, db_kind, server_kind, generator, port, args):
    run = run_wrk if generator == 'wrk' else run_python
    run(port, max(args.connections), args.warmup)
    results = []
    for connections in args.connections:
        figures = run(port, connections, args.seconds)
        result = Result(app, db_kind, server_kind, generator, connections,
                        **figures)
        print('  %-6s %-7s %2d conn: %8.1f req/s  p50 %6.2f  p90 %6.2f  '
              'p99 %6.2f ms  errors %d'
              % (app, db_kind, connections, result.rps, result.p50,
                 result.p90, result.p99, result.errors), flush=True)
        results.append(result)
    return results


def bench_cyborg(db_kind, generator, args, cleanup):
    directory = tempfile.mkdtemp(prefix='cyborg-bench-')
    cleanup.append(lambda: shutil.rmtree(directory, ignore_errors=True))
    url = create_database(db_kind, directory)
    cleanup.append(lambda: drop_database(url))
    from cyborg.db import migration
    migration.upgrade(url)
    config_path = write_config(directory, url, 0)
    server = start_server(args.server, 'cyborg', args.workers, directory,
                          config_path)
    cleanup.append(server.stop)
    size = create_profiles(server.port, args.profiles)
    statements, ms = in_process_figures(config_path, args.profile)
    print('cyborg on %s: %d profiles, response %d bytes, %d SQL '
          'statement(s) per GET, %.2f ms per GET in-process (webtest, no '
          'server)' % (db_kind, args.profiles, size, statements, ms),
          flush=True)
    results = measure('cyborg', db_kind, args.server, generator,
                      server.port, args)
    server.stop()
    return results, statements, ms


def bench_bare(generator, args, cleanup):
    directory = tempfile.mkdtemp(prefix='cyborg-bench-bare-')
    cleanup.append(lambda: shutil.rmtree(directory, ignore_errors=True))
    server = start_server(args.server, 'bare', args.workers, directory)
    cleanup.append(server.stop)
    print('bare pecan app (static JSON):', flush=True)
    results = measure('bare', '-', args.server, generator, server.port, args)
    server.stop()
    return results


def print_summary(results, extras, generator, args):
    server = (args.server if args.server == 'cheroot'
              else '%s, %d workers' % (args.server, args.workers))
    print('\n=== GET %s, %s, generator %s, %ds per run ==='
          % (PATH, server, generator, args.seconds))
    header = ('app', 'db', 'conns', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms',
              'errors')
    print('%-7s %-7s %5s %9s %8s %8s %8s %7s' % header)
    for r in results:
        print('%-7s %-7s %5d %9.1f %8.2f %8.2f %8.2f %7d'
              % (r.app, r.db, r.connections, r.rps, r.p50, r.p90, r.p99,
                 r.errors))
    for db_kind, (statements, ms) in extras.items():
        print('%s: %d SQL statement(s) per request; %.2f ms per request '
              'in-process' % (db_kind, statements, ms))
    print('Aim at 1 / 4 connections: >= 1,000 / >= 2,000 req/s '
          '(upstream ~235 / ~520).')
    if args.server == 'gunicorn':
        print('gunicorn sync workers close every connection: each request '
              'is a new TCP connection.')
    if generator == 'python':
        print('Python clients share the cores with the server: figures '
              'read low.')


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--db', default='sqlite',
                        help='sqlite, mysql or both, comma separated')
    parser.add_argument('--profiles', type=int, default=20)
    parser.add_argument('--seconds', type=int, default=10)
    parser.add_argument('--connections', default='1,4')
    parser.add_argument('--warmup', type=int, default=3,
                        help='seconds of load before measuring')
    parser.add_argument('--server', default='gunicorn',
                        choices=('gunicorn', 'gthread', 'cheroot'))
    parser.add_argument('--workers', type=int, default=2,
                        help='gunicorn worker processes')
    parser.add_argument('--generator', default='auto',
                        choices=('auto', 'wrk', 'python'))
    parser.add_argument('--no-bare', action='store_true',
                        help='skip the bare pecan calibration run')
    parser.add_argument('--profile', type=int, default=0, metavar='N',
                        help='also cProfile N in-process requests')
    parser.add_argument('--max-runtime', type=int, default=0,
                        help='give up after this many seconds (default: '
                             'from the other options)')
    parser.add_argument('--serve-bare', type=int, metavar='PORT',
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.dbs = [d for d in args.db.split(',') if d]
    if not set(args.dbs) <= {'sqlite', 'mysql'}:
        parser.error('--db takes sqlite and/or mysql')
    args.connections = [int(c) for c in args.connections.split(',') if c]
    return args


def _raise_deadline(signum, frame):
    raise Deadline('the benchmark ran past --max-runtime')


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def deadline(seconds):
    """Inside the block, Deadline after ``seconds`` and SystemExit on
    SIGTERM (so that cleanups run); after it, SIGTERM is ignored while
    the caller cleans up."""
    signal.signal(signal.SIGALRM, _raise_deadline)
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.serve_bare:
        serve_bare_cheroot(args.serve_bare)
        return 0
    generator = args.generator
    if generator == 'auto':
        generator = 'wrk' if shutil.which('wrk') else 'python'
    runs = len(args.dbs) + (0 if args.no_bare else 1)
    budget = args.max_runtime or runs * (
        90 + len(args.connections) * (args.seconds + 15) + args.warmup)
    print('load generator: %s; server: %s; at most %d s'
          % ('wrk -t1 (C)' if generator == 'wrk'
             else 'Python http.client, one process per connection',
             args.server, budget), flush=True)
    cleanup = []
    results, extras = [], {}
    try:
        with deadline(budget):
            for db_kind in args.dbs:
                got, statements, ms = bench_cyborg(db_kind, generator, args,
                                                   cleanup)
                results += got
                extras[db_kind] = (statements, ms)
            if not args.no_bare:
                results += bench_bare(generator, args, cleanup)
            print_summary(results, extras, generator, args)
    except Deadline as e:
        print('stopped: %s' % e, file=sys.stderr)
        return 2
    finally:
        for step in reversed(cleanup):
            try:
                step()
            except Exception as e:  # keep cleaning up the rest
                print('cleanup: %s' % e, file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
