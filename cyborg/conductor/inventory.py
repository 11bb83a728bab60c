"""Apply an agent's host inventory to the database, writing only changes.

The agent sends its whole host (``HostInventory``); this module diffs it
against the host's rows by natural keys -- a device by its control path,
a deployable by its name on the host, an attach handle by (type, info)
within its deployable -- and writes the difference in one transaction.

An unchanged report costs three SELECTs and no lock, whatever the number
of devices. A report with changes bumps the host's desired Placement
generation in its transaction (``cyborg.db.api.host_sync_states``) and
takes the host's write lock
(``cyborg.db.api.inventory.lock_host``), reads the host again under it
and decides its writes on that fresh state, so that two conductors
handling reports of the same host cannot write the same change twice.

A device that is no longer reported goes with its rows, unless a VM may
still use it (an attach handle in use, or an ARQ pointing at it): then
it stays, marked ``missing_since``, its inventory fully reserved in
Placement, and a later report removes it once it is free.
"""

import collections
import dataclasses
import functools
import json
import uuid as uuid_lib

from oslo_db import api as oslo_db_api

from cyborg import exception
from cyborg.db import models
from cyborg.db.api import device_health
from cyborg.db.api import host_sync_states
from cyborg.db.api import inventory as inventory_db
from cyborg.objects import inventory as objects_inventory

MAINTAINING = 'maintaining'
ENABLED = 'enabled'
DEVICE_STATUSES = (ENABLED, MAINTAINING)

# What a report may change, per table; the counts say what happened.
COUNTS = ('devices_added', 'devices_updated', 'devices_removed',
          'devices_missing', 'deployables_added', 'deployables_updated',
          'deployables_removed', 'attributes_written', 'attributes_removed',
          'attach_handles_added', 'attach_handles_updated',
          'attach_handles_removed')


# A card whose function changes when it is programmed is not
# interchangeable with its twins: each keeps a provider of its own.
_NEVER_POOLED = frozenset({'FPGA'})


@dataclasses.dataclass(frozen=True)
class PoolKey:
    """What makes deployables of one host interchangeable for Nova.

    Deployables with equal keys may share one pooled resource provider:
    same resource class and NUMA node, and the same device type, vendor,
    model, driver, traits and attributes (their configuration).
    """

    resource_class: str
    numa_node: str | None
    identity: tuple


def pool_key(device_type, vendor, model, std_board_info, deployable_parent,
             driver_name, resource_class, traits, attributes):
    """The ``PoolKey`` of a deployable, or None if it is never pooled
    (an FPGA, or a deployable nested in another one)."""
    if (device_type in _NEVER_POOLED or deployable_parent is not None
            or objects_inventory.extra_inventories(attributes)):
        return None
    numa_node = (std_board_info or {}).get('numa_node')
    return PoolKey(
        resource_class=resource_class,
        numa_node=None if numa_node is None else str(numa_node),
        identity=(device_type, vendor, model, driver_name,
                  tuple(_traits_value(traits)),
                  tuple(sorted(_attribute_values(attributes).items()))))


@dataclasses.dataclass(frozen=True)
class ProviderDeployable:
    """A deployable as Placement needs it (``desired_providers`` input)."""

    id: int
    uuid: str
    name: str
    resource_class: str
    total: int
    traits: tuple
    # The device is in maintenance: nothing new may be scheduled on it.
    disabled: bool
    # The host no longer reports it but something still uses it.
    missing: bool
    rp_uuid: str | None
    # Its device is quarantined (device_health.effective_quarantine):
    # existing allocations stay, nothing new is scheduled on it.
    quarantined: bool = False
    # Which deployables it may share a pooled provider with; None: never.
    pool: PoolKey | None = None
    # Its device's configuration is changing or failed: nothing new is
    # scheduled on it until it is applied.
    configuring: bool = False
    # ((resource class, total), ...) its provider offers beside
    # ``resource_class``: what one request group takes together (a GPU's
    # MIG memory slices and media engine beside its compute slices).
    extra_inventories: tuple = ()
    # Handles taken by no ARQ: released, waiting for their scrub. Each
    # reserves one unit until it is verified clean.
    dirty: int = 0
    # ((resource class, units), ...) its driver keeps out of scheduling:
    # the slices its MIG card can no longer place.
    held_back: tuple = ()

    @property
    def num_accelerators(self):
        return self.total

    @property
    def reserved_fully(self):
        return (self.disabled or self.missing or self.quarantined
                or self.configuring)


