"""A fleet of Cyborg services, each a real process, and what it did.

Builds on the ``deployment`` fixture of ``conftest.py`` (its database,
RabbitMQ virtual host and Placement): ``Fleet`` runs several
``cyborg-conductor`` processes, one ``cyborg-agent`` per compute host
(each with its own ``[DEFAULT] host`` and the fake driver's FPGA, and a
compute node provider in Placement named after the host, as Nova makes
it) and the REST API under gunicorn.

Every service reaches Placement through the deployment's Placement
``TCPGate``, so that a test can cut Placement off from all of Cyborg;
RabbitMQ and the database are reached directly (a gate pumps every byte
through the test process, which the load would slow down).

Intervals are seconds, not minutes, so that heartbeats, takeovers,
retries and reconciliation all happen many times in a short run.

The checks read the database, the services' logs and Placement:

- ``bind_failures``: why each ARQ failed to bind. BindFailed rows keep
  no reason, so it comes from the conductors' log lines (``failed to
  bind: <reason>``, ``bind did not finish within``);
- ``placement_differences``: Placement's providers, inventories (with
  ``reserved``) and traits of each host against what the database wants,
  computed by the conductor's own ``host_deployables`` and
  ``desired_providers`` and compared as its sync compares them.
"""

import collections
import re
import threading
import time

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.clients import placement as placement_client
from cyborg.conductor import inventory as inventory_sync
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.db import session as db_session
from tests.conftest import make_conf
from tests.functional.services import arq_services
from tests.functional.services.conftest import ServiceProcess
from tests.placement_service import create_compute_node

ARQ = models.ExtendedAcceleratorRequest
Handle = models.AttachHandle

# The timings of the whole fleet, in seconds.
HEARTBEAT_INTERVAL = 1
AGENT_HEARTBEAT_INTERVAL = 2
SERVICE_DOWN_TIME = 5
REPORT_INTERVAL = 2
RECOVERY_INTERVAL = 1
SYNC_RETRY_INTERVAL = 2
RECONCILE_INTERVAL = 4
# A dead conductor's binds are taken over once its heartbeat is
# SERVICE_DOWN_TIME old; their deadline must come well after that, or
# they would be failed instead of finished.
BIND_TIMEOUT = 20
AGENT_TIMEOUT = 3
AGENT_PROGRAM_TIMEOUT = 5
PROGRAM_TOOL_TIMEOUT = 4
NOVA_TIMEOUT = 5
NOVA_EVENT_RETRY_AFTER = 2 * NOVA_TIMEOUT + 5
API_CONDUCTOR_TIMEOUT = 5

# Why a bind may fail in a healthy fleet.
NO_FREE_HANDLE = 'no free handle'
DEAD_HOST = 'dead host'
# Log lines of a conductor about a failed bind.
_FAILED = re.compile(r'ARQ (\S+) of instance \S+ failed to bind: (.*)$',
                     re.M)
_OVERDUE = re.compile(r'ARQ (\S+) of instance \S+: bind did not finish '
                      r'within \d+ s; failed', re.M)
# What a bind that needed an unreachable agent says (an RPC timeout).
_AGENT_GONE = ('MessagingTimeout', 'did not answer', 'No reply')


def classify(reason):
    """The kind of a bind failure's reason."""
    if reason.startswith('Every attach handle of deployable'):
        return NO_FREE_HANDLE
    if any(marker in reason for marker in _AGENT_GONE):
        return DEAD_HOST
    return reason


