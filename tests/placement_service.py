"""A real Placement for tests: openstack-placement's WSGI app on SQLite.

``PlacementService`` builds Placement's app from its own ``ConfigOpts``
(``[api] auth_strategy = noauth2``) on a fresh SQLite file whose schema
comes from Placement's own migrations. It can be reached

- in this process, without a socket: ``service.client()`` or
  ``service.adapter()``;
- over HTTP on 127.0.0.1, for other processes: ``service.serve()``
  returns the URL (cheroot in a thread).

Placement keeps its database engine in a process-wide transaction
factory, so one process runs one ``PlacementService`` at a time.

Other test packages import the fixtures into their ``conftest.py``::

    from tests.placement_service import placement  # noqa: F401
"""

import shutil
import threading
import uuid

from cheroot import wsgi as cheroot_wsgi
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import session as ks_session
from oslo_config import cfg
from oslo_db.sqlalchemy import engines
from placement import conf as placement_conf
from placement import db_api as placement_db
from placement import deploy as placement_deploy
from placement.db.sqlalchemy import migration as placement_migration
from placement.objects import resource_class as placement_rc
from placement.objects import trait as placement_trait
import pytest

from cyborg.clients import placement as placement_client

# noauth2 turns the token into the user (and project) and takes the roles
# from X-Roles: those of a service user such as the conductor's, with the
# roles Keystone would imply (the reshaper wants the service role).
ADMIN_HEADERS = {'X-Auth-Token': 'admin',
                 'X-Roles': 'admin,member,reader,service'}

_active_lock = threading.Lock()
_active = []


def _placement_conf(connection):
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf.set_override('auth_strategy', 'noauth2', group='api')
    conf.set_override('connection', connection, group='placement_database')
    conf([], project='placement', default_config_files=[])
    return conf


def _patch_placement_engine(conf, engine):
    """Point Placement's process-wide transaction factory at ``engine``."""
    # The factory must be configured before it can be patched, and
    # configure() runs once per process (later calls only warn).
    if not placement_db.configure.called:
        placement_db.configure(conf)
    return placement_db.placement_context_manager.patch_engine(engine)


def migrate_schema(path):
    """Create Placement's schema in the SQLite file ``path``.

    With Placement's own alembic migrations, as ``placement-manage db
    sync`` does.
    """
    migrate('sqlite:///%s' % path)
    return path


def migrate(url):
    """Create Placement's schema in the empty database at ``url``."""
    engine = engines.create_engine(url)
    reset = _patch_placement_engine(_placement_conf(url), engine)
    try:
        placement_migration.upgrade('head')
    finally:
        reset()
        engine.dispose()


