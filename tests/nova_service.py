"""A real Nova control plane and one compute host, each a process.

``NovaService`` runs Nova from the ``nova`` package of the test venv
(pinned in test-requirements.txt): nova-api (its WSGI app under
gunicorn), nova-conductor, nova-scheduler and nova-compute with Nova's
fake virt driver, over a RabbitMQ virtual host and MariaDB databases of
their own (API, cell0 and cell1, set up with ``nova-manage`` as a
deployment does). It needs the URLs of a Placement, a Glance, a Neutron
and this service's API, and a Keystone stand-in: ``tests.nova_token``,
a paste filter in place of ``auth_token`` that trusts any token.

nova-compute gets no database options (it must reach the database
through the conductor) and is named ``compute_host``: the fake driver
names its node, and so the compute node's resource provider, after it.

Each process writes its log under ``directory``; ``tails()`` gives their
ends for a failure message. ``stop()`` kills every process group it
started and drops the databases and the virtual host.
"""

import concurrent.futures
import contextlib
import logging
import os
import pathlib
import signal
import subprocess
import time
import uuid

import requests

from tests import db_servers
from tests import listening
from tests.functional.services.conftest import RABBIT
from tests.functional.services.conftest import ServiceProcess
from tests.functional.services.conftest import console_script
from tests.functional.services.conftest import rabbitmqctl

LOG = logging.getLogger(__name__)

REPO = pathlib.Path(__file__).resolve().parent.parent
START_TIMEOUT = 120
MANAGE_TIMEOUT = 300
# Nova's API threads; the scatter-gather pool must cover them, or
# concurrent requests wait for a free cell worker (a minute at worst).
API_THREADS = 8
TOKEN = 'admin'
HEADERS = {'X-Auth-Token': TOKEN, 'Content-Type': 'application/json',
           'Accept': 'application/json',
           # 2.82: accelerator-request-bound events; 2.90: hostname.
           'OpenStack-API-Version': 'compute 2.90'}

_PASTE = """\
[composite:osapi_compute]
use = call:nova.api.openstack.urlmap:urlmap_factory
/: oscomputeversions
/v2.1: oscomputeversion_v2
/v2.1/+: openstack_compute_api_v21

[composite:openstack_compute_api_v21]
use = call:nova.api.auth:pipeline_factory_v21
keystone = compute_req_id faultwrap request_log sizelimit authtoken \
keystonecontext osapi_compute_app_v21

[filter:request_log]
paste.filter_factory = nova.api.openstack.requestlog:RequestLog.factory
[filter:compute_req_id]
paste.filter_factory = nova.api.compute_req_id:ComputeReqIdMiddleware.factory
[filter:faultwrap]
paste.filter_factory = nova.api.openstack:FaultWrapper.factory
[filter:sizelimit]
paste.filter_factory = oslo_middleware:RequestBodySizeLimiter.factory
[filter:authtoken]
paste.filter_factory = tests.nova_token:filter_factory
[filter:keystonecontext]
paste.filter_factory = nova.api.auth:NovaKeystoneContext.factory
[app:osapi_compute_app_v21]
paste.app_factory = nova.api.openstack.compute:APIRouterV21.factory
[pipeline:oscomputeversions]
pipeline = faultwrap request_log oscomputeversionapp
[pipeline:oscomputeversion_v2]
pipeline = compute_req_id faultwrap request_log oscomputeversionapp_v2
[app:oscomputeversionapp]
paste.app_factory = nova.api.openstack.compute.versions:Versions.factory
[app:oscomputeversionapp_v2]
paste.app_factory = nova.api.openstack.compute.versions:VersionsV2.factory
"""

# gunicorn reads ./gunicorn.conf.py by itself: no command-line arguments,
# which Nova's WSGI module would parse as its own.
_GUNICORN_CONF = """\
bind = ['fd://{fd}']
workers = 1
worker_class = 'gthread'
threads = {threads}
timeout = 120
wsgi_app = 'nova.wsgi.osapi_compute:application'
control_socket_disable = True
"""


def _admin_token_section(group, url, extra=()):
    """A keystoneauth section that sends the token ``admin`` to ``url``
    (Placement's noauth2 makes it an admin; the stand-ins trust it)."""
    return [
        '[%s]' % group,
        'auth_type = admin_token',
        'endpoint = %s' % url,
        'token = %s' % TOKEN,
        'endpoint_override = %s' % url,
        'timeout = 30',
        *extra,
    ]