class InventoryChanges:
    """What a report changed, and the host's deployables after it."""

    def __init__(self, hostname, plan):
        self.hostname = hostname
        self.counts = plan.counts
        self._plan = plan

    @property
    def changed(self):
        return any(self.counts.values())

    @functools.cached_property
    def deployables(self):
        """Every deployable of the host, sorted by name.

        Built on demand: the unchanged path of a report does not need it.
        """
        return self._plan.listing()

    @property
    def missing_ids(self):
        """Ids of the deployables kept although the host no longer has
        them."""
        return self._plan.missing_ids()

    def to_dict(self):
        return {'hostname': self.hostname, 'changed': self.changed,
                'counts': {k: v for k, v in self.counts.items() if v}}


def apply_host_inventory(context, inventory):
    """Make the database hold ``inventory`` (a ``HostInventory``).

    Returns ``InventoryChanges``. Raises ``exception.Invalid`` for a
    report that contradicts itself (repeated keys, unknown parents).
    """
    _validate(inventory)
    plan = _Plan(inventory, _read_host(context, inventory.hostname))
    if not plan.has_writes():
        return InventoryChanges(inventory.hostname, plan)
    return _apply_locked(context, inventory)


# Readers do not take the host's lock: a torn read (a report of the host
# committed between the read's statements) is read again.
@oslo_db_api.wrap_db_retry(max_retries=5, retry_interval=0.01,
                           exception_checker=lambda exc: isinstance(
                               exc, inventory_db.TornRead))
def _read_host(context, hostname):
    with context.db.read_connection(context) as connection:
        return inventory_db.read_host(connection, hostname)


# A deadlock means another conductor wrote the same host at the same
# moment (MySQL's next-key locks on a host's first report): redo the
# whole diff on the state it left.
@oslo_db_api.wrap_db_retry(max_retries=5, retry_on_deadlock=True)
def _apply_locked(context, inventory):
    with context.db.writer(context) as session:
        connection = session.connection()
        inventory_db.lock_host(connection, inventory.hostname)
        stored = inventory_db.read_host(connection, inventory.hostname)
        plan = _Plan(inventory, stored)
        plan.write(connection)
        if plan.has_writes():
            # Committed with the change: Placement must follow it,
            # whichever conductor syncs the host next.
            host_sync_states.bump_desired(connection, inventory.hostname)
    return InventoryChanges(inventory.hostname, plan)


def host_deployables(context, hostname, missing_ids=()):
    """The host's deployables as the database holds them now.

    A device that went missing is marked so by its row; a deployable that
    its (present) device stopped reporting while in use is not, so the
    caller names those in ``missing_ids`` (``InventoryChanges.missing_ids``
    of the host's last report).
    """
    listing = []
    for device in _read_host(context, hostname):
        for deployable in device.deployables.values():
            listing.append(_stored_listing(
                deployable, device,
                missing=(device.missing_since is not None
                         or deployable.id in missing_ids)))
    return _unique_sorted(listing)


def _validate(inventory):
    device_keys = set()
    names = set()
    for device in inventory.devices:
        if device.key in device_keys:
            raise exception.Invalid(
                'Device %s %s is reported twice on host %s.' % (
                    device.controlpath_type, device.controlpath_info,
                    inventory.hostname))
        device_keys.add(device.key)
        local = {d.name: d for d in device.deployables}
        for deployable in device.deployables:
            if deployable.name in names:
                raise exception.Invalid(
                    'Deployable %r is reported twice on host %s.'
                    % (deployable.name, inventory.hostname))
            names.add(deployable.name)
            seen = {deployable.name}
            parent = deployable.parent
            while parent is not None:
                if parent not in local or parent in seen:
                    raise exception.Invalid(
                        'Deployable %r names parent %r, which is not '
                        'another deployable of its device.'
                        % (deployable.name, parent))
                seen.add(parent)
                parent = local[parent].parent


def _traits_value(traits):
    # Order means nothing to Placement; a reordered list is no change.
    return sorted(set(traits))


def _attribute_values(attributes):
    return {str(k): str(v) for k, v in attributes.items()}



def _cpid_text(info):
    return json.dumps(info, sort_keys=True)


def _handle_text(handle):
    # As JSONText stores it: a handle written from this report reads back
    # as the same text.
    return json.dumps(handle.attach_info)


def _canonical(text):
    return json.dumps(json.loads(text), sort_keys=True)


# Keys of attach_info that only tell apart handles of one place (the
# instances of one vGPU type on one function): a handle whose mark alone
# changed is the same handle.
_MARKS = ('vgpu_mark',)


