"""Agent and conductor as separate processes over the real RabbitMQ.

Each test gets its own Placement (served on 127.0.0.1), its own database
on MariaDB or PostgreSQL, its own RabbitMQ virtual host and its own host
name. A virtual host, not just a ``control_exchange``: oslo.messaging
names a server's queue after its topic alone, so conductors of two
exchanges on one virtual host share the ``cyborg-conductor`` queue and
take each other's messages. The services reach RabbitMQ, the
database and Placement through ``TCPGate``s, which a test may close to
stand for a neighbour that is down.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg.clients import placement as placement_client
from cyborg.db import models
from tests import db_servers
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.placement_service import placement_url  # noqa: F401
from tests.tcp_gate import TCPGate
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

RABBIT = ('127.0.0.1', 5672)
DB_PORTS = {'mysql': 3306, 'postgresql': 5432}
# The NVMe drives that pci_driver offers ([pci] device_spec); the boot
# drive of the recorded chipset (a80a) stays out.
NVME_SPEC = {'vendor_id': '144d', 'product_id': 'a808'}
# A report every 2 s and retries every second keep the tests short.
REPORT_INTERVAL = 2


def nvme_drive(bus):
    port = hosts.root_port('0000:%02x:00.0' % (bus - 1))
    drive = hosts.card('0000:%02x:00.0' % bus, '144d', 'a808', '010802',
                       port.bdf, driver='nvme')
    return [port, drive]


def nvme_deployable(bus):
    return 'pci_0000:%02x:00.0' % bus


class RecordedHost:
    """A recorded sysfs tree whose devices a test can change at run time.

    ``[pci] sysfs_root`` points at a symlink; each change writes a new
    tree and swaps the link, so the agent never reads a half-written one.
    """

    def __init__(self, directory):
        self.directory = directory
        self.root = directory / 'current'
        self.buses = []
        self._version = 0
        self._write()

    def add_nvme(self, bus):
        self.buses.append(bus)
        self._write()

    def remove_nvme(self, bus):
        self.buses.remove(bus)
        self._write()

    def _write(self):
        self._version += 1
        functions = list(hosts.CHIPSET)
        for bus in self.buses:
            functions += nvme_drive(bus)
        tree = self.directory / ('tree-%d' % self._version)
        sysfs.build(str(tree), functions, pci_ids=hosts.PCI_IDS)
        link = self.directory / 'next'
        os.symlink(tree.name, link)
        os.replace(link, self.root)


def rabbitmqctl(*args):
    command = shutil.which('rabbitmqctl') or '/usr/sbin/rabbitmqctl'
    subprocess.run([command, '-q', *args], check=True, capture_output=True,
                   timeout=60)


@pytest.fixture
def vhost_url():
    """A RabbitMQ virtual host of the test's own, as a transport URL."""
    vhost = 'cyborg-test-%s' % uuid.uuid4().hex[:12]
    rabbitmqctl('add_vhost', vhost)
    rabbitmqctl('set_permissions', '-p', vhost, 'guest', '.*', '.*', '.*')
    yield 'rabbit://guest:guest@%s:%d/%s' % (RABBIT[0], RABBIT[1], vhost)
    rabbitmqctl('delete_vhost', vhost)


def console_script(name):
    path = shutil.which(name, path=os.path.dirname(sys.executable))
    assert path, '%s is not installed beside %s' % (name, sys.executable)
    return path