class NovaService:
    """Nova's services on this machine; see the module's docstring."""

    def __init__(self, directory, compute_host=None, glance_url=None):
        self.directory = pathlib.Path(directory)
        # The neighbours' URLs; start() takes those not known yet.
        self.glance_url = glance_url
        self.placement_url = self.neutron_url = self.cyborg_url = None
        self.compute_host = compute_host or (
            'nova-compute-%s' % uuid.uuid4().hex[:8])
        self.vhost = 'nova-test-%s' % uuid.uuid4().hex[:12]
        self.transport_url = 'rabbit://guest:guest@%s:%d/%s' % (
            RABBIT[0], RABBIT[1], self.vhost)
        self.databases = {}
        self.services = {}
        self.api_process = None
        self.api_log = self.directory / 'nova-api.log'
        self.url = None
        self.timings = {}
        self._vhost_made = False

    # -- configuration ------------------------------------------------------

    def config(self, role):
        """nova.conf of ``role`` ('api', 'conductor', 'scheduler',
        'compute', 'manage')."""
        compute = role == 'compute'
        lines = [
            '[DEFAULT]',
            'host = %s' % (self.compute_host if compute
                           else 'nova-controller'),
            'transport_url = %s' % self.transport_url,
            'state_path = %s' % (self.directory / ('state-%s' % role)),
            'log_file = %s' % (self.directory / ('nova-%s.log' % role)),
            'debug = false',
            'compute_driver = fake.FakeDriver',
            'cell_worker_thread_pool_size = %d' % (API_THREADS + 2),
            # Nothing to heal: the servers have no ports.
            'heal_instance_info_cache_interval = -1',
            'rpc_response_timeout = 60',
            '[oslo_concurrency]',
            'lock_path = %s' % (self.directory / 'locks'),
            '[oslo_messaging_notifications]',
            'driver = noop',
            '[oslo_messaging_rabbit]',
            'rabbit_retry_interval = 1',
            'rabbit_retry_backoff = 1',
            'rabbit_interval_max = 2',
            '[wsgi]',
            'api_paste_config = %s' % (self.directory / 'api'
                                       / 'api-paste.ini'),
            '[scheduler]',
            # Finds the compute host within seconds of its start.
            'discover_hosts_in_cells_interval = 2',
            'workers = 1',
            '[conductor]',
            'workers = 1',
            '[compute]',
            # Builds that fail on purpose must not disable the host.
            'consecutive_build_service_disable_threshold = 0',
            '[quota]',
            # A host's worth of servers is more than the default quota.
            'instances = -1',
            'cores = -1',
            'ram = -1',
            '[vnc]',
            'enabled = false',
            '[service_user]',
            'send_service_user_token = false',
            '[glance]',
            'endpoint_override = %s' % self.glance_url,
            '[cyborg]',
            'endpoint_override = %s/v2' % self.cyborg_url,
            'timeout = 30',
            *_admin_token_section('placement', self.placement_url),
            *_admin_token_section('neutron', self.neutron_url),
        ]
        if not compute:
            lines += ['[api_database]',
                      'connection = %s' % self.databases['api'],
                      '[database]',
                      'connection = %s' % self.databases['cell1']]
        return '\n'.join(lines) + '\n'

    # -- life ---------------------------------------------------------------

    def prepare(self):
        """Virtual host, databases and cells, as a deployment makes them."""
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / 'locks').mkdir(exist_ok=True)
        rabbitmqctl('add_vhost', self.vhost)
        self._vhost_made = True
        rabbitmqctl('set_permissions', '-p', self.vhost, 'guest', '.*', '.*',
                    '.*')
        for name in ('api', 'cell0', 'cell1'):
            self.databases[name] = db_servers.create_database(
                'mysql', self.directory)
        manage = self.directory / 'nova-manage.conf'
        manage.write_text(self.config('manage'))
        cell0 = self.directory / 'nova-manage-cell0.conf'
        cell0.write_text(self.config('manage').replace(
            self.databases['cell1'], self.databases['cell0']))
        # Three schemas at once: each nova-manage spends seconds importing.
        steps = [
            [(manage, 'api_db', 'sync'),
             (manage, 'cell_v2', 'map_cell0', '--database_connection',
              self.databases['cell0']),
             (manage, 'cell_v2', 'create_cell', '--name', 'cell1')],
            [(manage, 'db', 'sync', '--local_cell')],
            [(cell0, 'db', 'sync', '--local_cell')],
        ]
        with concurrent.futures.ThreadPoolExecutor(len(steps)) as pool:
            for done in [pool.submit(self._manage_all, s) for s in steps]:
                done.result()
        self.timings['prepare'] = time.monotonic() - started
        return self

    def _manage_all(self, steps):
        for step in steps:
            self._manage(*step)

    def _manage(self, config, *args):
        result = subprocess.run(
            [console_script('nova-manage'), '--config-file', str(config),
             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=MANAGE_TIMEOUT, check=False,
            env=self._env())
        if result.returncode:
            raise RuntimeError('nova-manage %s failed (%d):\n%s' % (
                ' '.join(args), result.returncode, result.stdout[-4000:]))
        return result.stdout

    @staticmethod
    def _env():
        # The paste filter is a module of this tree; Nova's processes
        # import it, whether or not the tree is installed.
        path = os.environ.get('PYTHONPATH')
        return dict(os.environ, PYTHONPATH=str(REPO) + (
            os.pathsep + path if path else ''))

    def start(self, **urls):
        """Every Nova process; returns once the API answers (the compute
        host may still be registering: ``wait_for_compute``). ``urls``:
        ``placement_url``, ``neutron_url``, ``cyborg_url``,
        ``glance_url``."""
        for name, url in urls.items():
            assert hasattr(self, name), name
            setattr(self, name, url)
        started = time.monotonic()
        for role in ('conductor', 'scheduler', 'compute'):
            service = ServiceProcess('nova-%s' % role, self.directory,
                                     self.config(role))
            self.services[role] = service.start(env=self._env(),
                                                own_group=True)
        self._start_api()
        self.timings['start'] = time.monotonic() - started
        return self

    def _start_api(self):
        api_dir = self.directory / 'api'
        api_dir.mkdir(exist_ok=True)
        (api_dir / 'api-paste.ini').write_text(_PASTE)
        (api_dir / 'nova-api.conf').write_text(self.config('api'))
        with listening.inheritable_listener() as listener:
            port = listener.getsockname()[1]
            (api_dir / 'gunicorn.conf.py').write_text(_GUNICORN_CONF.format(
                fd=listener.fileno(), threads=API_THREADS))
            env = dict(self._env(), OS_NOVA_CONFIG_DIR=str(api_dir),
                       # The paste file first: Nova loads the app from it.
                       OS_NOVA_CONFIG_FILES='api-paste.ini;nova-api.conf')
            with open(self.directory / 'nova-api.out', 'ab') as output:
                self.api_process = subprocess.Popen(
                    [console_script('gunicorn')], cwd=api_dir,
                    stdin=subprocess.DEVNULL, stdout=output,
                    stderr=subprocess.STDOUT, pass_fds=(listener.fileno(),),
                    start_new_session=True, env=env)
        self.url = 'http://127.0.0.1:%d/v2.1' % port
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if requests.get(self.url + '/flavors', headers=HEADERS,
                                timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.api_process.poll() is not None or (
                    time.monotonic() > deadline):
                raise RuntimeError('nova-api did not answer on %s:\n%s' % (
                    self.url, self.tails()))
            time.sleep(0.3)

    def wait_for_compute(self, timeout=START_TIMEOUT):
        """Wait until nova-compute has registered, map it to the cell as
        ``nova-manage cell_v2 discover_hosts`` does (the scheduler's own
        periodic discovery starts late) and wait until it is up."""
        deadline = time.monotonic() + timeout
        mapped = False
        while True:
            self.check_alive()
            services = self._get('/os-services', binary='nova-compute',
                                 host=self.compute_host)['services']
            if services and not mapped:
                self._manage(self.directory / 'nova-manage.conf',
                             'cell_v2', 'discover_hosts')
                mapped = True
            if mapped:
                up = [h for h in self._get(
                    '/os-hypervisors',
                    hypervisor_hostname_pattern=self.compute_host)[
                        'hypervisors'] if h['state'] == 'up']
                if up:
                    return up[0]
            if time.monotonic() > deadline:
                raise RuntimeError('%s did not come up within %d s:\n%s' % (
                    self.compute_host, timeout, self.tails()))
            time.sleep(0.5)

    def _get(self, path, **params):
        """The JSON of a GET; a 404 (nothing found) is an empty dict of
        lists."""
        answer = requests.get(self.url + path, headers=HEADERS,
                              params=params, timeout=30)
        if answer.status_code == 404:
            return {'services': [], 'hypervisors': []}
        answer.raise_for_status()
        return answer.json()

    def check_alive(self):
        dead = [name for name, service in self.services.items()
                if not service.alive]
        api = self.api_process
        if api is not None and api.poll() is not None:
            dead.append('api')
        if dead:
            raise RuntimeError('nova %s exited:\n%s' % (', '.join(dead),
                                                       self.tails()))

    def tails(self, lines=30):
        parts = []
        for path in sorted(self.directory.glob('nova-*.log')) + sorted(
                self.directory.glob('*.out')):
            text = path.read_text(errors='replace').splitlines()[-lines:]
            parts.append('--- %s\n%s' % (path.name, '\n'.join(text)))
        return '\n'.join(parts)

    def stop(self):
        if self.api_process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.api_process.pid, signal.SIGKILL)
            self.api_process.wait(timeout=15)
            self.api_process = None
        for service in self.services.values():
            service.kill()
        self.services = {}
        for url in self.databases.values():
            db_servers.drop_database(url)
        self.databases = {}
        if self._vhost_made:
            rabbitmqctl('delete_vhost', self.vhost)
            self._vhost_made = False
