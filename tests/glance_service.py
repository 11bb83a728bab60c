"""A real Glance for tests: glance-api under gunicorn, on SQLite.

Glance cannot share the test venv (its pins differ from the service's),
so it lives in a venv of its own, ``$CYBORG_GLANCE_VENV`` (default
``/tmp/cyborg-glance-venv``), installed from PyPI on first use
(``GLANCE_REQUIREMENTS``; about half a minute, logged) and reused after
(``tests.cached_venv``: an exclusive lock on ``<venv>.lock`` keeps
parallel test workers from installing it twice). The migrated SQLite
schema and a policy file are built once per venv as well.

Each ``GlanceService`` is one glance-api process (gunicorn, a threaded
worker) on a port of 127.0.0.1 chosen by the kernel, with

- its own SQLite database (a copy of the migrated template),
- the ``file`` store in its directory (``store_dir``),
- no authentication: the paste pipeline without keystone
  (``[paste_deploy] flavor`` empty), which makes every request an admin's,
  and a policy file that allows every rule.

Use (in a ``conftest.py``; a test module can instead bind the fixtures
to names, ``glance = glance_service.glance``)::

    from tests.glance_service import glance  # noqa: F401
    from tests.glance_service import glance_service  # noqa: F401

    def test_x(glance):
        image = glance.upload_bitstream(b'...', **{
            'bs-uuid': ..., 'vendor': 'Xilinx', 'board': 'U200'})
        client = glance.client()          # cyborg's GlanceClient
        conf_overrides = {('glance', 'endpoint_override'): glance.url}

``glance_service`` is the session's service; ``glance`` is the same
service for one test, deleting the images the test uploaded when it ends.
"""

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
import pytest

from cyborg.clients import glance as glance_client
from tests import cached_venv

LOG = logging.getLogger(__name__)

GLANCE_REQUIREMENTS = ('glance==33.0.0', 'gunicorn==27.0.1')
VENV = os.environ.get('CYBORG_GLANCE_VENV') or '/tmp/cyborg-glance-venv'
READY = '.cyborg-glance-ready'
START_TIMEOUT = 60

_API_CONF = """\
[DEFAULT]
enabled_backends = fs:file
node_staging_uri = file://{dir}/staging
limit_param_default = {page_size}
use_stderr = true
[database]
connection = sqlite:///{db}
[glance_store]
default_backend = fs
[fs]
filesystem_store_datadir = {dir}/images
[os_glance_staging_store]
filesystem_store_datadir = {dir}/staging
[os_glance_tasks_store]
filesystem_store_datadir = {dir}/tasks
[paste_deploy]
flavor =
config_file = {paste}
[oslo_policy]
policy_file = {policy}
enforce_new_defaults = false
enforce_scope = false
"""

_GUNICORN_CONF = """\
bind = ['fd://{fd}']
workers = 1
worker_class = 'gthread'
threads = 4
timeout = 60
control_socket_disable = True
"""

# Run in the Glance venv: allow every policy rule Glance knows.
_WRITE_POLICY = """\
import json, sys
from glance import policies
rules = {rule.name: '' for rule in policies.list_rules()}
with open(sys.argv[1], 'w') as out:
    json.dump(rules, out, indent=1, sort_keys=True)
"""


_run = cached_venv.run
_clean_env = cached_venv.clean_env


def _paste_ini(venv):
    return os.path.join(venv, 'etc', 'glance', 'glance-api-paste.ini')


def _template_dir(venv):
    return os.path.join(venv, 'cyborg-template')


def ensure_venv(venv=VENV):
    """Install Glance into ``venv`` unless done; returns the seconds the
    install took (0 when it was there already)."""
    return cached_venv.ensure(venv, GLANCE_REQUIREMENTS, READY, 'Glance',
                              prepare=_build_template).total


def _build_template(venv):
    """The migrated SQLite file and the policy file every service copies."""
    template = _template_dir(venv)
    shutil.rmtree(template, ignore_errors=True)
    os.makedirs(template)
    python = os.path.join(venv, 'bin', 'python')
    policy = os.path.join(template, 'policy.json')
    _run([python, '-c', _WRITE_POLICY, policy], 'Listing Glance policies',
         120, env=_clean_env())
    with tempfile.TemporaryDirectory() as scratch:
        db = os.path.join(template, 'glance.sqlite')
        conf_dir = _write_conf(scratch, db, policy, venv, page_size=25)
        _run([os.path.join(venv, 'bin', 'glance-manage'), '--config-dir',
              conf_dir, 'db_sync'], 'glance-manage db_sync', 300,
             env=_clean_env())


def _write_conf(directory, db, policy, venv, page_size):
    conf_dir = os.path.join(directory, 'etc')
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(conf_dir, 'glance-api.conf'), 'w') as out:
        out.write(_API_CONF.format(dir=directory, db=db, policy=policy,
                                   paste=_paste_ini(venv),
                                   page_size=page_size))
    return conf_dir