class ServiceProcess:
    """One service run from its console script with a config file."""

    def __init__(self, name, directory, config):
        self.name = name
        self.config_file = directory / ('%s.conf' % name)
        self.log_file = directory / ('%s.log' % name)
        self.output_file = directory / ('%s.out' % name)
        self.config_file.write_text(config)
        self.process = None
        self.own_group = False

    def start(self, prefix=(), env=None, own_group=False):
        """``prefix``: a command that runs the service (and execs it, so
        that the process is the service's). ``env``: its environment
        (this process's by default). ``own_group``: in a process group of
        its own, which ``kill`` sweeps whole (a service that forks)."""
        self.log_file.touch()
        self.own_group = own_group
        with open(self.output_file, 'ab') as output:
            self.process = subprocess.Popen(
                [*prefix, console_script(self.name), '--config-file',
                 str(self.config_file)],
                stdout=output, stderr=subprocess.STDOUT, env=env,
                start_new_session=own_group)
        return self

    @property
    def alive(self):
        return self.process is not None and self.process.poll() is None

    def log(self):
        return self.log_file.read_text(errors='replace')

    def log_size(self):
        return self.log_file.stat().st_size

    def wait_for_log(self, pattern, timeout=30, since=0):
        """The first match of ``pattern`` in the log after ``since``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.log()[since:])
            if found:
                return found
            assert self.alive, '%s exited (%s):\n%s' % (
                self.name, self.process.returncode, self.tail())
            assert time.monotonic() < deadline, (
                '%s did not log %r within %s s:\n%s'
                % (self.name, pattern, timeout, self.tail()))
            time.sleep(0.2)

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Signal the process; returns (exit status, seconds taken)."""
        started = time.monotonic()
        self.process.send_signal(sig)
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError('%s did not exit within %s s of %s:\n%s'
                                 % (self.name, timeout, sig, self.tail()))
        return status, time.monotonic() - started

    def kill(self):
        if self.own_group and self.process is not None:
            # Children it forked go too, even once the leader is gone.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self.alive:
            self.process.kill()
            self.process.wait()

    def tail(self, lines=40):
        text = self.log() + self.output_file.read_text(errors='replace')
        return '\n'.join(text.splitlines()[-lines:])


