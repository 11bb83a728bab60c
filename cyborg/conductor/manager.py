"""The conductor: its RPC endpoints and the service that serves them.

The endpoints are thin: ``HostSync`` (``host_sync.py``) does the work of
each call, the database diff and the Placement sync.
"""

import contextlib

from oslo_db import exception as db_exception
from oslo_log import log
import oslo_messaging as messaging
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg import rpc
from cyborg import service
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.clients import placement as placement_client
from cyborg.conductor import binding
from cyborg.conductor import host_sync
from cyborg.conductor import rpcapi
from cyborg.db import session
from cyborg.objects import inventory as inventory_objects

LOG = log.getLogger(__name__)

# What a database that went away mid-run raises: oslo.db translates
# MySQL's errors to DBConnectionError, but lets psycopg2's "connection
# to server ... failed" through as SQLAlchemy's OperationalError.
DATABASE_DOWN = (db_exception.DBConnectionError, sa.exc.OperationalError)


class ConductorManager:
    """RPC endpoints of ``rpcapi.ConductorAPI``.

    Each drops the arguments of a newer caller (``rpc.ignores_unknown_args``,
    next to the ``def``); the report is read at its payload version and
    the summaries answered carry ``rpcapi.SUMMARY``'s.
    """

    target = messaging.Target(version=rpcapi.VERSION)

    def __init__(self, sync, binder=None):
        self.sync = sync
        self.binder = binder

    # An outage of the database is expected now and then: the caller gets
    # the error and this log a one-line warning, not a traceback per call.
    # A report that cannot be read (exception.Invalid) goes back to the
    # agent with its reason.
    @messaging.expected_exceptions(exception.Invalid, *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def report_host_inventory(self, context, inventory,
                              compute_node_names=None):
        snapshot = inventory_objects.HostInventory.from_dict(inventory)
        # A 1.0 agent sends no names: its compute node is found under its
        # host name.
        names = compute_node_names or [snapshot.hostname]
        with _database_outage('the report of host %s' % snapshot.hostname):
            return rpcapi.SUMMARY.dump(
                self.sync.report(context, snapshot, names))

    @messaging.expected_exceptions(*DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def set_device_status(self, context, device_uuid, status):
        with _database_outage('setting device %s %s' % (device_uuid,
                                                          status)):
            return rpcapi.SUMMARY.dump(
                self.sync.set_device_status(context, device_uuid, status))


    # -- accelerator requests (1.2) -----------------------------------

    @rpc.ignores_unknown_args
    def bind_arqs(self, context, arq_uuids):
        # A cast: nobody waits for the answer, so every failure is logged
        # here; the ARQs left BindStarted are failed by recovery.
        try:
            self.binder.bind(context, arq_uuids)
        except Exception:
            LOG.exception('Binding ARQs %s stopped half way; recovery will '
                          'finish or fail them', ', '.join(arq_uuids))

    @messaging.expected_exceptions(binding.BindRefused, exception.NotFound,
                                   exception.Conflict, *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def unbind_arqs(self, context, arq_uuids):
        self.binder.unbind(context, arq_uuids)

    @messaging.expected_exceptions(binding.BindRefused, *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def finish_deleting_arqs(self, context, arq_uuids):
        self.binder.finish_deleting(context, arq_uuids)

    # Every refusal is a CyborgError with a sentence for the operator.
    @messaging.expected_exceptions(exception.CyborgError, *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def program_deployable(self, context, deployable_uuid, image_uuid):
        return self.binder.program_deployable(context, deployable_uuid,
                                              image_uuid)


@contextlib.contextmanager
def _database_outage(what):
    """Say plainly that the database is down; the caller gets the error
    and tries again (an agent at its next report)."""
    try:
        yield
    except DATABASE_DOWN as exc:
        LOG.warning('cyborg-conductor: waiting for the database: %s failed: '
                    '%s', what, service.describe_error(exc))
        raise


def check_database(db):
    with db.engine.connect() as connection:
        connection.execute(sa.text('SELECT 1'))


def check_placement(client):
    # Any authenticated read proves the endpoint and the credentials.
    client.find_provider_by_name('cyborg-conductor-reachability-check')


class ConductorService(service.Service):
    """Waits for the database, Placement and RabbitMQ, then serves RPC.

    ``transport``, ``db`` and ``placement`` are shared when given (the
    single-machine mode); otherwise they are made from ``conf`` and
    released on stop.
    """

    def __init__(self, conf, transport=None, db=None, placement=None,
                 nova=None, glance=None):
        super().__init__('cyborg-conductor', conf.conductor.retry_interval)
        self.conf = conf
        self._shared_transport = transport
        self._shared_db = db
        self._placement = placement
        self._nova = nova
        self._glance = glance
        self.manager = None

    def on_start(self):
        conf = self.conf
        db = self._shared_db
        if db is None:
            db = session.Database(conf)
            self.on_stop(db.dispose)
        self.wait_for('the database', lambda: check_database(db))
        placement = self._placement
        if placement is None:
            placement = placement_client.PlacementClient.from_conf(conf)
        self.wait_for('Placement', lambda: check_placement(placement))
        self.wait_for(service.describe_message_bus(conf),
                      lambda: service.check_message_bus(conf))
        if self.stopping:
            return
        transport = self._shared_transport
        if transport is None:
            transport = self.kept_transport(conf)
        binder = binding.Binder(
            conf,
            agent_rpcapi.AgentAPI(transport,
                                  timeout=conf.conductor.agent_timeout,
                                  version_cap=conf.upgrade_levels.agent),
            nova=self._nova if self._nova is not None else _nova(conf),
            glance=(self._glance if self._glance is not None
                    else _glance(conf)))
        self.manager = ConductorManager(host_sync.HostSync(placement),
                                        binder)
        server = rpc.get_server(transport, rpc.CONDUCTOR_TOPIC, conf.host,
                                [self.manager], db=db)
        server.start()
        self.on_stop(service.stop_rpc_server, server)
        # Runs first on stop: binds cut short from then on stay
        # BindStarted for the next start instead of failing.
        self.on_stop(binder.stop)
        context = cyborg_context.admin_context(db)
        # Binds this conductor owned when it last stopped come first; then
        # a periodic pass fails those of conductors that died.
        self.add_periodic('bind-recovery', conf.conductor.recovery_interval,
                          _Recovery(binder, context).run)


class _Recovery:
    """The periodic pass: resume this conductor's abandoned binds, then
    recover what other conductors left."""

    def __init__(self, binder, context):
        self.binder = binder
        self.context = context

    def run(self):
        try:
            self.binder.resume(self.context)
            self.binder.recover(self.context)
        except DATABASE_DOWN as exc:
            LOG.warning('cyborg-conductor: recovery waits for the database: '
                        '%s', service.describe_error(exc))


def _nova(conf):
    from cyborg.clients import nova
    client = nova.NovaClient.from_conf(conf)
    if client is None:
        LOG.info('No [nova] endpoint or credentials: bound accelerator '
                 'requests are not announced to a compute service')
    return client


def _glance(conf):
    from cyborg.clients import glance
    return glance.GlanceClient.from_conf(conf)
