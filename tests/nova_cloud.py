"""A small cloud in which servers boot with accelerators: Nova, Placement,
Glance and this service, each service a process of its own.

- Placement: ``tools/tempest/placement_server.py`` (openstack-placement on
  SQLite, noauth2) in a process, not in the test process: other tests of
  the same worker run a Placement of their own there.
- Glance: the session's ``glance_service``; one 1 KiB raw image to boot.
- Neutron: ``tests.neutron_stub`` (servers have ``"networks": "none"``).
- Nova: ``tests.nova_service`` (API, conductor, scheduler, one compute
  host with the fake virt driver).
- This service: its API under gunicorn, one conductor that tells Nova's
  API about binds and publishes pooled providers, and the agent of the
  compute host, its host name Nova's, so that its providers nest under the
  compute node's. The agent runs the fake FPGA (16 accelerators) and the
  NVIDIA driver over a sysfs tree written by ``tests.unit.drivers.trees``
  (``GPU_FUNCTIONS``: four H100s for passthrough, one pool, and a T4 cut
  into vGPUs), whose mdevs it makes through a real privsep daemon. Own
  MariaDB database and RabbitMQ vhost.

``nova_cloud`` (session scope, for the tests that ask for it) starts all
of it once; ``stop()`` stops exactly what was started.
"""

import concurrent.futures
import logging
import pathlib
import shlex
import subprocess
import sys
import time
import uuid

import pytest
import requests

from cyborg import privsep
from cyborg.db import migration
from tests import db_servers
from tests import neutron_stub
from tests import nova_service
from tests import privsep_rig
from tests.functional.services import arq_services
from tests.functional.services.conftest import rabbitmqctl
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

LOG = logging.getLogger(__name__)

REPO = nova_service.REPO
PLACEMENT_SERVER = REPO / 'tools' / 'tempest' / 'placement_server.py'
PLACEMENT_HEADERS = {'X-Auth-Token': 'admin',
                     'OpenStack-API-Version': 'placement 1.39'}
CYBORG_HEADERS = {'Content-Type': 'application/json',
                  'Accept': 'application/json'}
START_TIMEOUT = 120
# Seconds the fake FPGA takes to load a bitstream: long enough that
# nova-compute really waits for the bind event.
PROGRAM_SECONDS = 3
IMAGE = b'\0' * 1024

# The compute host's GPUs: four H100s bound to vfio-pci for passthrough
# (with a function-level reset, which scrubs them between servers),
# identical and on one NUMA node, so one pooled provider of PGPU 4; and a
# T4 cut into vGPUs of VGPU_TYPE (VGPUS of them, none made yet).
H100S = ['0000:%02x:00.0' % bus for bus in (0x19, 0x2b, 0x3d, 0x4f)]
T4 = '0000:5e:00.0'
VGPU_TYPE = 'nvidia-222'
VGPUS = 4
GPU_FUNCTIONS = hosts.CHIPSET + [
    function for n, address in enumerate(H100S) for function in (
        hosts.root_port('0000:%02x:00.0' % (0x18 + 0x12 * n)),
        hosts.card(address, '10de', '2330', '030200',
                   '0000:%02x:00.0' % (0x18 + 0x12 * n), driver='vfio-pci',
                   subsystem=('10de', '16c1'), reset_method='flr'))
] + [
    hosts.root_port('0000:5d:00.0'),
    hosts.card(T4, '10de', '1eb8', '030200', '0000:5d:00.0',
               driver='nvidia', subsystem=('10de', '12a2'),
               mdev_types=(sysfs.Mdev(VGPU_TYPE, 'GRID T4-1B', VGPUS),)),
]


class PlacementProcess:
    """placement_server.py on a fresh SQLite file; ``serve()`` is its URL
    (the name ``arq_services`` asks a Placement for)."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory)
        self.log_file = self.directory / 'placement.log'
        self.process = None
        self.url = None

    def start(self):
        self.directory.mkdir(parents=True, exist_ok=True)
        port_file = self.directory / 'port'
        with open(self.log_file, 'ab') as log:
            self.process = subprocess.Popen(
                [sys.executable, str(PLACEMENT_SERVER), '--db',
                 str(self.directory / 'placement.sqlite'), '--port-file',
                 str(port_file)], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while not port_file.exists():
            if self.process.poll() is not None or (
                    time.monotonic() > deadline):
                raise RuntimeError('Placement did not start:\n%s'
                                   % self.log_file.read_text()[-3000:])
            time.sleep(0.1)
        self.url = 'http://127.0.0.1:%d' % int(port_file.read_text())
        return self

    def serve(self):
        return self.url

    def stop(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=15)
            self.process = None


class _Side:
    """What ``arq_services`` builds this service's processes from."""

    def __init__(self, directory, host, placement):
        self.directory = directory
        self.host = host
        self.placement = placement
        self.vhost = 'cyborg-test-%s' % uuid.uuid4().hex[:12]
        self.db_url = None