class Deployment:
    """Everything one test's services use, and the services themselves."""

    def __init__(self, directory, engine, db_url, placement_service):
        self.directory = directory
        self.engine_name = engine
        self.db_url = db_url
        self.placement = placement_service
        self.host = 'compute-%s' % uuid.uuid4().hex[:8]
        self.vhost = 'cyborg-test-%s' % uuid.uuid4().hex[:12]
        rabbitmqctl('add_vhost', self.vhost)
        rabbitmqctl('set_permissions', '-p', self.vhost, 'guest', '.*', '.*',
                    '.*')
        self.recorded = RecordedHost(directory / 'sysfs')
        # The compute node as Nova makes it, named after the short host
        # name, so that the agent must fall back from its configured name.
        self.compute_node_name = socket.gethostname().split('.')[0]
        direct = sa.engine.make_url(db_url)
        self.gates = {
            'rabbit': TCPGate(*RABBIT),
            'database': TCPGate(direct.host or '127.0.0.1',
                                direct.port or DB_PORTS[engine]),
            'placement': TCPGate('127.0.0.1', int(
                placement_service.serve().rsplit(':', 1)[1])),
        }
        self.db_engine = sa.create_engine(db_url)
        self.services = {}

    def gated_db_url(self):
        url = sa.engine.make_url(self.db_url)
        return url.set(host='127.0.0.1',
                       port=self.gates['database'].port).render_as_string(
                           hide_password=False)

    def config(self, name):
        endpoint = 'http://%s' % self.gates['placement'].address
        return '\n'.join([
            '[DEFAULT]',
            'host = %s' % self.host,
            'transport_url = rabbit://guest:guest@%s/%s'
            % (self.gates['rabbit'].address, self.vhost),
            'rpc_response_timeout = 10',
            'debug = false',
            'log_file = %s' % (self.directory / ('%s.log' % name)),
            '[oslo_messaging_rabbit]',
            # Reconnect within seconds once RabbitMQ is back.
            'rabbit_retry_interval = 1',
            'rabbit_retry_backoff = 1',
            'rabbit_interval_max = 2',
            'kombu_reconnect_delay = 0.5',
            '[database]',
            'connection = %s' % self.gated_db_url(),
            'retry_interval = 1',
            'max_retries = 1',
            '[placement]',
            'auth_type = admin_token',
            'endpoint = %s' % endpoint,
            'token = admin',
            'endpoint_override = %s' % endpoint,
            'timeout = 10',
            '[agent]',
            'enabled_drivers = fake_driver,pci_driver',
            'report_interval = %d' % REPORT_INTERVAL,
            'report_timeout = 10',
            'retry_interval = 1',
            '[conductor]',
            'retry_interval = 1',
            '[pci]',
            'sysfs_root = %s' % self.recorded.root,
            'device_spec = %s' % json.dumps(NVME_SPEC),
            '',
        ])

    def service(self, name):
        if name not in self.services:
            self.services[name] = ServiceProcess(name, self.directory,
                                                 self.config(name))
        return self.services[name]

    # -- what the services wrote, read directly (not through the gates)

    def db_deployables(self):
        """{deployable name: (device uuid, rp_uuid)} of this host."""
        devices = models.Device.__table__
        deployables = models.Deployable.__table__
        query = sa.select(deployables.c.name, devices.c.uuid,
                          deployables.c.rp_uuid).join(
            devices, deployables.c.device_id == devices.c.id).where(
            devices.c.hostname == self.host)
        with self.db_engine.connect() as connection:
            return {name: (device, rp) for name, device, rp
                    in connection.execute(query)}

    def db_traits(self):
        """{deployable name: set of traits} the DB holds for this host."""
        devices = models.Device.__table__
        deployables = models.Deployable.__table__
        query = sa.select(deployables.c.name, deployables.c.traits).join(
            devices, deployables.c.device_id == devices.c.id).where(
            devices.c.hostname == self.host)
        with self.db_engine.connect() as connection:
            return {name: set(traits or ()) for name, traits
                    in connection.execute(query)}

    def db_snapshot(self):
        """Every row of every table but ``services`` (heartbeats write it
        all the time), timestamps included: equal snapshots mean that
        nothing else was inserted, updated or deleted in between."""
        with self.db_engine.connect() as connection:
            return {table.name: sorted(
                tuple(str(v) for v in row)
                for row in connection.execute(sa.select(table)))
                for table in models.Base.metadata.sorted_tables
                if table.name != 'services'}

    def providers(self):
        """{RP name: (uuid, generation, inventories)} under the host."""
        client = self.placement.client()
        compute = client.find_provider_by_name(self.compute_node_name)
        for _ in range(10):
            try:
                return self._providers_in(client, compute['uuid'])
            except placement_client.NotFound:
                # The conductor deleted one since the listing (a device
                # that left): read the tree again.
                time.sleep(0.2)
        return self._providers_in(client, compute['uuid'])

    @staticmethod
    def _providers_in(client, compute_uuid):
        found = {}
        for rp in client.providers_in_tree(compute_uuid):
            if rp['uuid'] == compute_uuid:
                continue
            _generation, inventories = client.get_inventories(rp['uuid'])
            found[rp['name']] = (rp['uuid'], rp['generation'], {
                rc: inv['total'] for rc, inv in inventories.items()})
        return found

    def wait_until_converged(self, deployable_names, timeout=30):
        """Wait until the DB and Placement hold exactly these deployables,
        each DB row pointing at its RP; returns the providers."""
        wanted = {'%s_%s' % (self.host, name) for name in deployable_names}
        deadline = time.monotonic() + timeout
        while True:
            rows = self.db_deployables()
            providers = self.providers()
            if (set(rows) == set(deployable_names)
                    and set(providers) == wanted
                    and all(rows[n][1] == providers['%s_%s' % (
                        self.host, n)][0] for n in rows)):
                return providers
            for service in self.services.values():
                assert service.alive, '%s exited:\n%s' % (
                    service.name, service.tail())
            assert time.monotonic() < deadline, (
                'not converged within %s s: DB %s, Placement %s'
                % (timeout, sorted(rows), sorted(providers)))
            time.sleep(0.5)

    def wait_until_observed(self, timeout=30):
        """Wait until the agent's heartbeats have written the health of
        every device of the host."""
        devices = models.Device.__table__
        query = sa.select(sa.func.count()).where(
            devices.c.hostname == self.host,
            devices.c.health_updated_at.is_(None))
        deadline = time.monotonic() + timeout
        while True:
            with self.db_engine.connect() as connection:
                if not connection.execute(query).scalar():
                    return
            assert time.monotonic() < deadline, (
                'no health observed within %s s' % timeout)
            time.sleep(0.5)

    def close(self):
        for service in self.services.values():
            service.kill()
        for gate in self.gates.values():
            gate.close()
        self.db_engine.dispose()
        rabbitmqctl('delete_vhost', self.vhost)


def on_engine(name):
    """Mark a test of processes to run on ``name`` only. Its subject is
    the processes (kills, restarts, outages), not the SQL, which the
    in-process conductor tests run on every engine; such tests are
    spread over both server engines, to keep the suite's time down."""
    return pytest.mark.parametrize('deployment', [name], indirect=True)


@pytest.fixture(params=['mysql', 'postgresql'])
def deployment(request, tmp_path, placement):  # noqa: F811
    url = db_servers.create_database(request.param, tmp_path)
    from cyborg.db import migration
    migration.upgrade(url)
    deployment = Deployment(tmp_path, request.param, url, placement)
    create_compute_node(placement.adapter(), deployment.compute_node_name)
    yield deployment
    deployment.close()
    db_servers.drop_database(url)
