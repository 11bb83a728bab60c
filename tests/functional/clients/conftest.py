"""The API served on a real port for the real client packages.

One database engine is enough here (``service``): these tests are about
what goes over the wire, not about SQL dialects. The ARQ tests, whose
binds go through a conductor, take ``conductor_service`` on the engine of
their module's ``database_url`` instead, with ``nova``, a recorder of the
conductor's bind events.
"""

import contextlib
import io
import os
import pathlib
import sys
import threading

import pytest

from cyborg import context as cyborg_context
from cyborg.db import session
from cyborg.db.api import device_profiles
from tests.arq_stack import RecordingNova
from tests.conftest import ServedAPI
from tests.conftest import create_schema
from tests.conftest import make_conf

# devstack serves the API below this prefix; clients must follow the self
# links there too.
MOUNT = '/accelerator'
VENV_BIN = pathlib.Path(sys.executable).parent


class Recorder:
    """WSGI middleware that keeps what each request sent and got back."""

    def __init__(self, app):
        self._app = app
        self._lock = threading.Lock()
        self.exchanges = []

    def __call__(self, environ, start_response):
        body = b''
        if environ.get('CONTENT_LENGTH'):
            body = environ['wsgi.input'].read(int(environ['CONTENT_LENGTH']))
            environ['wsgi.input'] = io.BytesIO(body)
        exchange = {
            'method': environ['REQUEST_METHOD'],
            'path': environ.get('SCRIPT_NAME', '') + environ['PATH_INFO'],
            'query': environ.get('QUERY_STRING', ''),
            'version': environ.get('HTTP_OPENSTACK_API_VERSION'),
            'token': environ.get('HTTP_X_AUTH_TOKEN'),
            'body': body,
            'status': None,
        }

        def recording_start_response(status, headers, exc_info=None):
            exchange['status'] = int(status.split()[0])
            return start_response(status, headers, exc_info)

        with self._lock:
            self.exchanges.append(exchange)
        return self._app(environ, recording_start_response)

    def api_calls(self):
        """The exchanges below /v2/, leaving out version discovery."""
        return [e for e in self.exchanges
                if e['path'].split('/v2', 1)[-1].strip('/')]


class Mount:
    """Serves the app both at / and below MOUNT, as a proxy would."""

    def __init__(self, app):
        self._app = app

    def __call__(self, environ, start_response):
        path = environ.get('PATH_INFO', '')
        if path == MOUNT or path.startswith(MOUNT + '/'):
            environ['SCRIPT_NAME'] = environ.get('SCRIPT_NAME', '') + MOUNT
            environ['PATH_INFO'] = path[len(MOUNT):]
        return self._app(environ, start_response)


class Service:
    """What a test needs: the root URL, the wire record, the database."""

    def __init__(self, served, recorder, db):
        self.url = served.url
        self.recorder = recorder
        self.db = db

    def profiles(self):
        """Every device profile in the database, by name."""
        context = cyborg_context.admin_context(self.db)
        return {p.name: p for p in device_profiles.list_profiles(context)}


@pytest.fixture
def client_db(sqlite_url):
    create_schema(sqlite_url)
    conf = make_conf(sqlite_url)
    database = session.Database(conf)
    yield conf, database
    database.dispose()


@contextlib.contextmanager
def serving(conf, db, transport=None):
    """A ``Service``: the API on a real port, recorded, mounted at / and
    below MOUNT (its RPC on ``transport`` when given)."""
    served = ServedAPI(conf, db, transport)
    recorder = Recorder(Mount(served.server.wsgi_app))
    # cheroot looks the application up on every request.
    served.server.wsgi_app = recorder
    try:
        yield Service(served, recorder, db)
    finally:
        served.stop()


@pytest.fixture
def service(client_db):
    conf, database = client_db
    with serving(conf, database) as served:
        yield served


@pytest.fixture
def nova():
    """Nova as the conductor's bind events reach it: a recorder."""
    return RecordingNova()


@pytest.fixture
def conductor_service(conf, db, transport, conductor):
    """The API on a real port on the module's database, casting to its
    ``conductor`` over ``transport``; a module takes it for its
    ``service`` with ``service = conductor_service``."""
    with serving(conf, db, transport) as served:
        yield served


@pytest.fixture
def client_env(tmp_path):
    """An environment for client processes with no clouds.yaml or OS_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    env['HOME'] = str(tmp_path)
    env['PATH'] = '%s%s%s' % (VENV_BIN, os.pathsep, env.get('PATH', ''))
    env['PYTHONWARNINGS'] = 'ignore'
    return env
