"""A host's report, from the agent's snapshot to the database and Placement.

``HostSync`` is the conductor's one object for inventory: it applies a
report to the database (``inventory.apply_host_inventory``) and then
makes the host's resource providers in Placement match the database.

Placement is skipped entirely when the report changed nothing and the
host's last Placement sync succeeded: an unchanged host costs the three
SELECTs of the diff and no HTTP call. "Succeeded" is remembered in this
process only; a restarted conductor syncs each host once more. When
Placement cannot be reached the database still takes the report, the
answer says so, and the host's next report syncs again, so Placement
converges when it returns. Resource providers kept because allocations
still use them are retried the same way.
"""

import dataclasses
import logging
import threading

from keystoneauth1 import exceptions as ks_exceptions

from cyborg import exception
from cyborg.clients import placement
from cyborg.conductor import inventory as inventory_sync
from cyborg.conductor import placement_sync
from cyborg.db.api import inventory as inventory_db
from cyborg.objects.inventory import HostInventory

LOG = logging.getLogger(__name__)

# What means "Placement is not answering" rather than "Placement refused".
UNREACHABLE = (ks_exceptions.ConnectionError, ks_exceptions.RequestTimeout)


@dataclasses.dataclass
class _HostState:
    """What this conductor remembers of one host between its reports."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    compute_node: placement_sync.ComputeNode | None = None
    compute_node_names: tuple = ()
    cache: placement_sync.ProviderTreeCache = dataclasses.field(
        default_factory=placement_sync.ProviderTreeCache)
    # Placement held the database's state after the last sync.
    synced: bool = False
    # Deployables that the host stopped reporting while in use.
    missing_ids: frozenset = frozenset()


class HostSync:
    def __init__(self, client):
        self.client = client
        self._hosts = {}
        self._hosts_lock = threading.Lock()

    def _host(self, hostname):
        with self._hosts_lock:
            return self._hosts.setdefault(hostname, _HostState())

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
            if changes.changed or changes.missing_ids != host.missing_ids:
                host.synced = False
            host.missing_ids = changes.missing_ids
            if host.synced:
                outcome = {'status': 'skipped'}
            else:
                outcome = self._sync(context, inventory.hostname, host)
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
        scheduled there. Returns a summary dict.
        """
        if status not in inventory_sync.DEVICE_STATUSES:
            raise exception.Invalid(
                'Device status must be one of %s, not %r.'
                % (', '.join(inventory_sync.DEVICE_STATUSES), status))
        with context.db.writer(context) as session:
            connection = session.connection()
            found = inventory_db.find_device_host(connection, device_uuid)
            if found is None:
                raise exception.NotFound(
                    'No device with uuid %s exists.' % device_uuid,
                    code='cyborg.device.not_found')
            changed = inventory_db.set_device_status(connection,
                                                     device_uuid, status)
        host = self._host(found.hostname)
        with host.lock:
            if compute_node_names:
                host.compute_node_names = tuple(compute_node_names)
            elif not host.compute_node_names:
                # No report seen yet: the agent's host name is the best
                # guess at the compute node's.
                host.compute_node_names = (found.hostname,)
            if changed:
                host.synced = False
            outcome = (self._sync(context, found.hostname, host)
                       if not host.synced else {'status': 'skipped'})
        return {'device_uuid': device_uuid, 'hostname': found.hostname,
                'status': status, 'changed': changed,
                'placement': outcome,
                'placement_synced': outcome['status'] in ('skipped',
                                                          'synced')}

    def _sync(self, context, hostname, host):
        """Make Placement hold the host's deployables as the DB has them.

        Called with ``host.lock`` held. Read under that lock, the
        database state is never older than what a concurrent call of
        this process synced.
        """
        deployables = inventory_sync.host_deployables(
            context, hostname, missing_ids=host.missing_ids)
        desired = placement_sync.desired_providers(
            hostname, deployables,
            disabled=[d.name for d in deployables if d.reserved_fully])
        try:
            result = self._sync_tree(hostname, host, desired)
        except placement_sync.ComputeNodeNotFound as exc:
            LOG.warning('Host %s: %s', hostname, exc)
            return {'status': 'no_compute_node', 'error': str(exc)}
        except UNREACHABLE as exc:
            LOG.warning('Host %s: Placement unreachable, will retry on the '
                        'next report: %s', hostname, exc)
            return {'status': 'unreachable', 'error': str(exc)}
        except placement.PlacementError as exc:
            LOG.warning('Host %s: Placement sync failed, will retry on the '
                        'next report: %s', hostname, exc)
            return {'status': 'failed', 'error': str(exc)}

        self._record_provider_uuids(context, hostname, deployables, result)
        host.synced = not (result.failed or result.kept)
        if result.kept or result.failed:
            LOG.info('Host %s: providers kept %s, failed %s; retried on the '
                     'next report', hostname, result.kept, result.failed)
        return {'status': 'synced' if host.synced else 'partial',
                'compute_node': host.compute_node.matched_name,
                'created': result.created, 'updated': result.updated,
                'deleted': result.deleted, 'kept': result.kept,
                'failed': result.failed, 'reads': result.reads,
                'writes': result.writes}

    def _sync_tree(self, hostname, host, desired):
        for attempt in range(2):
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
                    self.client, host.compute_node, desired, host.cache)
            except placement_sync.ComputeNodeGone:
                # Nova recreated the compute node (new UUID): look again.
                host.compute_node = None
                host.cache = placement_sync.ProviderTreeCache()
                if attempt:
                    raise placement_sync.ComputeNodeNotFound(
                        host.compute_node_names) from None
        raise AssertionError('unreachable')

    def _record_provider_uuids(self, context, hostname, deployables,
                               result):
        changed = {}
        for deployable in deployables:
            name = placement_sync.provider_name(hostname, deployable.name)
            uuid = placement_sync.provider_uuid(name)
            if name not in result.failed and deployable.rp_uuid != uuid:
                changed[deployable.id] = uuid
        if changed:
            with context.db.writer(context) as session:
                inventory_db.record_provider_uuids(session.connection(),
                                                   changed)
