"""Placement sync: the resource providers of a host's deployables.

Each deployable of a host becomes a child resource provider (RP) of the
host's compute-node RP, which Nova owns; in the ``pooled`` layout,
identical deployables of a host (``inventory.PoolKey``) share one RP
whose total is theirs together, so that one request group can ask for
several of them and Placement offers one candidate per host instead of
every permutation of the devices. ``desired_providers`` says what
Placement should hold; ``sync_provider_tree`` makes Placement hold it,
writing only what differs, so that an unchanged host costs no writes.

Ownership: every RP made here carries ``OWNER_CYBORG``; RPs without it
are never changed or deleted, and resource classes and traits, which
are global, are created when needed but never deleted.

Reads: one ``in_tree`` listing per sync. Placement has no call that
returns the inventories and traits of many RPs, so an RP that must be
compared costs two reads (inventories, traits) unless a
``ProviderTreeCache`` still holds its state at the generation the listing
shows: Placement bumps an RP's generation whenever its inventories,
traits or allocations change, so an equal generation means an equal
state. With a cache kept across syncs an unchanged host costs one read.
"""

import dataclasses
import hashlib
import socket
import uuid as uuid_lib

import os_traits

from cyborg.clients import placement
from cyborg.conductor import reshape
from cyborg.objects import inventory as objects_inventory

OWNER_TRAIT = os_traits.OWNER_CYBORG
CUSTOM_PREFIX = 'CUSTOM_'
# Reads of an RP's inventories and traits that saw two generations mean
# another writer is active on it; a few re-reads settle it, an endless
# loop would hide a bug.
MAX_CONFLICT_RETRIES = 3


class ComputeNodeNotFound(Exception):
    def __init__(self, names):
        self.names = tuple(names)
        super().__init__(
            'No compute node resource provider in Placement is named %s '
            '(names tried in this order). Nova names it after the compute '
            "node's hypervisor host name; set [DEFAULT] host to that name."
            % ', '.join(repr(n) for n in self.names))


class ComputeNodeGone(Exception):
    """The compute-node RP found earlier is no longer in Placement."""


class TargetOutdated(Exception):
    """A provider changed in Placement since this sync listed it.

    Another writer may hold a newer state of the host: the sync stops
    rather than write its own, possibly older, target over it; the caller
    reads the database again and starts over.
    """


@dataclasses.dataclass(frozen=True)
class ComputeNode:
    provider: dict
    matched_name: str  # which of the names tried is the RP's name
    names_tried: tuple

    @property
    def uuid(self):
        return self.provider['uuid']


def compute_node_names(configured_name, fqdn=None, short_name=None):
    """The names Nova may have given this host's compute node, in the
    order to try them: configured, FQDN, short host name."""
    fqdn = fqdn if fqdn is not None else socket.getfqdn()
    if short_name is None:
        short_name = socket.gethostname().split('.')[0]
    return _unique([configured_name, fqdn, short_name])


def find_compute_node(client, candidates):
    """The first candidate name that names an RP, as a ``ComputeNode``.

    Short name versus FQDN mismatches between services are common, hence
    several candidates; raises ``ComputeNodeNotFound`` listing them all.
    """
    names = _unique(candidates)
    for index, name in enumerate(names):
        provider = client.find_provider_by_name(name)
        if provider is not None:
            return ComputeNode(provider, name, tuple(names[:index + 1]))
    raise ComputeNodeNotFound(names)


def _unique(names):
    return list(dict.fromkeys(n for n in names if n))


PER_DEVICE = 'per_device'
POOLED = 'pooled'
LAYOUTS = (PER_DEVICE, POOLED)
NUMA_TRAIT = CUSTOM_PREFIX + 'NUMA_NODE_%s'


@dataclasses.dataclass(frozen=True)
class DesiredProvider:
    name: str
    uuid: str
    inventories: dict  # {resource class: the six inventory fields}
    traits: frozenset
    # The deployables whose inventory it offers, by name.
    members: tuple = ()


def provider_name(hostname, deployable_name):
    return '%s_%s' % (hostname, deployable_name)


def provider_uuid(name):
    """Derived from the name, so that a restart finds the same RP."""
    return str(uuid_lib.uuid3(uuid_lib.NAMESPACE_DNS, name))