class PlacementService:
    """Placement's WSGI app on its own SQLite file, or on the empty
    database at ``connection`` (a MariaDB or PostgreSQL URL)."""

    def __init__(self, directory, schema_template=None, connection=None):
        self.db_path = directory / 'placement.sqlite'
        if connection:
            migrate(connection)
        elif schema_template:
            # Copying a migrated file is much faster than migrating again.
            shutil.copyfile(schema_template, self.db_path)
        else:
            migrate_schema(self.db_path)
        self.conf = _placement_conf(connection
                                    or 'sqlite:///%s' % self.db_path)
        self.app = None
        self.url = None
        self._engine = None
        self._reset_engine = None
        self._server = None
        self._thread = None

    def start(self):
        with _active_lock:
            if _active:
                raise RuntimeError(
                    'A Placement is already running in this process (%s); '
                    'Placement keeps one database per process.'
                    % _active[0].conf.placement_database.connection)
            _active.append(self)
        # A throwaway database need not survive a power cut: without
        # fsync each request is several times faster.
        self._engine = engines.create_engine(
            self.conf.placement_database.connection,
            sqlite_synchronous=False)
        self._reset_engine = _patch_placement_engine(self.conf, self._engine)
        # Placement fills the standard traits and resource classes once
        # per process; this database is new, so ask again.
        placement_trait._TRAITS_SYNCED = False
        placement_rc._RESOURCE_CLASSES_SYNCED = False
        self.app = placement_deploy.loadapp(self.conf)
        return self

    def serve(self, threads=1):
        """Serve on a free port of 127.0.0.1; returns the endpoint URL.

        One worker thread by default: SQLite serialises writers anyway
        and a single thread keeps it from answering 'database is locked'.
        """
        if self.url is None:
            self._server = cheroot_wsgi.Server(
                ('127.0.0.1', 0), self.app, numthreads=threads,
                server_name='placement')
            self._server.prepare()
            host, port = self._server.bind_addr[:2]
            self.url = 'http://%s:%d' % (host, port)
            self._thread = threading.Thread(target=self._server.serve,
                                            daemon=True)
            self._thread.start()
        return self.url

    def stop(self):
        if self._server is not None:
            self._server.stop()
            self._thread.join(timeout=10)
            self._server = None
            self.url = None
        if self._reset_engine is not None:
            self._reset_engine()
            self._engine.dispose()
            self._reset_engine = None
        with _active_lock:
            if self in _active:
                _active.remove(self)

    def adapter(self):
        """A keystoneauth Adapter reaching the app in this process."""
        return placement_client.wsgi_adapter(self.app,
                                             headers=ADMIN_HEADERS)

    def http_adapter(self):
        """A keystoneauth Adapter reaching the served port."""
        url = self.serve()
        session = ks_session.Session(additional_headers=ADMIN_HEADERS)
        return ks_adapter.Adapter(session, service_type='placement',
                                  endpoint_override=url)

    def client(self):
        return placement_client.PlacementClient(self.adapter())


def create_compute_node(adapter, hostname, vcpus=16, memory_mb=65536):
    """The compute-node provider as Nova makes it: named after the host.

    Nova gives it the compute node's UUID (random here) and inventories
    of VCPU and MEMORY_MB; it is the root of the host's tree.
    """
    version = placement_client.MICROVERSION
    provider = _checked(adapter.post(
        '/resource_providers', json={'name': hostname,
                                     'uuid': str(uuid.uuid4())},
        microversion=version, raise_exc=False)).json()
    _checked(adapter.put(
        '/resource_providers/%s/inventories' % provider['uuid'],
        json={'resource_provider_generation': provider['generation'],
              'inventories': {
                  'VCPU': {'total': vcpus, 'allocation_ratio': 4.0},
                  'MEMORY_MB': {'total': memory_mb}}},
        microversion=version, raise_exc=False))
    return _checked(adapter.get(
        '/resource_providers/%s' % provider['uuid'], microversion=version,
        raise_exc=False)).json()


def allocate(adapter, consumer_uuid, provider_uuid, resources,
             project_id='demo-project', user_id='demo-user'):
    """Allocate ``resources`` of one provider to a new consumer, as Nova
    does when it schedules an instance."""
    _checked(adapter.put(
        '/allocations/%s' % consumer_uuid,
        json={'allocations': {provider_uuid: {'resources': resources}},
              'consumer_generation': None, 'consumer_type': 'INSTANCE',
              'project_id': project_id, 'user_id': user_id},
        microversion=placement_client.MICROVERSION, raise_exc=False))


def _checked(response):
    if response.status_code >= 400:
        raise AssertionError('%s %s: %d %s' % (
            response.request.method, response.request.url,
            response.status_code, response.text))
    return response


@pytest.fixture(scope='session')
def placement_schema_template(tmp_path_factory):
    """A SQLite file migrated once, copied for each test's Placement."""
    return migrate_schema(
        tmp_path_factory.mktemp('placement-schema') / 'template.sqlite')


@pytest.fixture
def placement(tmp_path, placement_schema_template):
    """A started ``PlacementService`` with an empty database."""
    service = PlacementService(tmp_path, placement_schema_template).start()
    yield service
    service.stop()


@pytest.fixture
def placement_url(placement):
    """The URL of ``placement`` served on 127.0.0.1, for other processes."""
    return placement.serve()
