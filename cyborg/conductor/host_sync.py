"""A host's report, from the agent's snapshot to the database and Placement.

``HostSync`` is the conductor's one object for inventory: it applies a
report to the database (``inventory.apply_host_inventory``) and then
makes the host's resource providers in Placement match the database.

The database holds the desired state and whether Placement follows it
(``cyborg.db.api.host_sync_states``): every change of a host's rows bumps
its desired generation in the same transaction, and a sync records the
generation it made Placement hold. So whichever conductor process looks
next, restarted or not, knows whether a host needs a sync; nothing about
it lives only in one process's memory.

- A report that changed nothing, of a host in sync, costs the three
  SELECTs of the diff, one SELECT of the sync state and no HTTP call.
- When Placement cannot be reached the database still takes the change,
  the answer says so, and the host stays behind (synced < desired): its
  next report, an enable/disable, or the conductor's retry pass syncs it.
- ``reconcile`` is the periodic pass that catches what the generations
  cannot see: changes made in Placement behind Cyborg's back (a provider
  deleted, an inventory or trait edited). For each host this conductor
  owns it compares the provider tree in Placement with the database and
  repairs any difference, one log line per repaired provider. Placement
  reads per host: one ``in_tree`` listing when the process's
  ``ProviderTreeCache`` holds each provider at the generation the listing
  shows (Placement bumps a provider's generation on every change of its
  inventories or traits, so an equal generation is an equal state);
  otherwise two more per provider (inventories, traits), plus one
  (usages) per provider to retire, plus one to find the compute node the
  first time this process handles the host.

Resource providers kept because allocations still use them leave the
host behind, so they are retried the same way.
"""

import dataclasses
import logging
import threading

from keystoneauth1 import exceptions as ks_exceptions

from cyborg import exception
from cyborg.clients import placement
from cyborg.conductor import inventory as inventory_sync
from cyborg.conductor import membership as membership_module
from cyborg.conductor import placement_sync
from cyborg.conductor import reshape
from cyborg.db.api import devices as devices_db
from cyborg.db.api import host_sync_states as states_db
from cyborg.db.api import inventory as inventory_db
from cyborg.objects.inventory import HostInventory

LOG = logging.getLogger(__name__)

# What means "Placement is not answering" rather than "Placement refused".
UNREACHABLE = (ks_exceptions.ConnectionError, ks_exceptions.RequestTimeout)

# Outcomes after which Placement holds what the database wants for the
# host (no compute node: the host has no providers to hold anything).
_APPLIED = ('synced', 'skipped', 'no_compute_node')

# Syncs of one host in a row that may meet a newer state in Placement
# before one gives up until the next pass.
SYNC_ATTEMPTS = 3


def placement_updated(outcome):
    """Whether Placement holds the database's state for the host's
    devices after a sync with this ``outcome`` (kept providers of
    removed devices are fully reserved, so they do not count)."""
    return outcome['status'] in _APPLIED or (
        outcome['status'] == 'partial' and not outcome['failed'])


@dataclasses.dataclass
class _HostState:
    """What this process keeps of one host to save work; none of it
    decides whether Placement needs a sync (the database does)."""

    # The host's one lock in this conductor: reports, syncs and the
    # heartbeats' health writes (``DeviceHealth``) of the host take it.
    lock: threading.RLock = dataclasses.field(
        default_factory=threading.RLock)
    compute_node: placement_sync.ComputeNode | None = None
    compute_node_names: tuple = ()
    cache: placement_sync.ProviderTreeCache = dataclasses.field(
        default_factory=placement_sync.ProviderTreeCache)
    # Deployables that the host stopped reporting while in use (only a
    # report tells; see ``inventory.host_deployables``).
    missing_ids: frozenset = frozenset()


