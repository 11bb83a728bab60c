"""The conductor: its RPC endpoints and the service that serves them.

The endpoints are thin: ``HostSync`` (``host_sync.py``) does the work of
each call, the database diff and the Placement sync.

Each conductor heartbeats into the ``services`` table and sees the live
conductors as a hash ring (``membership.py``). Everything that changes a
host (its reports, its heartbeats' health, releases, deletions and
programming of its devices, its Placement sync) is done by its owner on
the ring alone, under the host's one lock (``HostSync.host_lock``). A
conductor that gets a report or a heartbeat for a host it does not own
passes it to the owner, once (a forwarded one is never forwarded again),
and writes nothing itself: a report the owner does not answer in
``FORWARD_TIMEOUT`` is refused (``NotOwner``) and the agent sends it
again. A report's answer names who handled it and the owner, so that the
agent sends the next one straight there. Calls about ARQs or deployables
of a host this conductor does not own are refused the same way; the API
sends them to the owner.
"""

import contextlib
import json
import time

from oslo_db import exception as db_exception
from oslo_log import log
import oslo_messaging as messaging
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg import rpc
from cyborg import service
from cyborg import version as cyborg_version
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.clients import placement as placement_client
from cyborg.conductor import binding
from cyborg.conductor import device_config
from cyborg.conductor import health as health_module
from cyborg.conductor import host_sync
from cyborg.conductor import membership as membership_mod
from cyborg.conductor import mig as mig_module
from cyborg.conductor import recovery
from cyborg.conductor import rpcapi
from cyborg.conductor import scrubber
from cyborg.db import session
from cyborg.db.api import arqs as arqs_db
from cyborg.db.api import device_config_status as config_db
from cyborg.metrics import conductor as conductor_metrics
from cyborg.metrics import endpoint as metrics_endpoint
from cyborg.notifications import notifier as notifier_module
from cyborg.objects import inventory as inventory_objects

LOG = log.getLogger(__name__)

# What a database that went away mid-run raises: oslo.db translates
# MySQL's errors to DBConnectionError, but lets psycopg2's "connection
# to server ... failed" through as SQLAlchemy's OperationalError.
DATABASE_DOWN = (db_exception.DBConnectionError, sa.exc.OperationalError)

# Seconds a conductor waits for a report's owner before refusing the
# report: well inside the agent's [agent] report_timeout (60 s).
FORWARD_TIMEOUT = 20


class NotOwner(exception.CyborgError):
    """This conductor does not own the host; its owner must do it."""

    status = 503
    code = 'cyborg.conductor.not_owner'