class Fleet:
    """Conductors, agents and the API of one deployment."""

    def __init__(self, deployment, nova, hosts, conductors):
        self.deployment = deployment
        self.nova = nova
        suffix = deployment.host.split('-')[-1]
        self.hosts = ['fleet-%02d-%s' % (index, suffix)
                      for index in range(hosts)]
        self.placement_endpoint = 'http://%s' % (
            deployment.gates['placement'].address)
        self.conductors = [self._conductor('conductor-%s-%s' % (
            chr(ord('a') + index), suffix)) for index in range(conductors)]
        self.agents = {host: self._agent(host) for host in self.hosts}
        self.api = arq_services.APIServer(deployment, workers=2)
        # The API's configuration, with the fleet's timings.
        self.api.config_file.write_text(self._common(
            self.api.log_file, 'cyborg-api') + '[api]\n'
            'conductor_timeout = %d\n' % API_CONDUCTOR_TIMEOUT)
        self.conf = make_conf(deployment.db_url)
        self.db = db_session.Database(self.conf)
        self.context = cyborg_context.admin_context(self.db)
        self.placement = deployment.placement.client()
        for host in self.hosts:
            create_compute_node(deployment.placement.adapter(), host)

    # -- the processes -----------------------------------------------------

    def _common(self, log_file, host, heartbeat=HEARTBEAT_INTERVAL):
        return arq_services.common_config(
            self.deployment, log_file, host,
            default=['heartbeat_interval = %d' % heartbeat,
                     'service_down_time = %d' % SERVICE_DOWN_TIME],
            placement=self.placement_endpoint,
            placement_timeout=5) + '\n'.join([
            '[oslo_messaging_rabbit]',
            'rabbit_retry_interval = 1',
            'rabbit_retry_backoff = 1',
            'rabbit_interval_max = 2',
            'kombu_reconnect_delay = 0.5',
            '[conductor]',
            'retry_interval = 1',
            'recovery_interval = %d' % RECOVERY_INTERVAL,
            'recovery_max_backoff = %d' % (4 * RECOVERY_INTERVAL),
            'sync_retry_interval = %d' % SYNC_RETRY_INTERVAL,
            'reconcile_interval = %d' % RECONCILE_INTERVAL,
            'bind_timeout = %d' % BIND_TIMEOUT,
            'agent_timeout = %d' % AGENT_TIMEOUT,
            'agent_program_timeout = %d' % AGENT_PROGRAM_TIMEOUT,
            'nova_event_retry_after = %d' % NOVA_EVENT_RETRY_AFTER,
            '',
        ])

    def _conductor(self, name):
        directory = self.deployment.directory / name
        directory.mkdir()
        # One notification (its tries and the waits between them) must
        # end before nova_event_retry_after, or recovery sends it again
        # while the first sender still waits for Nova's answer.
        config = self._common(directory / 'cyborg-conductor.log',
                              name) + self.nova.conf_section() + (
            'timeout = %d\nevent_retries = 1\nevent_retry_interval = 1\n'
            % NOVA_TIMEOUT)
        return ServiceProcess('cyborg-conductor', directory, config)

    def _agent(self, host):
        directory = self.deployment.directory / host
        directory.mkdir()
        config = self._common(
            directory / 'cyborg-agent.log', host,
            heartbeat=AGENT_HEARTBEAT_INTERVAL) + '\n'.join([
                '[agent]',
                # Health and usage, within the shortened service_down_time.
                'heartbeat_interval = %d' % AGENT_HEARTBEAT_INTERVAL,
                'enabled_drivers = fake_driver',
                'report_interval = %d' % REPORT_INTERVAL,
                'report_timeout = 10',
                'retry_interval = 1',
                'program_tool_timeout = %d' % PROGRAM_TOOL_TIMEOUT,
                '',
            ])
        return ServiceProcess('cyborg-agent', directory, config)

    @property
    def processes(self):
        return [*self.conductors, *self.agents.values()]

    def start(self, timeout=120):
        for conductor in self.conductors:
            conductor.start()
        # The API boots meanwhile: on two cores, starting a dozen Python
        # processes one after another would take minutes.
        api_failed = []

        def start_api():
            try:
                self.api.start(timeout=timeout)
            except AssertionError as exc:
                api_failed.append(exc)

        api_thread = threading.Thread(target=start_api, name='api-start')
        api_thread.start()
        # An agent's first report must find a conductor's queue.
        for conductor in self.conductors:
            conductor.wait_for_log(r'cyborg-conductor started',
                                   timeout=timeout)
        for agent in self.agents.values():
            agent.start()
        api_thread.join(timeout)
        assert not api_thread.is_alive() and not api_failed, api_failed

    def stop(self):
        self.api.stop()
        for process in self.processes:
            process.kill()
        self.db.dispose()

    def check_alive(self):
        for process in [*self.processes, self.api]:
            assert process.alive, '%s exited:\n%s' % (process.name,
                                                      process.tail())

    # -- the database ------------------------------------------------------

    def query(self, statement):
        with self.deployment.db_engine.connect() as connection:
            return connection.execute(statement).all()

    def devices(self):
        """{host: device uuid} of the fleet's FPGAs."""
        devices = models.Device.__table__
        return dict(self.query(sa.select(devices.c.hostname,
                                         devices.c.uuid)))

    def arq_rows(self):
        return {row.uuid: row for row in self.query(sa.select(
            ARQ.uuid, ARQ.state, ARQ.instance_uuid, ARQ.hostname,
            ARQ.attach_handle_id, ARQ.nova_event_pending))}

    def handles_in_use(self):
        return {row[0] for row in self.query(
            sa.select(Handle.id).where(Handle.in_use == sa.true()))}

    def hosts_behind(self):
        """Hosts whose Placement sync is behind the database."""
        state = models.HostSyncState
        return sorted(row[0] for row in self.query(
            sa.select(state.hostname).where(
                state.synced_generation != state.desired_generation)))

    def wait_until_reported(self, timeout=120):
        """Wait until every host's FPGA is in the DB and in Placement."""
        deadline = time.monotonic() + timeout
        while True:
            # The cheap checks first: the comparison with Placement costs
            # the test process (which serves Placement) a second or so.
            if (set(self.devices()) >= set(self.hosts)
                    and not self.hosts_behind()
                    and not self.placement_differences()):
                return
            self.check_alive()
            assert time.monotonic() < deadline, (
                'the fleet did not report within %d s: devices of %s; %s'
                % (timeout, sorted(self.devices()),
                   self.placement_differences()))
            time.sleep(1)

    # -- Placement ---------------------------------------------------------

    def provider_name(self, host):
        return placement_sync.provider_name(host, fake.DEPLOYABLE_NAME)

    def provider_uuid(self, host):
        return placement_sync.provider_uuid(self.provider_name(host))

    def placement_differences(self):
        """{host: [what differs]} between Placement and what the database
        wants of each host's providers; empty when they are equal."""
        differences = {}
        for host in self.hosts:
            deployables = inventory_sync.host_deployables(self.context, host)
            desired = {p.name: p for p in placement_sync.desired_providers(
                host, deployables,
                disabled=[d.name for d in deployables if d.reserved_fully])}
            found = self._providers_of(host)
            wrong = []
            for name in sorted(set(desired) | set(found)):
                want, have = desired.get(name), found.get(name)
                if want is None or have is None:
                    wrong.append('%s: %s' % (name, 'not wanted'
                                             if want is None else 'missing'))
                    continue
                uuid, inventories, traits = have
                if uuid != want.uuid:
                    wrong.append('%s: uuid %s, not %s' % (name, uuid,
                                                          want.uuid))
                if not placement_sync._same_inventories(inventories,
                                                        want.inventories):
                    wrong.append('%s: inventories %s, not %s' % (
                        name, inventories, want.inventories))
                if traits != want.traits:
                    wrong.append('%s: traits %s, not %s' % (
                        name, sorted(traits), sorted(want.traits)))
            if wrong:
                differences[host] = wrong
        return differences

    def _providers_of(self, host):
        """{name: (uuid, inventories, traits)} of the compute node's
        children in Placement."""
        compute = self.placement.find_provider_by_name(host)
        found = {}
        for rp in self.placement.providers_in_tree(compute['uuid']):
            if rp['parent_provider_uuid'] != compute['uuid']:
                continue
            _, inventories = self.placement.get_inventories(rp['uuid'])
            _, traits = self.placement.get_traits(rp['uuid'])
            found[rp['name']] = (rp['uuid'], inventories, frozenset(traits))
        return found

    def reserved(self, host):
        """The FPGA inventory's ``reserved`` of the host's provider in
        Placement (None if it has none)."""
        try:
            _, inventories = self.placement.get_inventories(
                self.provider_uuid(host))
        except placement_client.NotFound:
            return None
        return inventories.get('FPGA', {}).get('reserved')

    def delete_provider(self, host):
        """Delete the host's FPGA provider behind Cyborg's back."""
        self.placement.delete_provider(self.provider_uuid(host))

    def schedulable(self):
        """{host: provider uuid} of the FPGAs with two free units, as
        Placement's scheduler sees them (the test makes no allocations,
        so only ``reserved`` takes units away)."""
        answer = self.deployment.placement.adapter().get(
            '/resource_providers?resources=FPGA:2&required=%s'
            % fake.TRAIT, microversion=placement_client.MICROVERSION,
            raise_exc=False)
        assert answer.status_code == 200, answer.text
        by_name = {self.provider_name(host): host for host in self.hosts}
        return {by_name[rp['name']]: rp['uuid']
                for rp in answer.json()['resource_providers']
                if rp['name'] in by_name}

    # -- the logs ----------------------------------------------------------

    def bind_failures(self):
        """{ARQ uuid: [reason, ...]} from every conductor's log."""
        reasons = collections.defaultdict(list)
        for conductor in self.conductors:
            log = conductor.log()
            for arq, reason in _FAILED.findall(log):
                reasons[arq].append(reason.strip())
            for arq in _OVERDUE.findall(log):
                reasons[arq].append('bind did not finish within %d s'
                                    % BIND_TIMEOUT)
        return dict(reasons)

    def tracebacks(self):
        """{log file: count} of the logs holding a traceback."""
        found = {}
        for process in [*self.processes, self.api]:
            count = process.log().count('Traceback')
            if count:
                found[str(process.log_file)] = count
        return found