def _checked(response, expected):
    if response.status_code not in expected:
        raise AssertionError('%s %s: %d %s' % (
            response.request.method, response.request.url,
            response.status_code, response.text[:1000]))
    return response


class Cloud:
    """See the module's docstring."""

    def __init__(self, directory, glance):
        self.directory = pathlib.Path(directory)
        self.glance = glance
        self.placement = PlacementProcess(self.directory / 'placement')
        self.neutron = None
        self.compute_host = 'compute-%s' % uuid.uuid4().hex[:8]
        self.side = _Side(self.directory / 'cyborg', self.compute_host,
                          self.placement)
        self.nova = None
        self.api = None
        self.conductor = None
        self.agent = None
        self.image_id = None
        self.fpga_rp = self.pgpu_rp = self.vgpu_rp = None
        self.device_rps = {}
        self.sysfs_root = None
        self.compute_rp = None
        self.timings = {}
        self._vhost_made = False

    # -- life ---------------------------------------------------------------

    def start(self):
        started = time.monotonic()
        self.side.directory.mkdir(parents=True)
        self.nova = nova_service.NovaService(
            self.directory / 'nova', compute_host=self.compute_host,
            glance_url=self.glance.url)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            # Nova's schemas take the longest; the rest starts meanwhile.
            nova_ready = pool.submit(self.nova.prepare)
            self._cyborg_database()
            self.placement.start()
            self.neutron = neutron_stub.NeutronStub().start()
            self.api = arq_services.APIServer(self.side, workers=1,
                                              access_log=True)
            self.api.start(timeout=START_TIMEOUT)
            self.image_id = self.glance.create_image('cirros-ish', tags=())
            self.glance.upload_data(self.image_id, IMAGE)
            nova_ready.result()
        self.timings['databases'] = time.monotonic() - started
        self.nova.start(placement_url=self.placement.url,
                        neutron_url=self.neutron.url,
                        cyborg_url=self.api.url)
        self.conductor = arq_services.conductor(
            self.side, 'cyborg-conductor-1',
            self._nova_section() + self._glance_section() + '\n'.join([
                '[placement]', 'provider_layout = pooled', '']))
        self.conductor.start()
        # The agent looks for the compute node at each report until
        # nova-compute has made it.
        self.agent = arq_services.agent(self.side)
        self._configure_agent()
        self.agent.start()
        self.nova.wait_for_compute()
        self.compute_rp = self._provider(self.compute_host)
        self._wait_for_devices()
        self.timings['start'] = time.monotonic() - started
        LOG.warning('Nova cloud up in %.1f s (databases %.1f s)',
                    self.timings['start'], self.timings['databases'])
        return self

    def _configure_agent(self):
        """The fake FPGA, slow to program, and the NVIDIA driver over
        ``GPU_FUNCTIONS``; the agent's privileged calls go to a privsep
        daemon started as a deployment starts it (through
        ``cyborg-privsep-launcher``; the tests run as root, so without
        sudo)."""
        self.sysfs_root = sysfs.build(str(self.side.directory / 'sysfs'),
                                      GPU_FUNCTIONS)
        links = self.side.directory / 'privsep'
        links.mkdir(mode=0o700)
        config_file = self.agent.config_file
        helper = ' '.join(shlex.quote(word) for word in [
            *privsep_rig.launcher_command(str(links / 'agent.sock')),
            privsep_rig.privsep_helper(), '--config-file',
            str(config_file)])
        text = config_file.read_text().replace(
            'enabled_drivers = fake_driver\n',
            'enabled_drivers = fake_driver, nvidia_gpu_driver\n')
        config_file.write_text(text + self._glance_section() + '\n'.join([
            '[fake_driver]',
            'program_seconds = %d' % PROGRAM_SECONDS,
            '[gpu_devices]',
            'enabled_vgpu_types = %s' % VGPU_TYPE,
            '[vgpu_%s]' % VGPU_TYPE,
            'device_addresses = %s' % T4,
            '[pci]',
            'sysfs_root = %s' % self.sysfs_root,
            '[%s]' % privsep.CONFIG_SECTION,
            'helper_command = %s' % helper,
            '']))

    def _cyborg_database(self):
        self.side.db_url = db_servers.create_database('mysql',
                                                      self.side.directory)
        migration.upgrade(self.side.db_url)
        rabbitmqctl('add_vhost', self.side.vhost)
        self._vhost_made = True
        rabbitmqctl('set_permissions', '-p', self.side.vhost, 'guest', '.*',
                    '.*', '.*')

    def _nova_section(self):
        return '\n'.join([
            '[nova]',
            'auth_type = admin_token',
            'endpoint = %s' % self.nova.url,
            'token = %s' % nova_service.TOKEN,
            'endpoint_override = %s' % self.nova.url,
            'timeout = 30',
            'event_retry_interval = 0.5',
            ''])

    def _glance_section(self):
        return '\n'.join([
            '[glance]',
            'auth_type = none',
            'endpoint_override = %s' % self.glance.url,
            ''])

    def _provider(self, name):
        found = self.placement_get('/resource_providers',
                                   params={'name': name})
        providers = found['resource_providers']
        assert providers, 'no provider named %s' % name
        return providers[0]['uuid']

    def _wait_for_devices(self):
        """The providers of the host's devices, once all of them are
        under the compute node with their inventories: the fake FPGA's
        (``fpga_rp``, 16 FPGA), the H100s' pool (``pgpu_rp``, PGPU 4) and
        the T4's vGPUs (``vgpu_rp``). ``device_rps``: each one's resource
        class."""
        wanted = {'FPGA': 16, 'PGPU': len(H100S), 'VGPU': VGPUS}
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            found = {}
            for rp in self.placement_get(
                    '/resource_providers',
                    params={'in_tree': self.compute_rp})[
                        'resource_providers']:
                inventories = self.placement_get(
                    '/resource_providers/%s/inventories' % rp['uuid'])[
                        'inventories']
                for rc, total in wanted.items():
                    if inventories.get(rc, {}).get('total') == total:
                        assert rp['parent_provider_uuid'] == self.compute_rp
                        found[rc] = rp['uuid']
            if len(found) == len(wanted):
                self.fpga_rp = found['FPGA']
                self.pgpu_rp = found['PGPU']
                self.vgpu_rp = found['VGPU']
                self.device_rps = {rp: rc for rc, rp in found.items()}
                return
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError('not every device under %s within %d s '
                                   '(found %s):\n%s' % (
                                       self.compute_host, START_TIMEOUT,
                                       found, self.tails()))
            time.sleep(0.5)

    def check_alive(self):
        for service in (self.conductor, self.agent):
            if service is not None and not service.alive:
                raise RuntimeError('%s exited:\n%s' % (service.name,
                                                       service.tail()))
        if self.nova is not None:
            self.nova.check_alive()

    def tails(self, lines=30):
        parts = []
        for service in (self.api, self.conductor, self.agent):
            if service is not None:
                parts.append('--- %s\n%s' % (service.name,
                                             service.tail(lines)))
        if self.nova is not None:
            parts.append(self.nova.tails(lines))
        log = self.placement.log_file
        if log.exists():
            parts.append('--- placement\n%s' % '\n'.join(
                log.read_text(errors='replace').splitlines()[-lines:]))
        return '\n'.join(parts)

    def stop(self):
        for service in (self.agent, self.conductor):
            if service is not None:
                service.kill()
        if self.api is not None:
            self.api.stop()
        if self.nova is not None:
            self.nova.stop()
        if self.neutron is not None:
            self.neutron.stop()
        self.placement.stop()
        if self.side.db_url is not None:
            db_servers.drop_database(self.side.db_url)
            self.side.db_url = None
        if self._vhost_made:
            rabbitmqctl('delete_vhost', self.side.vhost)
            self._vhost_made = False
        if self.image_id is not None:
            self.glance.delete_image(self.image_id)
            self.image_id = None

    # -- the APIs ------------------------------------------------------------
    # A connection per call: tests call from many threads at once, and a
    # kept-alive connection that gunicorn closes meanwhile is reset.

    def nova_call(self, method, path, expected=(200,), **kwargs):
        kwargs.setdefault('timeout', 60)
        return _checked(requests.request(
            method, self.nova.url + path, headers=nova_service.HEADERS,
            **kwargs), expected)

    def cyborg_call(self, method, path, expected=(200,), **kwargs):
        kwargs.setdefault('timeout', 60)
        return _checked(requests.request(
            method, self.api.url + path, headers=CYBORG_HEADERS, **kwargs),
            expected)

    def placement_get(self, path, **kwargs):
        kwargs.setdefault('timeout', 30)
        return _checked(requests.get(
            self.placement.url + path, headers=PLACEMENT_HEADERS, **kwargs),
            (200,)).json()


@pytest.fixture(scope='session')
def nova_cloud(tmp_path_factory, glance_service):
    """The session's ``Cloud``, started on first use."""
    cloud = Cloud(tmp_path_factory.mktemp('nova-cloud'), glance_service)
    try:
        cloud.start()
    except BaseException:
        LOG.error('The Nova cloud did not start:\n%s', cloud.tails())
        cloud.stop()
        raise
    yield cloud
    cloud.stop()