class HostSync:
    def __init__(self, client, layout=placement_sync.PER_DEVICE):
        self.client = client
        # ``[placement] provider_layout``: a change moves each host's
        # allocations at its next sync (``reshape``).
        self.layout = layout
        self._hosts = {}
        self._hosts_lock = threading.Lock()

    def _host(self, hostname):
        with self._hosts_lock:
            return self._hosts.setdefault(hostname, _HostState())

    def host_lock(self, hostname):
        """The lock that serialises this conductor's work on the host."""
        return self._host(hostname).lock

    def report(self, context, inventory, compute_node_names):
        """Apply an agent's report, then sync the host's providers.

        ``inventory`` is a ``HostInventory`` or its ``to_dict``;
        ``compute_node_names`` are the names Nova may have given the
        host's compute node, in the order to try them (configured name,
        FQDN, short name). Returns a summary dict.
        """
        if isinstance(inventory, dict):
            inventory = HostInventory.from_dict(inventory)
        changes = inventory_sync.apply_host_inventory(context, inventory)
        host = self._host(inventory.hostname)
        with host.lock:
            host.compute_node_names = tuple(compute_node_names)
            # No row marks a deployable kept while in use: a change of
            # that set needs a sync although the database did not change.
            force = changes.missing_ids != host.missing_ids
            host.missing_ids = changes.missing_ids
            outcome = self._sync_if_behind(context, inventory.hostname,
                                           host, force)
        summary = changes.to_dict()
        summary['placement'] = outcome
        summary['placement_synced'] = outcome['status'] in ('skipped',
                                                            'synced')
        return summary

    def set_device_status(self, context, device_uuid, status,
                          compute_node_names=None):
        """Enable (``enabled``) or disable (``maintaining``) a device.

        A disabled device keeps its providers with their whole inventory
        reserved: existing allocations stay valid and nothing new is
        scheduled there. The API may have written the status already;
        then this call only syncs the host if it is behind. Returns a
        summary dict; ``placement_updated`` says whether Placement holds
        the device's status now.
        """
        if status not in inventory_sync.DEVICE_STATUSES:
            raise exception.Invalid(
                'Device status must be one of %s, not %r.'
                % (', '.join(inventory_sync.DEVICE_STATUSES), status))
        hostname, changed = devices_db.set_status(context, device_uuid,
                                                  status)
        outcome = self.sync_host(context, hostname, compute_node_names)
        return {'device_uuid': device_uuid, 'hostname': hostname,
                'status': status, 'changed': changed,
                'placement': outcome,
                'placement_synced': outcome['status'] in ('skipped',
                                                          'synced'),
                'placement_updated': placement_updated(outcome)}

    def sync_host(self, context, hostname, compute_node_names=None):
        """Sync the host's providers unless the database says Placement
        holds its state, under the host's lock: after a write that bumped
        the host's desired generation (a device enabled or disabled,
        quarantined or released). Returns the sync's outcome."""
        host = self._host(hostname)
        with host.lock:
            if compute_node_names:
                host.compute_node_names = tuple(compute_node_names)
            return self._sync_if_behind(context, hostname, host)

    # -- the periodic passes ----------------------------------------------

    def retry_pending(self, context, membership=None):
        """Sync the hosts this conductor owns whose Placement sync is
        behind the database (one SELECT when none is). Returns
        ``{hostname: outcome}``."""
        with context.db.read_connection(context) as connection:
            hostnames = states_db.pending_hosts(connection)
        return self._pass(context, hostnames, membership, full=False)

    def reconcile(self, context, membership=None):
        """Compare every owned host's providers in Placement with the
        database and repair what differs; hosts behind are synced too.
        Returns ``{hostname: outcome}``."""
        with context.db.read_connection(context) as connection:
            hostnames = sorted(states_db.list_hosts(connection))
        return self._pass(context, hostnames, membership, full=True)

    def _pass(self, context, hostnames, membership, full):
        membership = membership or membership_module.SoleMembership(None)
        outcomes = {}
        for hostname in hostnames:
            if not membership.owns(hostname):
                continue
            host = self._host(hostname)
            with host.lock:
                with context.db.read_connection(context) as connection:
                    state = states_db.read(connection, hostname)
                behind = not states_db.in_sync(state)
                if not (full or behind):
                    continue  # synced by a report meanwhile
                if not host.compute_node_names:
                    # No report seen by this process: the agent's host
                    # name is the best guess at the compute node's.
                    host.compute_node_names = (hostname,)
                outcome = self._sync(context, hostname, host, state)
            outcomes[hostname] = outcome
            if outcome['status'] == 'unreachable':
                LOG.warning('Placement unreachable: the %s pass stops at '
                            'host %s and starts again at its next run',
                            'reconciliation' if full else 'retry',
                            hostname)
                break
            if behind and placement_updated(outcome):
                LOG.info('Host %s: Placement now holds the changes that '
                         'were pending (generation %d)', hostname,
                         state.desired_generation if state else 1)
            elif outcome.get('relaid_out'):
                LOG.info('Host %s: providers laid out %s now: created %s, '
                         'deleted %s, allocations moved off %s', hostname,
                         self.layout, outcome['created'],
                         outcome['deleted'], outcome['reshaped'])
            elif not behind:
                _log_repairs(hostname, outcome)
        return outcomes

    # -- one host ---------------------------------------------------------

    def _sync_if_behind(self, context, hostname, host, force=False):
        """Sync unless the database says Placement holds its state.

        Called with ``host.lock`` held.
        """
        with context.db.read_connection(context) as connection:
            state = states_db.read(connection, hostname)
        if states_db.in_sync(state) and not force:
            return {'status': 'skipped'}
        if not host.compute_node_names:
            host.compute_node_names = (hostname,)
        return self._sync(context, hostname, host, state)

    def _sync(self, context, hostname, host, state):
        """Make Placement hold the host's deployables as the DB has them.

        Called with ``host.lock`` held. The desired generation is read
        before the rows: a change committed after that read leaves the
        host behind, so it is synced again later. A sync that finds a
        newer state than its own in Placement (a generation conflict, or
        a synced generation past its own once it is done) reads the
        database again and starts over, at most ``SYNC_ATTEMPTS`` times:
        it never leaves its older target over a newer one.
        """
        for attempt in range(1, SYNC_ATTEMPTS + 1):
            outcome = self._sync_once(context, hostname, host, state)
            if outcome is not None:
                return outcome
            LOG.info('Host %s: Placement changed under its sync; reading '
                     'the database again (attempt %d of %d)', hostname,
                     attempt, SYNC_ATTEMPTS)
            state = None
        error = ('other writers kept changing the providers of the host '
                 'during %d syncs' % SYNC_ATTEMPTS)
        self._record_error(context, hostname, error)
        return {'status': 'failed', 'error': error}

    def _sync_once(self, context, hostname, host, state):
        """The outcome; None when a newer state than this sync's was met
        in Placement (``state`` None: read it)."""
        if state is None:
            with context.db.read_connection(context) as connection:
                state = states_db.read(connection, hostname)
        if state is None:
            with context.db.writer(context) as session:
                state = states_db.ensure(session.connection(), hostname)
        generation = state.desired_generation
        deployables = inventory_sync.host_deployables(
            context, hostname, missing_ids=host.missing_ids)
        desired = placement_sync.desired_providers(
            hostname, deployables,
            disabled=[d.name for d in deployables if d.reserved_fully],
            layout=self.layout)
        moves = reshape.plan_moves(desired, deployables)
        try:
            result = self._sync_tree(
                hostname, host, desired, state.compute_node_uuid, moves,
                _holders(context, hostname) if moves else None)
        except placement_sync.TargetOutdated:
            return None
        except placement_sync.ComputeNodeNotFound as exc:
            LOG.warning('Host %s: %s', hostname, exc)
            self._record_error(context, hostname, exc)
            return {'status': 'no_compute_node', 'error': str(exc)}
        except UNREACHABLE as exc:
            LOG.warning('Host %s: Placement unreachable, will retry: %s',
                        hostname, exc)
            self._record_error(context, hostname, exc)
            return {'status': 'unreachable', 'error': str(exc)}
        except placement.PlacementError as exc:
            LOG.warning('Host %s: Placement sync failed, will retry: %s',
                        hostname, exc)
            self._record_error(context, hostname, exc)
            return {'status': 'failed', 'error': str(exc)}

        self._record_provider_uuids(context, deployables, desired, result)
        complete = not (result.failed or result.kept)
        with context.db.writer(context) as session:
            connection = session.connection()
            if complete:
                overtaken = not states_db.record_synced(
                    connection, hostname, generation,
                    host.compute_node.uuid) and states_db.read(
                        connection, hostname).synced_generation > generation
            else:
                overtaken = False
                states_db.record_compute_node(connection, hostname,
                                              host.compute_node.uuid)
                states_db.record_error(connection, hostname, 'kept %s; '
                                       'failed %s' % (result.kept,
                                                      result.failed))
        if overtaken:
            # A newer state was synced while this one was written: ours
            # may lie over it in Placement.
            host.cache = placement_sync.ProviderTreeCache()
            return None
        if not complete:
            LOG.info('Host %s: providers kept %s, failed %s; retried later',
                     hostname, result.kept, result.failed)
        return {'status': 'synced' if complete else 'partial',
                'compute_node': host.compute_node.matched_name,
                'created': result.created, 'updated': result.updated,
                'deleted': result.deleted, 'kept': result.kept,
                'reshaped': result.reshaped,
                # Deployables changed provider: the layout did, not drift.
                'relaid_out': bool(moves),
                'failed': result.failed, 'reads': result.reads,
                'writes': result.writes}

    def _record_error(self, context, hostname, error):
        with context.db.writer(context) as session:
            states_db.record_error(session.connection(), hostname, error)

    def _sync_tree(self, hostname, host, desired, known_uuid=None,
                   moves=None, holders=None):
        for attempt in range(2):
            if host.compute_node is None and known_uuid and not attempt:
                # Found earlier, maybe by another conductor: one GET.
                provider = self.client.get_provider(known_uuid)
                if provider is not None:
                    host.compute_node = placement_sync.ComputeNode(
                        provider, provider['name'], (provider['name'],))
            if host.compute_node is None:
                host.compute_node = placement_sync.find_compute_node(
                    self.client, host.compute_node_names)
                LOG.info('Host %s: compute node resource provider %s found '
                         'by the name %r (names tried: %s)', hostname,
                         host.compute_node.uuid,
                         host.compute_node.matched_name,
                         ', '.join(host.compute_node.names_tried))
            try:
                return placement_sync.sync_provider_tree(
                    self.client, host.compute_node, desired, host.cache,
                    moves=moves, holders=holders)
            except placement_sync.ComputeNodeGone:
                # Nova recreated the compute node (new UUID): look again.
                host.compute_node = None
                host.cache = placement_sync.ProviderTreeCache()
                if attempt:
                    raise placement_sync.ComputeNodeNotFound(
                        host.compute_node_names) from None
        raise AssertionError('unreachable')

    def _record_provider_uuids(self, context, deployables, desired, result):
        """Record each deployable's provider, and point the ARQs bound to
        it there too (after a reshape, Placement holds their allocations
        on that provider)."""
        provider_of = {member: provider.uuid for provider in desired
                       if provider.name not in result.failed
                       for member in provider.members}
        changed = {}
        for deployable in deployables:
            uuid = provider_of.get(deployable.name)
            if uuid is not None and deployable.rp_uuid != uuid:
                changed[deployable.id] = uuid
        if changed:
            with context.db.writer(context) as session:
                inventory_db.record_provider_uuids(session.connection(),
                                                   changed)


def _holders(context, hostname):
    """A callable: a consumer's ``{deployable name: handles held}`` on
    the host, read once, when the reshape first asks."""
    found = None

    def holders(consumer):
        nonlocal found
        if found is None:
            with context.db.read_connection(context) as connection:
                found = inventory_db.handle_holders(connection, hostname)
        return found.get(consumer, {})
    return holders


def _log_repairs(hostname, outcome):
    """One line per provider that drifted from the database."""
    if outcome['status'] not in ('synced', 'partial'):
        return
    for name in outcome['created']:
        LOG.warning('Host %s: resource provider %s was missing from '
                    'Placement; recreated it with its inventory and traits',
                    hostname, name)
    for name in outcome['updated']:
        LOG.warning('Host %s: the inventory or traits of resource provider '
                    '%s in Placement differed from the database; repaired',
                    hostname, name)
    for name in outcome['deleted']:
        LOG.warning('Host %s: resource provider %s had no deployable in the '
                    'database; deleted it', hostname, name)
