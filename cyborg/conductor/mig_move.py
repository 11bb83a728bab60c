"""Moving a MIG request's slices from one GPU of a host to another.

Placement counts a GPU's compute and memory slices but cannot see where
on the card they lie, and its traits lag behind binds that run at the
same time: it may give a bind a GPU that can no longer place the
profile while another GPU of the same host can. Nova fails the instance
of a failed bind without rescheduling, so the conductor moves the
request instead: the consumer's allocation of that request's resources
goes from the refusing GPU's provider to the other's in one
``PUT /allocations`` guarded by the consumer's generation (Placement
checks the room), then the ARQ follows in the database
(``arqs.move_bind``). The instance stays on the host Nova chose.

A conductor that dies between the two writes leaves an allocation on
the new provider and an ARQ that names the old one; ``placed_on`` finds
where the allocation went, from what the instance's ARQs account for on
each provider, so the resumed bind follows it.
"""

import collections

from keystoneauth1 import exceptions as ks_exc

from cyborg.clients import placement as placement_client
from cyborg.objects import inventory

# Consumer generation conflicts (Nova or another bind of the instance
# wrote meanwhile) tried again before giving up.
ATTEMPTS = 3


class NoRoom(Exception):
    """Placement refused the move: the target provider lacks the room,
    or the consumer kept changing."""


def moved(allocations, resources, source, target):
    """``allocations`` (Placement's ``{rp: {'resources': ...}}``) with
    ``resources`` taken from ``source`` and added to ``target``;
    ValueError if ``source`` holds less."""
    result = {rp: {'resources': dict(a['resources'])}
              for rp, a in allocations.items()}
    held = result.get(source, {'resources': {}})['resources']
    for name, amount in resources.items():
        if held.get(name, 0) < amount:
            raise ValueError('%s holds %d %s of the consumer, not %d'
                             % (source, held.get(name, 0), name, amount))
        held[name] -= amount
        if not held[name]:
            del held[name]
    if source in result and not held:
        del result[source]
    added = result.setdefault(target, {'resources': {}})['resources']
    for name, amount in resources.items():
        added[name] = added.get(name, 0) + amount
    return result


def _resources(allocations):
    return {rp: dict(a['resources']) for rp, a in allocations.items()}


def _landed(placement, consumer, expected):
    """Whether the consumer's allocation is ``expected`` now."""
    now = placement.get_allocations(consumer).get('allocations') or {}
    return _resources(now) == _resources(expected)


def move(placement, consumer, resources, source, target):
    """Move ``resources`` of ``consumer``'s allocation from provider
    ``source`` to ``target``. NoRoom when Placement refuses;
    ValueError when ``source`` does not hold them.

    A write whose answer did not come (Placement failed, or the
    connection did) is settled by reading the allocation again: the move
    either shows there or is tried again, never made twice (the
    consumer's generation guards each write)."""
    for _ in range(ATTEMPTS):
        current = placement.get_allocations(consumer)
        body = moved(current.get('allocations') or {}, resources, source,
                     target)
        try:
            placement.put_allocations(
                consumer, body, current.get('consumer_generation'),
                current['project_id'], current['user_id'],
                current.get('consumer_type') or 'INSTANCE')
            return
        except placement_client.GenerationConflict:
            continue
        except placement_client.PlacementError as exc:
            if exc.status < 500:
                raise NoRoom(str(exc))
        except ks_exc.ConnectionError:
            pass
        if _landed(placement, consumer, body):
            return
    raise NoRoom('the allocation of %s kept changing, or Placement did not '
                 'answer' % consumer)


def placed_on(allocations, requests, request, candidates):
    """The provider among ``candidates`` that holds ``request``'s
    resources in the instance's ``allocations``: its own
    ``device_rp_uuid`` unless that provider holds less than the
    instance's ``requests`` recorded there need and another holds more
    (the move was written to Placement, not yet to the database)."""
    need = collections.defaultdict(collections.Counter)
    for other in requests:
        need[other['device_rp_uuid']].update(inventory.resources_asked(other['group']))

    def held(rp):
        return (allocations.get(rp) or {}).get('resources') or {}

    def short(rp):
        return any(held(rp).get(name, 0) < amount
                   for name, amount in need[rp].items())

    own = request['device_rp_uuid']
    if not short(own):
        return own
    wanted = inventory.resources_asked(request['group'])
    for rp in candidates:
        if rp == own:
            continue
        spare = collections.Counter(held(rp))
        spare.subtract(need[rp])
        if all(spare[name] >= amount for name, amount in wanted.items()):
            return rp
    return own
