"""The services that bind accelerator requests, each a real process.

Builds on the ``deployment`` fixture of ``conftest.py`` (its database,
RabbitMQ virtual host, Placement and host name) and adds what binding
needs: several ``cyborg-conductor`` processes that share the virtual
host (so they share the ``cyborg-conductor`` queue and RabbitMQ spreads
the casts over them), and the REST API served by gunicorn with several
worker processes.

These processes reach RabbitMQ and the database directly rather than
through the deployment's ``TCPGate``s: a gate pumps every byte through
threads of the test process, which would then compete for the CPU with
the test's own clients under load. Nothing here closes a gate.
"""

import os
import re
import signal
import subprocess
import time

import requests
import sqlalchemy as sa

from tests.functional.services.conftest import RABBIT
from tests.functional.services.conftest import REPORT_INTERVAL
from tests.functional.services.conftest import ServiceProcess
from tests.functional.services.conftest import console_script

# A policy file left on the machine must not change what the API allows.
NO_POLICY_FILE = '/nonexistent/cyborg-policy.yaml'


def common_config(deployment, log_file, host, default=(), placement=None,
                  placement_timeout=10):
    """[DEFAULT], [database] and [placement] of a service of
    ``deployment``, with direct connections to RabbitMQ and the
    database. ``default`` are more ``[DEFAULT]`` lines; ``placement`` is
    another Placement endpoint (a gate's)."""
    endpoint = placement or deployment.placement.serve()
    return '\n'.join([
        '[DEFAULT]',
        'host = %s' % host,
        'transport_url = rabbit://guest:guest@%s:%d/%s'
        % (RABBIT[0], RABBIT[1], deployment.vhost),
        'rpc_response_timeout = 10',
        'auth_strategy = noauth',
        'debug = false',
        'log_file = %s' % log_file,
        *default,
        '[oslo_policy]',
        'policy_file = %s' % NO_POLICY_FILE,
        '[database]',
        'connection = %s' % deployment.db_url,
        '[placement]',
        'auth_type = admin_token',
        'endpoint = %s' % endpoint,
        'token = admin',
        'endpoint_override = %s' % endpoint,
        'timeout = %d' % placement_timeout,
        '',
    ])


def agent(deployment):
    """The host's ``cyborg-agent`` with only the fake driver: one FPGA,
    deployable ``FakeDevice`` of 16 ``TEST_PCI`` attach handles."""
    directory = deployment.directory / 'agent'
    directory.mkdir()
    config = common_config(deployment, directory / 'cyborg-agent.log',
                           deployment.host) + '\n'.join([
        '[agent]',
        'enabled_drivers = fake_driver',
        'report_interval = %d' % REPORT_INTERVAL,
        'report_timeout = 10',
        'retry_interval = 1',
        '',
    ])
    return ServiceProcess('cyborg-agent', directory, config)


def conductor(deployment, host, nova_section, recovery_interval=1):
    """A ``cyborg-conductor`` named ``host`` (the owner of its binds),
    telling the Nova of ``nova_section`` (a ``[nova]`` section)."""
    directory = deployment.directory / host
    directory.mkdir()
    config = common_config(deployment, directory / 'cyborg-conductor.log',
                           host) + '\n'.join([
        '[conductor]',
        'retry_interval = 1',
        'recovery_interval = %d' % recovery_interval,
        '[scrub]',
        'interval = 1',
        '',
    ]) + nova_section
    return ServiceProcess('cyborg-conductor', directory, config)


# JSON in and out, as every client of the API sends it.
JSON = {'Content-Type': 'application/json', 'Accept': 'application/json'}


class ProcessRig:
    """One test's service processes, its API session and its database.

    ``add`` the processes as they start; ``close`` stops the API and kills
    every process. ``request`` asserts the status it expects and returns
    the answer.
    """

    def __init__(self, deployment):
        self.deployment = deployment
        self.engine = deployment.db_engine
        self.processes = []
        self.api = None
        self.session = requests.Session()
        self.session.headers.update(JSON)

    def add(self, process):
        self.processes.append(process)
        return process

    def close(self):
        if self.api is not None:
            self.api.stop()
        for process in self.processes:
            process.kill()
        self.session.close()

    def request(self, method, path, expected, **kwargs):
        kwargs.setdefault('timeout', 60)
        answer = self.session.request(method, self.api.url + path, **kwargs)
        assert answer.status_code == expected, (
            '%s %s: %d %s' % (method, path, answer.status_code, answer.text))
        return answer


class APIServer:
    """``gunicorn -w <workers> cyborg.wsgi.api:application`` on a free
    port of 127.0.0.1; its configuration file is passed as the WSGI
    module reads it, in ``CYBORG_CONFIG_FILES``."""

    name = 'gunicorn'

    def __init__(self, deployment, workers=2, access_log=False):
        self.directory = deployment.directory / 'api'
        self.directory.mkdir()
        self.workers = workers
        # Each request's line and its duration in microseconds.
        self.access_log = (self.directory / 'access.log' if access_log
                           else None)
        self.config_file = self.directory / 'cyborg-api.conf'
        self.log_file = self.directory / 'cyborg-api.log'
        self.output_file = self.directory / 'gunicorn.out'
        self.config_file.write_text(common_config(
            deployment, self.log_file, 'cyborg-api'))
        self.process = None
        self.url = None

    def start(self, timeout=30):
        env = dict(os.environ, CYBORG_CONFIG_FILES=str(self.config_file))
        with open(self.output_file, 'ab') as output:
            self.process = subprocess.Popen(
                [console_script('gunicorn'), '--workers', str(self.workers),
                 # Port 0: the kernel picks a free port, and gunicorn
                 # says which.
                 '--bind', '127.0.0.1:0', '--log-level', 'info',
                 *(('--access-logfile', str(self.access_log),
                    '--access-logformat', '"%(r)s" %(s)s %(D)s')
                   if self.access_log else ()),
                 'cyborg.wsgi.api:application'],
                stdout=output, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while True:
            text = self.output()
            if self.url is None:
                found = re.search(r'Listening at: (http://127\.0\.0\.1:\d+)',
                                  text)
                if found:
                    self.url = found.group(1)
            if (self.url is not None and len(re.findall(
                    r'Booting worker with pid', text)) >= self.workers
                    and self._answers()):
                return self
            assert self.process.poll() is None, (
                'gunicorn exited (%s):\n%s' % (self.process.returncode,
                                               self.tail()))
            assert time.monotonic() < deadline, (
                'the API did not answer within %s s:\n%s'
                % (timeout, self.tail()))
            time.sleep(0.2)

    def _answers(self):
        try:
            return requests.get(self.url + '/v2', timeout=5).status_code == 200
        except requests.RequestException:
            return False

    @property
    def alive(self):
        return self.process is not None and self.process.poll() is None

    def output(self):
        return self.output_file.read_text(errors='replace')

    def log(self):
        if not self.log_file.exists():
            return ''
        return self.log_file.read_text(errors='replace')

    def tail(self, lines=40):
        text = self.log() + self.output()
        return '\n'.join(text.splitlines()[-lines:])

    def stop(self, timeout=15):
        if not self.alive:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def count_by(engine, column, *where):
    """``{value of column: row count}`` for the rows matching ``where``."""
    table = column.table
    query = sa.select(column, sa.func.count()).select_from(table)
    if where:
        query = query.where(*where)
    with engine.connect() as connection:
        return dict(connection.execute(query.group_by(column)).all())
