"""Moving a host's allocations when its provider layout changes.

When a host goes from one resource provider per deployable to pooled
providers (or back), the providers that held its deployables are no
longer wanted. Those with allocations cannot simply be deleted: running
instances hold them. ``move_allocations`` moves their inventory, and the
allocations of every consumer on them, to the providers that now hold
the same deployables, in one Placement transaction (``POST /reshaper``):
no allocation is dropped, and nothing can be scheduled in between.

Splitting a pool's allocation over per-device providers follows the
attach handles: a consumer's units go first to the deployables whose
handles its ARQs hold (``holders``), then to any member with room.
"""

import collections
import dataclasses


class ReshapeImpossible(Exception):
    """The new providers cannot hold the allocations of the old ones."""


@dataclasses.dataclass(frozen=True)
class Move:
    """A deployable whose resource provider changes."""

    deployable: str  # its name
    amount: int  # its accelerators
    target: str  # the uuid of the provider that holds it now


def plan_moves(desired, deployables):
    """``{old provider uuid: [Move]}``: deployables whose recorded
    provider (``rp_uuid``) is not the provider ``desired`` gives them."""
    target_of = {member: provider.uuid for provider in desired
                 for member in provider.members}
    moves = collections.defaultdict(list)
    for deployable in deployables:
        target = target_of.get(deployable.name)
        if deployable.rp_uuid and target and deployable.rp_uuid != target:
            moves[deployable.rp_uuid].append(Move(
                deployable.name, deployable.num_accelerators, target))
    return dict(moves)


def move_allocations(client, compute_uuid, tree, desired, moves, holders):
    """Move the allocations on the providers that ``moves`` retires.

    ``tree`` is the compute node's tree as listed (``{uuid: provider}``),
    ``desired`` the providers the host should have, ``holders`` a
    callable that gives a consumer's ``{deployable name: handles held}``.
    Providers it needs and Placement lacks are created first. Returns
    the names of the providers emptied; raises ``ReshapeImpossible``, or
    the client's ``PlacementError`` (a consumer changed meanwhile: the
    next sync tries again).
    """
    wanted = {provider.uuid: provider for provider in desired}
    sources = {uuid: members for uuid, members in moves.items()
               if uuid in tree and uuid not in wanted
               and tree[uuid]['parent_provider_uuid'] == compute_uuid}
    on_source = {}
    for uuid in sorted(sources):
        allocations = client.get_provider_allocations(uuid)
        if allocations:
            on_source[uuid] = allocations
    if not on_source:
        return []

    room = {move.deployable: move.amount
            for uuid in on_source for move in sources[uuid]}
    moved_in = collections.Counter()
    allocations = {}
    for consumer in sorted({c for found in on_source.values()
                            for c in found}):
        current = client.get_allocations(consumer)
        held = holders(consumer)
        kept = {rp: {'resources': dict(allocation['resources'])}
                for rp, allocation in current['allocations'].items()
                if rp not in on_source}
        for source, by_consumer in on_source.items():
            for resource_class, amount in by_consumer.get(
                    consumer, {}).items():
                for target, units in _split(sources[source], amount, held,
                                            room, consumer):
                    resources = kept.setdefault(
                        target, {'resources': {}})['resources']
                    resources[resource_class] = (
                        resources.get(resource_class, 0) + units)
                    moved_in[target] += units
        allocations[consumer] = {
            'allocations': kept,
            'consumer_generation': current['consumer_generation'],
            'project_id': current['project_id'],
            'user_id': current['user_id'],
            'consumer_type': current.get('consumer_type') or 'INSTANCE'}

    inventories = {uuid: {'resource_provider_generation':
                          tree[uuid]['generation'], 'inventories': {}}
                   for uuid in on_source}
    for target, units in moved_in.items():
        provider = wanted[target]
        if target in tree:
            generation = tree[target]['generation']
            used = sum(client.get_usages(target).values())
        else:
            generation = client.create_provider(
                provider.name, target, parent_uuid=compute_uuid)[
                'generation']
            used = 0
        inventories[target] = {
            'resource_provider_generation': generation,
            'inventories': _room_for(provider.inventories, used + units)}
    client.reshape(inventories, allocations)
    return sorted(tree[uuid]['name'] for uuid in on_source)


def _split(members, amount, held, room, consumer):
    """``[(target uuid, units)]`` for ``amount`` units that a consumer
    has on a retired provider whose deployables are ``members``."""
    placed = []
    # The deployables whose handles the consumer's ARQs hold first: the
    # allocation then says which devices the instance really has.
    for first_pass in (True, False):
        for move in members:
            if not amount:
                break
            limit = held.get(move.deployable, 0) if first_pass else amount
            units = min(limit, room[move.deployable], amount)
            if units > 0:
                room[move.deployable] -= units
                amount -= units
                placed.append((move.target, units))
    if amount:
        raise ReshapeImpossible(
            'Consumer %s holds %d more units than the new providers of '
            'its deployables offer' % (consumer, amount))
    return placed


def _room_for(inventories, used):
    """The new inventory, with its reservation cut so that the moved
    allocations fit: the sync that follows sets the full reservation."""
    fitted = {}
    for resource_class, fields in inventories.items():
        reserved = max(0, min(fields['reserved'], fields['total'] - used))
        fitted[resource_class] = dict(fields, reserved=reserved)
    return fitted