def _unnamed(info):
    return json.dumps({k: v for k, v in info.items() if k not in _MARKS},
                      sort_keys=True)


class _NewDeployable:
    """A deployable to insert; its ids are known once inserted."""

    def __init__(self, reported, device_ref):
        self.reported = reported
        self.device_ref = device_ref  # a StoredDevice or a _NewDevice
        self.id = None
        self.uuid = str(uuid_lib.uuid4())


class _NewDevice:
    def __init__(self, reported):
        self.reported = reported
        self.id = None
        self.cpid_id = None
        self.uuid = str(uuid_lib.uuid4())
        self.status = ENABLED
        self.quarantined = False
        self.health_override = None


class _Plan:
    """The writes that make the database hold the report."""

    def __init__(self, inventory, stored):
        self.hostname = inventory.hostname
        self.counts = dict.fromkeys(COUNTS, 0)
        self.new_devices = []
        self.device_updates = []  # (device id, values)
        self.new_deployables = []
        self.deployable_updates = []  # (StoredDeployable, values)
        # Existing deployables whose parent or root changes.
        self.reparented = []
        # id(deployable ref) -> (the device's refs by name, parent name)
        # for every reported deployable.
        self.tree = {}
        self.new_attributes = []  # (deployable ref, key, value)
        self.attribute_updates = []  # (attribute id, value)
        self.new_handles = []  # (deployable ref, device ref, AttachHandle)
        self.handle_updates = []  # (handle id, its new attach_info)
        self.removed_attributes = []
        self.removed_handles = []
        self.removed_deployables = []  # StoredDeployable
        self.removed_devices = []  # StoredDevice
        # For the listing: (reported Device, StoredDevice or _NewDevice)
        self.present = []
        self.kept_deployables = []  # (StoredDeployable, StoredDevice)
        self.kept_devices = []  # StoredDevice
        self._diff(inventory, stored)

    def has_writes(self):
        return any(self.counts.values())

    # -- the diff ----------------------------------------------------------

    def _diff(self, inventory, stored):
        by_key = {}
        for device in stored:
            if device.cpid_type is not None:
                by_key[(device.cpid_type, device.cpid_info)] = device
        reported = {(d.controlpath_type, _cpid_text(d.controlpath_info)): d
                    for d in inventory.devices}
        if not reported.keys() <= by_key.keys():
            # Rows written elsewhere may order their JSON keys otherwise.
            by_key = {(t, _canonical(i)): d for (t, i), d in by_key.items()}
        matched = set()
        for key, device in reported.items():
            row = by_key.get(key)
            if row is None:
                self._add_device(device)
            else:
                matched.add(row.id)
                self._diff_device(device, row)
        for row in stored:
            if row.id not in matched:
                self._device_gone(row)

    def _add_device(self, device):
        new = _NewDevice(device)
        self.new_devices.append(new)
        self.counts['devices_added'] += 1
        self.present.append((device, new))
        refs = {}
        for deployable in device.deployables:
            refs[deployable.name] = self._add_deployable(deployable, new,
                                                         refs)

    def _add_deployable(self, deployable, device_ref, refs):
        new = _NewDeployable(deployable, device_ref)
        self.new_deployables.append(new)
        self.tree[id(new)] = (refs, deployable.parent)
        self.counts['deployables_added'] += 1
        for key, value in _attribute_values(deployable.attributes).items():
            self.new_attributes.append((new, key, value))
            self.counts['attributes_written'] += 1
        for handle in deployable.attach_handles:
            self.new_handles.append((new, device_ref, handle))
            self.counts['attach_handles_added'] += 1
        return new

    def _diff_device(self, device, row):
        self.present.append((device, row))
        values = {}
        for field in ('type', 'vendor', 'model'):
            if getattr(row, field) != getattr(device, field):
                values[field] = getattr(device, field)
        for field in ('std_board_info', 'vendor_board_info'):
            if not inventory_db.same_json(getattr(row, field),
                                          getattr(device, field)):
                values[field] = getattr(device, field)
        if row.missing_since is not None:
            values['missing_since'] = None  # back again
        if values:
            self.device_updates.append((row.id, values))
            self.counts['devices_updated'] += 1

        refs = dict(row.deployables)
        names = {d.id: d.name for d in row.deployables.values()}
        reported = {d.name: d for d in device.deployables}
        for deployable in device.deployables:
            stored = row.deployables.get(deployable.name)
            if stored is None:
                refs[deployable.name] = self._add_deployable(
                    deployable, row, refs)
                continue
            self.tree[id(stored)] = (refs, deployable.parent)
            self._diff_deployable(deployable, stored, row)
            if (names.get(stored.parent_id), names.get(stored.root_id)) != (
                    deployable.parent, _reported_root(deployable, reported)):
                self.reparented.append(stored)
                self.counts['deployables_updated'] += 1
        gone = [d for name, d in row.deployables.items()
                if name not in reported]
        deletable = self._deletable(gone, row)
        for stored in gone:
            if stored.id in deletable:
                self._remove_deployable(stored)
            else:
                self.kept_deployables.append((stored, row))

    def _diff_deployable(self, deployable, stored, device_row):
        values = {}
        for field in ('num_accelerators', 'resource_class', 'driver_name'):
            if getattr(stored, field) != getattr(deployable, field):
                values[field] = getattr(deployable, field)
        traits = _traits_value(deployable.traits)
        if not inventory_db.same_json(stored.traits, traits):
            values['traits'] = traits
        if values:
            self.deployable_updates.append((stored, values))
            self.counts['deployables_updated'] += 1

        wanted = _attribute_values(deployable.attributes)
        for key, value in wanted.items():
            attribute = stored.attributes.get(key)
            if attribute is None:
                self.new_attributes.append((stored, key, value))
                self.counts['attributes_written'] += 1
            elif attribute.value != value:
                self.attribute_updates.append((attribute.id, value))
                self.counts['attributes_written'] += 1
        for key, attribute in stored.attributes.items():
            if key not in wanted:
                self.removed_attributes.append(attribute.id)
                self.counts['attributes_removed'] += 1

        self._diff_handles(deployable, stored, device_row)

    def _diff_handles(self, deployable, stored, device_row):
        by_text = {(h.attach_type, h.attach_info): h for h in stored.handles}
        unmatched = []
        matched = set()
        for handle in deployable.attach_handles:
            row = by_text.get((handle.attach_type, _handle_text(handle)))
            if row is None:
                unmatched.append(handle)
            else:
                matched.add(row.id)
        if unmatched:
            # Same info, other key order: still the same handle.
            by_key = {(h.attach_type, _canonical(h.attach_info)): h
                      for h in stored.handles if h.id not in matched}
            still = []
            for handle in unmatched:
                row = by_key.pop((handle.attach_type,
                                  _cpid_text(handle.attach_info)), None)
                if row is None:
                    still.append(handle)
                else:
                    matched.add(row.id)
            self._renamed_handles(still, stored, device_row, matched)
        for row in stored.handles:
            # A handle in use stays until it is released: the VM has it.
            if row.id not in matched and not row.busy:
                self.removed_handles.append(row.id)
                self.counts['attach_handles_removed'] += 1

    def _renamed_handles(self, unmatched, stored, device_row, matched):
        """Handles that differ from a stored one only by a name the
        driver gives them (``vgpu_mark``): the stored row is kept, a busy
        one first, and takes the new info; the others are new."""
        left = sorted((h for h in stored.handles if h.id not in matched),
                      key=lambda h: (not h.busy, h.id))
        by_place = {}
        for row in left:
            key = (row.attach_type, _unnamed(json.loads(row.attach_info)))
            by_place.setdefault(key, []).append(row)
        for handle in unmatched:
            rows = by_place.get((handle.attach_type,
                                 _unnamed(handle.attach_info)))
            if rows:
                row = rows.pop(0)
                matched.add(row.id)
                self.handle_updates.append((row.id, handle.attach_info))
                self.counts['attach_handles_updated'] += 1
            else:
                self.new_handles.append((stored, device_row, handle))
                self.counts['attach_handles_added'] += 1

    def _deletable(self, gone, device_row):
        """The gone deployables that may go: free, and no kept child."""
        deletable = {d.id for d in gone if not d.busy}
        kept = [d for d in gone if d.id not in deletable]
        while kept:
            # What a kept deployable points at must stay too.
            refs = {r for d in kept for r in (d.parent_id, d.root_id)}
            kept = [d for d in gone if d.id in deletable and d.id in refs]
            deletable -= {d.id for d in kept}
        return deletable

    def _remove_deployable(self, stored):
        self.removed_deployables.append(stored)
        self.counts['deployables_removed'] += 1
        for attribute in stored.attributes.values():
            self.removed_attributes.append(attribute.id)
        for handle in stored.handles:
            self.removed_handles.append(handle.id)
            self.counts['attach_handles_removed'] += 1

    def _device_gone(self, row):
        if row.busy:
            self.kept_devices.append(row)
            if row.missing_since is None:
                self.device_updates.append(
                    (row.id, {'missing_since': models.utcnow()}))
                self.counts['devices_missing'] += 1
            return
        self.removed_devices.append(row)
        self.counts['devices_removed'] += 1
        for deployable in row.deployables.values():
            self._remove_deployable(deployable)

    # -- the writes --------------------------------------------------------

    def write(self, connection):
        for device_id, values in self.device_updates:
            inventory_db.update_row(connection, inventory_db.devices,
                                    device_id, values)
        self._insert_devices(connection)
        self._insert_deployables(connection)
        for stored, values in self.deployable_updates:
            inventory_db.update_row(connection, inventory_db.deployables,
                                    stored.id, values)
        for attribute_id, value in self.attribute_updates:
            inventory_db.update_row(connection, inventory_db.attributes,
                                    attribute_id, {'value': value})
        for handle_id, info in self.handle_updates:
            inventory_db.update_row(connection, inventory_db.attach_handles,
                                    handle_id, {'attach_info': info})
        inventory_db.insert_driver_attributes(
            connection,
            [{'uuid': str(uuid_lib.uuid4()), 'deployable_id': ref.id,
              'key': key, 'value': value}
             for ref, key, value in self.new_attributes])
        inventory_db.insert_rows(
            connection, inventory_db.attach_handles,
            [{'uuid': str(uuid_lib.uuid4()), 'deployable_id': ref.id,
              'cpid_id': device.cpid_id, 'attach_type': h.attach_type,
              'attach_info': h.attach_info, 'in_use': False}
             for ref, device, h in self.new_handles])
        self._delete(connection)

    def _insert_devices(self, connection):
        ids = inventory_db.insert_rows(
            connection, inventory_db.devices,
            [{'uuid': d.uuid, 'type': d.reported.type,
              'vendor': d.reported.vendor, 'model': d.reported.model,
              'std_board_info': d.reported.std_board_info,
              'vendor_board_info': d.reported.vendor_board_info,
              'hostname': self.hostname, 'status': ENABLED}
             for d in self.new_devices])
        for device, device_id in zip(self.new_devices, ids, strict=True):
            device.id = device_id
        cpid_ids = inventory_db.insert_rows(
            connection, inventory_db.controlpaths,
            [{'uuid': str(uuid_lib.uuid4()), 'device_id': d.id,
              'cpid_type': d.reported.controlpath_type,
              'cpid_info': _cpid_text(d.reported.controlpath_info)}
             for d in self.new_devices])
        for device, cpid_id in zip(self.new_devices, cpid_ids, strict=True):
            device.cpid_id = cpid_id

    def _insert_deployables(self, connection):
        """Insert new deployables parents first, then re-parent others."""
        waiting = list(self.new_deployables)
        while waiting:
            ready = [d for d in waiting
                     if all(p.id is not None for p in self._ancestors(d))]
            if not ready:  # cycles are refused by _validate
                raise exception.Invalid('Deployable parents form a cycle.')
            rows = []
            for d in ready:
                parent_id, root_id = self._parent_and_root_ids(d)
                rows.append({
                    'uuid': d.uuid, 'name': d.reported.name,
                    'device_id': d.device_ref.id,
                    'num_accelerators': d.reported.num_accelerators,
                    'resource_class': d.reported.resource_class,
                    'driver_name': d.reported.driver_name,
                    'traits': _traits_value(d.reported.traits),
                    'parent_id': parent_id, 'root_id': root_id})
            ids = inventory_db.insert_rows(
                connection, inventory_db.deployables, rows)
            for d, deployable_id in zip(ready, ids, strict=True):
                d.id = deployable_id
            waiting = [d for d in waiting if d.id is None]
        for stored in self.reparented:
            parent_id, root_id = self._parent_and_root_ids(stored)
            inventory_db.update_row(
                connection, inventory_db.deployables, stored.id,
                {'parent_id': parent_id, 'root_id': root_id})

    def _ancestors(self, ref):
        refs, parent = self.tree[id(ref)]
        ancestors = []
        while parent is not None:
            ref = refs[parent]
            ancestors.append(ref)
            parent = self.tree[id(ref)][1]
        return ancestors

    def _parent_and_root_ids(self, ref):
        """A root has neither; others point at their parent and root."""
        ancestors = self._ancestors(ref)
        if not ancestors:
            return None, None
        return ancestors[0].id, ancestors[-1].id

    def _delete(self, connection):
        inventory_db.delete_rows(connection, inventory_db.attributes,
                                 self.removed_attributes)
        inventory_db.delete_attributes_of(
            connection, [d.id for d in self.removed_deployables])
        inventory_db.delete_rows(connection, inventory_db.attach_handles,
                                 self.removed_handles)
        # Children before parents: the tree's foreign keys restrict.
        by_id = {d.id: d for d in self.removed_deployables}
        by_depth = collections.defaultdict(list)
        for deployable in self.removed_deployables:
            depth, parent = 0, by_id.get(deployable.parent_id)
            while parent is not None:
                depth += 1
                parent = by_id.get(parent.parent_id)
            by_depth[depth].append(deployable.id)
        for depth in sorted(by_depth, reverse=True):
            inventory_db.delete_rows(connection, inventory_db.deployables,
                                     by_depth[depth])
        removed = [d.id for d in self.removed_devices]
        if removed:
            connection.execute(inventory_db.controlpaths.delete().where(
                inventory_db.controlpaths.c.device_id.in_(removed)))
        inventory_db.delete_rows(connection, inventory_db.devices, removed)

    # -- the result --------------------------------------------------------

    def missing_ids(self):
        ids = {d.id for d, _row in self.kept_deployables}
        for row in self.kept_devices:
            ids.update(d.id for d in row.deployables.values())
        return frozenset(ids)

    def listing(self):
        listing = []
        new = {id(d.reported): d for d in self.new_deployables}
        for device, row in self.present:
            disabled = row.status == MAINTAINING
            quarantined = device_health.effective_quarantine(row)
            for deployable in device.deployables:
                ref = (row.deployables.get(deployable.name)
                       if isinstance(row, inventory_db.StoredDevice)
                       else None) or new[id(deployable)]
                listing.append(ProviderDeployable(
                    id=ref.id, uuid=ref.uuid, name=deployable.name,
                    resource_class=deployable.resource_class,
                    total=deployable.num_accelerators,
                    traits=tuple(_traits_value(deployable.traits)),
                    disabled=disabled, missing=False,
                    rp_uuid=getattr(ref, 'rp_uuid', None),
                    quarantined=quarantined,
                    extra_inventories=objects_inventory.extra_inventories(
                        deployable.attributes),
                    held_back=objects_inventory.reserved_inventories(
                        deployable.attributes),
                    pool=pool_key(
                        device.type, device.vendor, device.model,
                        device.std_board_info, deployable.parent,
                        deployable.driver_name, deployable.resource_class,
                        deployable.traits, deployable.attributes)))
        for deployable, row in self.kept_deployables:
            listing.append(_stored_listing(deployable, row, missing=True))
        for row in self.kept_devices:
            for deployable in row.deployables.values():
                listing.append(_stored_listing(deployable, row,
                                               missing=True))
        return _unique_sorted(listing)