class ConductorManager:
    """RPC endpoints of ``rpcapi.ConductorAPI``.

    Each drops the arguments of a newer caller (``rpc.ignores_unknown_args``,
    next to the ``def``); the report is read at its payload version and
    the summaries answered carry ``rpcapi.SUMMARY``'s.
    """

    target = messaging.Target(version=rpcapi.VERSION)

    def __init__(self, sync, binder=None, membership=None, peers=None,
                 forward_timeout=FORWARD_TIMEOUT, metrics=None,
                 health=None):
        self.sync = sync
        self.metrics = (metrics if metrics is not None
                        else conductor_metrics.ConductorMetrics())
        self.binder = binder
        # The heartbeats' device health (health.py).
        self.health = health or health_module.DeviceHealth(sync, membership)
        # Without a membership (tests of one conductor) every report is
        # handled here; ``peers`` is the ConductorAPI to forward with.
        self.membership = membership
        self.peers = peers
        self.forward_timeout = forward_timeout

    # An outage of the database is expected now and then: the caller gets
    # the error and this log a one-line warning, not a traceback per call.
    # A report that cannot be read (exception.Invalid) goes back to the
    # agent with its reason; one whose owner did not take it (NotOwner)
    # is sent again by the agent.
    @messaging.expected_exceptions(exception.Invalid, NotOwner,
                                   *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def report_host_inventory(self, context, inventory,
                              compute_node_names=None, forwarded=False):
        started = time.monotonic()
        try:
            answer, outcome = self._report(context, inventory,
                                           compute_node_names, forwarded)
        except exception.Invalid:
            self.metrics.report('refused', started)
            raise
        except DATABASE_DOWN:
            self.metrics.report('database_down', started)
            raise
        except Exception:
            self.metrics.report('error', started)
            raise
        self.metrics.report(outcome,
                            None if outcome == 'forwarded' else started)
        return answer

    def _report(self, context, inventory, compute_node_names, forwarded):
        """(the answer, the outcome for the metrics)."""
        # Read first: a payload of an unknown major is refused here too.
        snapshot = inventory_objects.HostInventory.from_dict(inventory)
        hostname = snapshot.hostname
        # A 1.0 agent sends no names: its compute node is found under its
        # host name.
        names = compute_node_names or [hostname]
        owner = self._owner_of(hostname)
        if not self._owns(hostname):
            answer = None
            if not forwarded and self.peers is not None:
                answer = self._forward(context, inventory, names, owner)
            if answer is None:
                raise NotOwner(
                    'Conductor %s does not own host %s and its owner %s did '
                    'not take the report; send it again.'
                    % (self.membership.host, hostname, owner))
            return answer, 'forwarded'
        with _database_outage('the report of host %s' % hostname):
            summary = self.sync.report(context, snapshot, names)
            summary['bindings'] = host_bindings(context, hostname)
        counts = summary.get('counts', {})
        if counts.get('devices_added') or counts.get('devices_removed'):
            self.health.forget(hostname)
        summary['conductor'] = (self.membership.host
                                if self.membership is not None else None)
        summary['owner'] = owner
        return (rpcapi.SUMMARY.dump(summary),
                'changed' if summary.get('changed') else 'unchanged')

    def _owner_of(self, hostname):
        if self.membership is None:
            return None
        return self.membership.owner_of(hostname)

    def _owns(self, hostname):
        return self.membership is None or self.membership.owns(hostname)

    def _forward(self, context, inventory, names, owner):
        """The owner's answer to the report; None if it did not answer."""
        try:
            return self.peers.report_host_inventory(
                context, inventory, names, server=owner, forwarded=True,
                timeout=self.forward_timeout)
        except (messaging.MessagingTimeout,
                messaging.MessageDeliveryFailure) as exc:
            problem = service.describe_error(exc)
        except messaging.RemoteError as exc:
            if exc.exc_type != NotOwner.__name__:
                raise
            problem = 'it does not own the host either'
        LOG.warning('Conductor %s did not take the report of host %s (%s); '
                    'the agent sends it again', owner, inventory['hostname'],
                    problem)
        return None

    def _refuse_unless_owner(self, hostnames, what):
        """NotOwner unless this conductor owns every one of ``hostnames``:
        the API sends such calls to the owner, so a refusal means the
        ring moved meanwhile; the caller asks again."""
        foreign = sorted({h for h in hostnames
                          if h is not None and not self._owns(h)})
        if foreign:
            raise NotOwner(
                'Conductor %s does not own host %s; %s is left to its '
                'owner, ask again.' % (self.membership.host,
                                       ', '.join(foreign), what))

    @messaging.expected_exceptions(*DATABASE_DOWN)
    def agent_heartbeat(self, context, host, version=None, rpc_version=None,
                        health=None, usage=None, sent_at=None,
                        forwarded=False, **kwargs):
        # A cast: a newer agent may send more than this conductor reads;
        # the rest is ignored.
        if not self._owns(host):
            if not forwarded and self.peers is not None:
                self._forward_heartbeat(context, host, version, rpc_version,
                                        health, usage, sent_at)
            return
        with _database_outage('the heartbeat of agent %s' % host):
            self.health.heartbeat(context, host, version, rpc_version,
                                  health=health, usage=usage,
                                  sent_at=sent_at)

    def _forward_heartbeat(self, context, host, version, rpc_version,
                           health, usage, sent_at):
        """Pass a heartbeat to the host's owner (a cast), which alone
        writes the host; this conductor writes nothing of it."""
        owner = self._owner_of(host)
        try:
            self.peers.agent_heartbeat(
                context, host, version, rpc_version, server=owner,
                health=health, usage=usage, sent_at=sent_at, forwarded=True)
        except Exception as exc:
            LOG.warning('Could not pass the heartbeat of agent %s to '
                        'conductor %s, the owner of the host: %s', host,
                        owner, service.describe_error(exc))

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
                                   exception.Conflict, NotOwner,
                                   *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def unbind_arqs(self, context, arq_uuids):
        self._refuse_unless_owner(_arq_hosts(context, arq_uuids),
                                  'releasing the devices of ARQs %s'
                                  % ', '.join(arq_uuids))
        self.binder.unbind(context, arq_uuids)

    @messaging.expected_exceptions(binding.BindRefused, NotOwner,
                                   *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def finish_deleting_arqs(self, context, arq_uuids):
        self._refuse_unless_owner(_arq_hosts(context, arq_uuids),
                                  'deleting ARQs %s' % ', '.join(arq_uuids))
        self.binder.finish_deleting(context, arq_uuids)

    # Every refusal is a CyborgError with a sentence for the operator.
    @messaging.expected_exceptions(exception.CyborgError, *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def program_deployable(self, context, deployable_uuid, image_uuid):
        deployable = arqs_db.deployable_for_binding(context,
                                                    uuid=deployable_uuid)
        if deployable is not None:
            self._refuse_unless_owner([deployable.get('hostname')],
                                      'programming deployable %s'
                                      % deployable_uuid)
        return self.binder.program_deployable(context, deployable_uuid,
                                              image_uuid)

    # -- MIG instances after a host restart (1.5) -----------------------

    @messaging.expected_exceptions(*DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def mig_instances_of_host(self, context, host):
        # Read only: any conductor answers, the owner or not.
        with _database_outage('listing the MIG instances of host %s'
                              % host):
            rows = arqs_db.mig_instances_of_host(context, host)
        return [rpcapi.MIG_HELD.dump(
            _held(row, attach_details=row['attach_details']))
            for row in rows]

    # -- mdevs after a host restart (1.6) ---------------------------------

    @messaging.expected_exceptions(*DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def mdevs_of_host(self, context, host):
        # Read only: any conductor answers, the owner or not.
        with _database_outage('listing the mdevs of host %s' % host):
            rows = arqs_db.mdevs_of_host(context, host)
        return [rpcapi.MDEV_HELD.dump(_held(row)) for row in rows]

    # -- device configuration after a host restart (1.7) -----------------

    @messaging.expected_exceptions(*DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def applied_configs_of_host(self, context, host):
        # Read only: any conductor answers, the owner or not. Rows on
        # their way elsewhere (pending, draining, applying, failed) are
        # the rollout's to finish.
        with _database_outage('listing the applied device configuration '
                              'of host %s' % host), \
                context.db.read_connection(context) as connection:
            rows = config_db.work_of_hosts(connection, [host],
                                           (config_db.APPLIED,))
        return [rpcapi.CONFIG_APPLIED.dump({
            'device_uuid': row.device_uuid,
            'controlpath_info': row.controlpath_info,
            'kind': row.kind, 'applied_settings': row.applied_settings})
            for row in rows
            if row.controlpath_info is not None and not row.restoring
            and row.applied_settings is not None]

    @messaging.expected_exceptions(exception.Invalid, *DATABASE_DOWN)
    @rpc.ignores_unknown_args
    def record_mig_instance(self, context, arq_uuid, handle_uuid,
                            old_details, new_details):
        # A compare-and-set on the ARQ: any conductor may do it.
        old, new = _remade(old_details, new_details)
        with _database_outage('recording the MIG instance of ARQ %s'
                              % arq_uuid):
            kept = arqs_db.replace_attach_details(context, arq_uuid,
                                                  handle_uuid, old, new)
        if kept:
            LOG.info('ARQ %s: its MIG instance %s at start %s was made '
                     'again after its host restarted, now %s (was %s)',
                     arq_uuid, new['mig_profile'], new['start'],
                     new['mig_uuid'], old['mig_uuid'])
        else:
            LOG.info('ARQ %s is no longer Bound with MIG instance %s; the '
                     'instance made again for it is not kept', arq_uuid,
                     old['mig_uuid'])
        return kept


def _remade(old_details, new_details):
    """(old, new) details of a MIG instance made again: both complete,
    the new one at the old one's profile and start."""
    try:
        old = mig_module.kept_details(old_details)
        new = mig_module.kept_details(new_details)
    except ValueError as exc:
        raise exception.Invalid(str(exc))
    if (old['mig_profile'], old['start']) != (new['mig_profile'],
                                              new['start']):
        raise exception.Invalid(
            'A MIG instance is made again at its own profile and start: '
            '%s at %s, not %s at %s.' % (old['mig_profile'], old['start'],
                                         new['mig_profile'], new['start']))
    return old, new


def _arq_hosts(context, arq_uuids):
    """The hosts of the ARQs: one SELECT."""
    return {row['hostname'] for row in arqs_db.handles_of(
        context, uuids=list(arq_uuids))}


def host_bindings(context, hostname):
    """``{device address: [{"instance_uuid", "project_id"}, ...]}`` of
    the Bound accelerator requests on the host's devices, for the agent
    to label its metrics with; one SELECT."""
    bindings = {}
    for row in arqs_db.bound_on_host(context, hostname):
        address = inventory_objects.controlpath_address(
            row.cpid_type, json.loads(row.cpid_info))
        bindings.setdefault(address, []).append(
            {'instance_uuid': row.instance_uuid,
             'project_id': row.project_id})
    return bindings


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


class ConductorService(service.Service):
    """Waits for the database and RabbitMQ, then serves RPC.

    Placement is not waited for: binding needs none, reports are stored
    whatever its state, and the periodic passes (retry, reconciliation)
    sync it once it answers.

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
        self.membership = None
        # Callables run with (joined, left) when the live conductors
        # change, on the heartbeat's thread: the recovery of the hosts
        # this conductor took over starts there.
        self.ring_change_hooks = []
        # The recovery workers' PeriodicTasks: run at once when the ring
        # changes.
        self.recovery_workers = []
        # Kept across restarts (SIGHUP): counters do not start again.
        self.metrics = conductor_metrics.ConductorMetrics(
            metrics_endpoint.service_registry())
        self.metrics_endpoint = None

    def on_start(self):
        conf = self.conf
        check_timeouts(conf)
        self.metrics_endpoint = metrics_endpoint.serve(
            self, conf, conf.metrics.conductor_port, self.metrics.registry)
        db = self._shared_db
        if db is None:
            db = session.Database(conf)
            self.on_stop(db.dispose)
        self.wait_for('the database', lambda: check_database(db))
        # Not waited for: binds need no Placement, and the sync passes
        # below bring Placement up to date whenever it answers.
        placement = self._placement
        if placement is None:
            placement = placement_client.PlacementClient.from_conf(conf)
        placement.on_request = self.metrics.placement_request
        self.wait_for(service.describe_message_bus(conf),
                      lambda: service.check_message_bus(conf))
        if self.stopping:
            return
        transport = self._shared_transport
        if transport is None:
            transport = self.kept_transport(conf)
        context = cyborg_context.admin_context(db)
        self.membership = membership_mod.Membership(
            context, conf.host, conf.service_down_time)
        heartbeat = membership_mod.Heartbeat(
            context, self.membership, cyborg_version.package_version(),
            rpcapi.VERSION, self.ring_change_hooks)
        # In the ring before serving: the first reports and binds routed
        # here find this conductor among the live ones.
        self.wait_for('the first heartbeat', heartbeat.beat)
        if self.stopping:
            return
        notifier = notifier_module.Notifier(conf, notifier_module.CONDUCTOR)
        # Registered first, so run last: after the binds have stopped.
        self.on_stop(notifier.close)
        agent = agent_rpcapi.AgentAPI(
            transport, timeout=conf.conductor.agent_timeout,
            program_timeout=conf.conductor.agent_program_timeout,
            config_timeout=conf.conductor.agent_config_timeout,
            version_cap=conf.upgrade_levels.agent)
        binder = binding.Binder(
            conf, agent,
            nova=self._nova if self._nova is not None else _nova(conf),
            glance=(self._glance if self._glance is not None
                    else _glance(conf)),
            membership=self.membership, metrics=self.metrics,
            notifier=notifier)
        sync = host_sync.HostSync(placement,
                                  layout=conf.placement.provider_layout)
        binder.sync = sync
        health = health_module.DeviceHealth(
            sync, self.membership, conf.conductor.quarantine_hold_down,
            conf.service_down_time, notifier=notifier)
        self.manager = ConductorManager(
            sync, binder, self.membership,
            rpcapi.ConductorAPI(transport,
                                version_cap=conf.upgrade_levels.conductor),
            metrics=self.metrics, health=health)
        server = rpc.get_server(transport, rpc.CONDUCTOR_TOPIC, conf.host,
                                [self.manager], db=db)
        server.start()
        self.on_stop(service.stop_rpc_server, server)
        # Runs first on stop: binds cut short from then on stay
        # BindStarted for the next start instead of failing.
        self.on_stop(binder.stop)
        # One thread per kind of recovery work; the first runs resume the
        # binds this conductor owned when it last stopped.
        work = recovery.Recovery(binder, context, DATABASE_DOWN)
        self.on_stop(work.stop)
        self.recovery_workers = [
            self.add_periodic(name, conf.conductor.recovery_interval, func)
            for name, func in work.workers()]
        # A conductor that joined or left moves hosts: their binds are
        # taken over or failed now, not at the next recovery interval.
        self.ring_change_hooks[:] = [self._recover_now, health.forget_all]
        # The hosts this conductor owns on the ring: those behind the
        # database are synced again, and all are compared with Placement.
        self.add_periodic('placement-retry',
                          conf.conductor.sync_retry_interval,
                          _PlacementPass(sync.retry_pending, context,
                                         self.membership).run,
                          initial_delay=conf.conductor.sync_retry_interval)
        self.add_periodic('placement-reconcile',
                          conf.conductor.reconcile_interval,
                          _PlacementPass(sync.reconcile, context,
                                         self.membership).run)
        # Device configuration: drain, apply through the agent, release.
        rollout = device_config.Rollout(
            sync, agent, drain_hosts=conf.conductor.config_drain_hosts,
            notifier=notifier, binder=binder)
        self.add_periodic('device-config', conf.conductor.config_interval,
                          _PlacementPass(rollout.run_pass, context,
                                         self.membership).run)
        # Devices healthy for the hold-down leave their quarantine.
        self.add_periodic('quarantine-release',
                          min(conf.conductor.sync_retry_interval,
                              max(1, conf.conductor.quarantine_hold_down)),
                          _PlacementPass(health.release_quarantines,
                                         context, self.membership).run)
        # Released attach handles scrubbed before anyone gets them again.
        scrubbing = scrubber.Scrubber(conf, agent, health, sync, conf.host,
                                      metrics=self.metrics,
                                      notifier=notifier)
        self.add_periodic('scrub', conf.scrub.interval,
                          _PlacementPass(scrubbing.run_pass, context,
                                         self.membership).run)
        self.add_periodic('heartbeat', conf.heartbeat_interval,
                          _logged_outage(heartbeat.beat, 'the heartbeat'),
                          initial_delay=conf.heartbeat_interval)
        # Between heartbeats, a look at the moment a peer's heartbeat
        # expires: a dead conductor's hosts move without waiting for this
        # conductor's next beat.
        self.add_periodic('ring-watch', conf.heartbeat_interval,
                          _logged_outage(heartbeat.watch, 'the ring watch'),
                          initial_delay=conf.heartbeat_interval,
                          sooner=self.membership.seconds_to_expiry)

    def _recover_now(self, joined, left):
        for task in self.recovery_workers:
            task.run_now()


class TimeoutsDoNotFit(ValueError):
    """Timeouts of the configuration that contradict each other."""


def check_timeouts(conf):
    """A bind's deadline must outlast the agent calls one bind may make
    (one program and one prepare), or live binds are failed."""
    conductor = conf.conductor
    calls = conductor.agent_program_timeout + conductor.agent_timeout
    if conductor.bind_timeout <= calls:
        raise TimeoutsDoNotFit(
            '[conductor] bind_timeout (%d s) must be longer than the agent '
            'calls one bind may make: [conductor] agent_program_timeout '
            '(%d s) plus [conductor] agent_timeout (%d s) = %d s.'
            % (conductor.bind_timeout, conductor.agent_program_timeout,
               conductor.agent_timeout, calls))


def _logged_outage(func, what):
    """``func`` for a periodic task: a database outage is one warning."""
    def run():
        try:
            func()
        except DATABASE_DOWN as exc:
            LOG.warning('cyborg-conductor: %s waits for the database: %s',
                        what, service.describe_error(exc))
    return run


def _held(row, **extra):
    """What an agent is told of an ARQ that holds a handle on its host
    (a row of ``arqs_db.held_on_host``)."""
    return {'arq_uuid': row['uuid'], 'state': row['state'],
            'driver_name': row['driver_name'],
            'attach_handle': {'uuid': row['handle_uuid'],
                              'attach_type': row['attach_type'],
                              'attach_info': row['attach_info']},
            **extra}


class _PlacementPass:
    """A periodic Placement pass; a database outage waits for the next."""

    def __init__(self, func, context, owner):
        self.func = func
        self.context = context
        self.owner = owner

    def run(self):
        try:
            self.func(self.context, self.owner)
        except DATABASE_DOWN as exc:
            LOG.warning('cyborg-conductor: the Placement pass waits for the '
                        'database: %s', service.describe_error(exc))


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