def pool_name(hostname, key):
    """A pool's RP name: readable, and unique for its ``PoolKey``."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:12]
    numa = 'ANY' if key.numa_node is None else key.numa_node
    return '%s_%s_NUMA%s_%s' % (hostname, key.resource_class, numa, digest)


def desired_providers(hostname, deployables, disabled=(), layout=PER_DEVICE):
    """What Placement should hold for ``deployables`` of ``hostname``.

    ``disabled`` names the deployables whose device an operator disabled
    (or that are quarantined or missing): their inventory is reserved, so
    nothing new is scheduled there while existing allocations stay
    valid. In the ``pooled`` layout a pool reserves its disabled members'
    part only. A deployable's ``dirty`` handles (released, not scrubbed
    yet) reserve one unit each, and a provider of its own reserves what
    its driver holds back (``reserved:`` attributes: the slices a MIG
    card can no longer place).
    """
    if layout not in LAYOUTS:
        raise ValueError('Unknown provider layout %r' % layout)
    disabled = frozenset(disabled)
    groups = {}
    seen = set()
    for deployable in deployables:
        if deployable.name in seen:
            raise ValueError('Deployable %r appears twice on host %r'
                             % (deployable.name, hostname))
        seen.add(deployable.name)
        pool = getattr(deployable, 'pool', None)
        if layout == POOLED and pool is not None:
            groups.setdefault(('pool', pool), []).append(deployable)
        else:
            groups[('one', deployable.name)] = [deployable]
    desired = []
    for (kind, key), members in groups.items():
        if kind == 'pool':
            name = pool_name(hostname, key)
            traits = set(members[0].traits)
            if key.numa_node is not None:
                traits.add(NUMA_TRAIT % key.numa_node)
        else:
            name = provider_name(hostname, key)
            traits = set(members[0].traits)
        desired.append(DesiredProvider(
            name=name, uuid=provider_uuid(name),
            inventories=_inventories(members, disabled),
            traits=frozenset(traits) | {OWNER_TRAIT},
            members=tuple(sorted(m.name for m in members))))
    return sorted(desired, key=lambda provider: provider.name)


def _inventories(members, disabled):
    total = sum(m.num_accelerators for m in members)
    # Placement refuses total < 1; a deployable with nothing to offer
    # keeps its RP without inventory.
    if total < 1:
        return {}
    # A member out of service reserves all it offers; one in service, the
    # units of its handles waiting for a scrub.
    reserved = sum(m.num_accelerators if m.name in disabled
                   else min(getattr(m, 'dirty', 0), m.num_accelerators)
                   for m in members)
    inventories = {members[0].resource_class: _inventory(total, reserved)}
    # A deployable with extra inventories is never pooled: its provider
    # is its own, and a disabled one offers none of them.
    for resource_class, extra in _extras(members[0]):
        if extra >= 1:
            inventories[resource_class] = _inventory(
                extra, extra if members[0].name in disabled else 0)
    if len(members) == 1:
        # What its driver holds back (slices a MIG card cannot place).
        for resource_class, units in _held_back(members[0]):
            found = inventories.get(resource_class)
            if found is not None:
                found['reserved'] = min(found['total'],
                                        found['reserved'] + units)
    return inventories


def _extras(deployable):
    """A deployable's extra inventories, whether listed for Placement
    (``ProviderDeployable``) or as reported (its attributes)."""
    return _listed(deployable, 'extra_inventories',
                   objects_inventory.extra_inventories)


def _held_back(deployable):
    """What a deployable's driver keeps out of scheduling, as listed for
    Placement or as reported (``reserved:`` attributes)."""
    return _listed(deployable, 'held_back',
                   objects_inventory.reserved_inventories)


def _listed(deployable, field, from_attributes):
    found = getattr(deployable, field, None)
    if found is None:
        found = from_attributes(getattr(deployable, 'attributes', {}))
    return found


def _inventory(total, reserved):
    return {
        'total': total,
        'reserved': reserved,
        'min_unit': 1,
        'max_unit': total,
        'step_size': 1,
        'allocation_ratio': 1.0,
    }


@dataclasses.dataclass
class SyncResult:
    created: list = dataclasses.field(default_factory=list)
    updated: list = dataclasses.field(default_factory=list)
    deleted: list = dataclasses.field(default_factory=list)
    # RP name -> why it stays although no deployable wants it; the next
    # sync tries again.
    kept: dict = dataclasses.field(default_factory=dict)
    # RP name -> the error that stopped its sync; the others went on.
    failed: dict = dataclasses.field(default_factory=dict)
    # Providers whose allocations moved to the new layout's providers.
    reshaped: list = dataclasses.field(default_factory=list)
    generation_conflicts: int = 0
    reads: int = 0
    writes: int = 0

    @property
    def changed(self):
        return bool(self.created or self.updated or self.deleted
                    or self.reshaped)


@dataclasses.dataclass
class ProviderState:
    """An RP's inventories and traits as of ``generation``.

    ``inventories`` is None when only the traits were read (RPs that are
    not wanted need only their traits, to see who owns them).
    """

    uuid: str
    generation: int
    inventories: dict | None
    traits: frozenset


class ProviderTreeCache:
    """The last known state of the RPs of one compute node's tree.

    Keep one per compute node across syncs; an entry serves only while
    Placement still shows the same generation.
    """

    def __init__(self):
        self._states = {}

    def lookup(self, uuid, generation):
        state = self._states.get(uuid)
        if state is None or state.generation != generation:
            return None
        return dataclasses.replace(state)

    def remember(self, state):
        self._states[state.uuid] = dataclasses.replace(state)

    def forget(self, uuid):
        self._states.pop(uuid, None)

    def keep_only(self, uuids):
        for uuid in set(self._states) - set(uuids):
            del self._states[uuid]


def sync_provider_tree(client, compute_rp, desired, cache=None, moves=None,
                       holders=None):
    """Make the compute node's children in Placement match ``desired``.

    ``moves`` (``reshape.plan_moves``) says which providers held the
    deployables before: those with allocations that ``desired`` no longer
    wants (the layout changed) have their allocations moved with the
    reshaper first; ``holders`` gives a consumer's handles by deployable.

    ``compute_rp`` is the compute node's RP (a dict with ``uuid``, or a
    ``ComputeNode``). Returns a ``SyncResult``; its ``reads`` and
    ``writes`` count this sync's calls (they include other calls made
    on the same client meanwhile, if it is shared between threads).
    Raises ``ComputeNodeGone`` if the compute-node RP has disappeared.
    """
    compute_uuid = (compute_rp.uuid if isinstance(compute_rp, ComputeNode)
                    else compute_rp['uuid'])
    reads, writes = client.calls.snapshot()
    sync = _TreeSync(client, cache if cache is not None
                     else ProviderTreeCache())
    try:
        sync.run(compute_uuid, desired, moves or {},
                 holders or (lambda consumer: {}))
    finally:
        now_reads, now_writes = client.calls.snapshot()
        sync.result.reads = now_reads - reads
        sync.result.writes = now_writes - writes
    return sync.result


class _TreeSync:
    def __init__(self, client, cache):
        self.client = client
        self.cache = cache
        self.result = SyncResult()
        # Custom resource classes and traits made sure of in this sync.
        self._ensured = set()
        self._deleted = set()

    def run(self, compute_uuid, desired, moves, holders):
        tree = self._tree(compute_uuid)
        if moves and self._reshape(compute_uuid, tree, desired, moves,
                                   holders):
            tree = self._tree(compute_uuid)
        wanted = set()
        for provider in desired:
            wanted.add(provider.uuid)
            try:
                self._sync_provider(provider, tree.get(provider.uuid),
                                    compute_uuid)
            except placement.PlacementError as exc:
                self.cache.forget(provider.uuid)
                self.result.failed[provider.name] = str(exc)
        for rp in tree.values():
            if (rp['parent_provider_uuid'] == compute_uuid
                    and rp['uuid'] not in wanted):
                try:
                    self._retire(rp)
                except placement.PlacementError as exc:
                    self.cache.forget(rp['uuid'])
                    self.result.failed[rp['name']] = str(exc)
        self.cache.keep_only((set(tree) | wanted) - self._deleted)

    def _tree(self, compute_uuid):
        tree = {rp['uuid']: rp
                for rp in self.client.providers_in_tree(compute_uuid)}
        if compute_uuid not in tree:
            raise ComputeNodeGone(
                'Compute node resource provider %s is no longer in '
                'Placement' % compute_uuid)
        return tree

    def _reshape(self, compute_uuid, tree, desired, moves, holders):
        """Move allocations off providers the layout retires; True if
        anything moved. A failure leaves them where they are: such a
        provider is kept, fully reserved, and the next sync tries again.
        """
        try:
            emptied = reshape.move_allocations(
                self.client, compute_uuid, tree, desired, moves, holders)
        except (placement.PlacementError,
                reshape.ReshapeImpossible) as exc:
            wanted = {provider.uuid for provider in desired}
            for uuid in moves:
                if uuid in tree and uuid not in wanted:
                    self.result.failed[tree[uuid]['name']] = (
                        'allocations not moved: %s' % exc)
            return False
        self.result.reshaped.extend(emptied)
        return bool(emptied)

    def _sync_provider(self, provider, rp, compute_uuid):
        if rp is None:
            created = self.client.create_provider(
                provider.name, provider.uuid, parent_uuid=compute_uuid)
            state = ProviderState(provider.uuid, created['generation'],
                                  inventories={}, traits=frozenset())
            self._converge(state, provider.inventories, provider.traits)
            self.result.created.append(provider.name)
        elif rp['parent_provider_uuid'] != compute_uuid:
            # Our UUID, yet nested elsewhere in the tree: moving it could
            # break the allocations of whoever put it there.
            self.result.failed[provider.name] = (
                'RP %s is under %s, not under the compute node'
                % (rp['uuid'], rp['parent_provider_uuid']))
        else:
            state = self._known_state(rp, with_inventories=True)
            if self._converge(state, provider.inventories, provider.traits):
                self.result.updated.append(provider.name)

    def _retire(self, rp):
        """Delete an RP of ours that no deployable wants any more."""
        state = self._known_state(rp, with_inventories=False)
        if OWNER_TRAIT not in state.traits:
            return  # someone else's RP
        name, uuid = rp['name'], rp['uuid']
        # Placement does not bump the generation when allocations are
        # deleted, so usages are read each time rather than cached.
        in_use = {rc: amount for rc, amount
                  in self.client.get_usages(uuid).items() if amount}
        if in_use:
            self._keep(state, name, 'allocations still use %s' % ', '.join(
                '%s=%d' % item for item in sorted(in_use.items())))
            return
        try:
            self.client.delete_provider(uuid)
        except placement.NotFound:
            pass  # gone already: what we wanted
        except placement.InUse as exc:
            # An allocation landed since the usages were read.
            self._keep(state, name, 'in use: %s' % exc.detail)
            return
        except placement.ProviderHasChildren:
            self.result.kept[name] = 'has child resource providers'
            return
        self._deleted.add(uuid)
        self.result.deleted.append(name)

    def _keep(self, state, name, reason):
        """Keep a removed device's RP, fully reserved.

        Its allocations stay valid, but the scheduler must not place
        anything new on a device that is gone.
        """
        if state.inventories is None:
            state = self._read_state(state.uuid)
        unavailable = {rc: dict(fields, reserved=fields['total'])
                       for rc, fields in state.inventories.items()}
        self._converge(state, unavailable, state.traits)
        self.result.kept[name] = reason

    def _known_state(self, rp, with_inventories):
        state = self.cache.lookup(rp['uuid'], rp['generation'])
        if state is not None and (state.inventories is not None
                                  or not with_inventories):
            return state
        if with_inventories:
            return self._read_state(rp['uuid'])
        generation, traits = self.client.get_traits(rp['uuid'])
        state = ProviderState(rp['uuid'], generation, None, traits)
        self.cache.remember(state)
        return state

    def _read_state(self, uuid):
        for _attempt in range(MAX_CONFLICT_RETRIES + 1):
            generation, inventories = self.client.get_inventories(uuid)
            traits_generation, traits = self.client.get_traits(uuid)
            # Equal generations: both reads saw the same state.
            if traits_generation == generation:
                break
            self.result.generation_conflicts += 1
        state = ProviderState(uuid, traits_generation, inventories, traits)
        self.cache.remember(state)
        return state

    def _converge(self, state, inventories, traits):
        """Write what differs; True if anything was written.

        A generation conflict means someone wrote the provider since it
        was read: ``TargetOutdated``, so that the caller decides again
        from the database instead of replaying this target.
        """
        wrote = False
        try:
            if not _same_inventories(state.inventories, inventories):
                # Classes and traits the provider holds exist already:
                # Placement deletes none that a provider uses.
                self._ensure_custom(
                    set(inventories) - set(state.inventories or ()),
                    self.client.ensure_resource_class)
                state.generation = self.client.put_inventories(
                    state.uuid, state.generation, inventories)
                state.inventories = inventories
                wrote = True
            if state.traits != traits:
                self._ensure_custom(set(traits) - set(state.traits or ()),
                                    self.client.ensure_trait)
                state.generation = self.client.put_traits(
                    state.uuid, state.generation, traits)
                state.traits = traits
                wrote = True
        except placement.GenerationConflict as exc:
            self.result.generation_conflicts += 1
            self.cache.forget(state.uuid)
            raise TargetOutdated(str(exc)) from exc
        self.cache.remember(state)
        return wrote

    def _ensure_custom(self, names, ensure):
        for name in names:
            if name.startswith(CUSTOM_PREFIX) and name not in self._ensured:
                ensure(name)
                self._ensured.add(name)


_INVENTORY_FIELDS = ('total', 'reserved', 'min_unit', 'max_unit',
                     'step_size', 'allocation_ratio')


def _same_inventories(current, wanted):
    if current is None or current.keys() != wanted.keys():
        return False
    return all(current[rc].get(field) == wanted[rc].get(field)
               for rc in wanted for field in _INVENTORY_FIELDS)