def _reported_root(deployable, reported):
    if deployable.parent is None:
        return None
    while deployable.parent is not None:
        deployable = reported[deployable.parent]
    return deployable.name


def _stored_listing(deployable, device, missing):
    board = (json.loads(device.std_board_info) if device.std_board_info
             else None)
    attributes = {key: row.value
                  for key, row in deployable.attributes.items()}
    return ProviderDeployable(
        id=deployable.id, uuid=deployable.uuid, name=deployable.name,
        resource_class=deployable.resource_class,
        total=deployable.num_accelerators,
        traits=tuple(deployable.trait_list()),
        disabled=device.status == MAINTAINING, missing=missing,
        rp_uuid=deployable.rp_uuid,
        quarantined=device_health.effective_quarantine(device),
        configuring=device.config_held,
        extra_inventories=objects_inventory.extra_inventories(attributes),
        held_back=objects_inventory.reserved_inventories(attributes),
        dirty=sum(1 for h in deployable.handles
                  if h.in_use and not h.referenced),
        pool=pool_key(
            device.type, device.vendor, device.model, board,
            deployable.parent_id, deployable.driver_name,
            deployable.resource_class, deployable.trait_list(),
            attributes))


def _unique_sorted(listing):
    # A gone device's deployable may share its name (and so its resource
    # provider) with a reported one: the reported one wins.
    by_name = {}
    for deployable in listing:
        current = by_name.get(deployable.name)
        if current is None or (current.missing and not deployable.missing):
            by_name[deployable.name] = deployable
    return [by_name[name] for name in sorted(by_name)]