class GlanceService:
    """One glance-api process on 127.0.0.1 with its own database and store.

    ``page_size`` is Glance's default page length (``limit_param_default``):
    small, so that clients must follow the ``next`` links.
    """

    def __init__(self, directory, venv=VENV, page_size=2):
        self.directory = str(directory)
        self.venv = venv
        self.page_size = page_size
        self.store_dir = os.path.join(self.directory, 'images')
        self.log_path = os.path.join(self.directory, 'glance-api.log')
        self.url = None
        self.install_seconds = None
        self.start_seconds = None
        self.uploaded = []
        self._process = None

    def start(self):
        self.install_seconds = ensure_venv(self.venv)
        started = time.monotonic()
        template = _template_dir(self.venv)
        db = os.path.join(self.directory, 'glance.sqlite')
        shutil.copyfile(os.path.join(template, 'glance.sqlite'), db)
        conf_dir = _write_conf(self.directory, db,
                               os.path.join(template, 'policy.json'),
                               self.venv, self.page_size)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(('127.0.0.1', 0))
            listener.listen(64)
            listener.set_inheritable(True)
            port = listener.getsockname()[1]
            gunicorn_conf = os.path.join(self.directory, 'gunicorn.conf.py')
            with open(gunicorn_conf, 'w') as out:
                out.write(_GUNICORN_CONF.format(fd=listener.fileno()))
            with open(self.log_path, 'ab') as log:
                self._process = subprocess.Popen(
                    [os.path.join(self.venv, 'bin', 'gunicorn'), '--config',
                     gunicorn_conf, 'glance.wsgi.api:application'],
                    cwd=self.directory, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(listener.fileno(),),
                    # Its own process group, so that stop() can sweep a
                    # worker that outlives its master.
                    start_new_session=True,
                    env=_clean_env(OS_GLANCE_CONFIG_DIR=conf_dir))
        finally:
            listener.close()
        self.url = 'http://127.0.0.1:%d' % port
        try:
            self._wait_until_up()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        LOG.warning('Glance serves %s (started in %.1f s)', self.url,
                    self.start_seconds)
        return self

    def _wait_until_up(self):
        deadline = time.monotonic() + START_TIMEOUT
        session = ks_session.Session()
        while True:
            if self._process.poll() is not None:
                raise RuntimeError('glance-api exited with %s:\n%s' % (
                    self._process.returncode, self.log_tail()))
            try:
                if session.get(self.url + '/healthcheck', authenticated=False,
                               raise_exc=False,
                               timeout=2).status_code == 200:
                    return
            except Exception:  # not listening yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError('glance-api did not answer on %s within '
                                   '%d s:\n%s' % (self.url, START_TIMEOUT,
                                                  self.log_tail()))
            time.sleep(0.1)

    def log_tail(self, size=4000):
        try:
            with open(self.log_path, 'rb') as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - size))
                return log.read().decode('utf-8', 'replace')
        except OSError:
            return ''

    def stop(self):
        if self._process is None:
            return
        # SIGINT: gunicorn's quick shutdown; nothing here needs grace.
        self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        # Whatever of the group is left (a stuck worker) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait(timeout=15)
        self._process = None

    # -- clients -----------------------------------------------------------

    def adapter(self):
        """A keystoneauth Adapter for the served Glance (no auth needed)."""
        return ks_adapter.Adapter(ks_session.Session(), service_type='image',
                                  endpoint_override=self.url)

    def client(self, **kwargs):
        """Cyborg's ``GlanceClient`` for this Glance."""
        return glance_client.GlanceClient(self.adapter(), **kwargs)

    def _call(self, method, path, expected, **kwargs):
        response = self.adapter().request(path, method, raise_exc=False,
                                          **kwargs)
        if response.status_code not in expected:
            raise AssertionError('%s %s: %d %s' % (
                method, path, response.status_code, response.text[:500]))
        return response

    # -- images ------------------------------------------------------------

    def create_image(self, name=None, tags=('FPGA',), **properties):
        """A new image without data (status ``queued``); returns its id.

        ``properties`` are image properties (strings), e.g.
        ``**{'bs-uuid': ..., 'vendor': 'Xilinx'}``.
        """
        body = {'name': name or 'bitstream-%s' % uuid.uuid4().hex[:8],
                'container_format': 'bare', 'disk_format': 'raw',
                'tags': list(tags)}
        body.update({key: str(value) for key, value in properties.items()})
        image = self._call('POST', '/v2/images', (201,), json=body).json()
        self.uploaded.append(image['id'])
        return image['id']

    def upload_data(self, image_id, data):
        self._call('PUT', '/v2/images/%s/file' % image_id, (204,),
                   data=data,
                   headers={'Content-Type': 'application/octet-stream'})

    def upload_bitstream(self, data, name=None, tags=('FPGA',),
                         **properties):
        """Create an image with these properties and upload ``data``.

        Returns the image as ``GlanceClient`` describes it (active, with
        its checksums and ``properties``).
        """
        image_id = self.create_image(name, tags, **properties)
        self.upload_data(image_id, data)
        return self.show(image_id)

    def show(self, image_id):
        return glance_client.bitstream(self._call(
            'GET', '/v2/images/%s' % image_id, (200,)).json())

    def deactivate(self, image_id):
        self._call('POST', '/v2/images/%s/actions/deactivate' % image_id,
                   (204,))

    def delete_image(self, image_id):
        self._call('DELETE', '/v2/images/%s' % image_id, (204, 404))

    def stored_file(self, image_id):
        """Where the ``file`` store keeps the image's data."""
        return os.path.join(self.store_dir, image_id)


@pytest.fixture(scope='session')
def glance_service(tmp_path_factory):
    """A ``GlanceService`` shared by the session (installed on demand)."""
    service = GlanceService(tmp_path_factory.mktemp('glance')).start()
    yield service
    service.stop()


@pytest.fixture
def glance(glance_service):
    """The session's Glance; the images a test uploads go when it ends."""
    mark = len(glance_service.uploaded)
    yield glance_service
    for image_id in glance_service.uploaded[mark:]:
        glance_service.delete_image(image_id)
    del glance_service.uploaded[mark:]
