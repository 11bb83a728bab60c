"""The arithmetic of moving a MIG request's slices between providers."""

import uuid

import pytest

from cyborg.clients import placement as placement_client
from cyborg.conductor import mig_move
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

COMPUTE, MEMORY = 'CUSTOM_MIG_COMPUTE_SLICE', 'CUSTOM_MIG_MEMORY_SLICE'


def test_placed_on_reads_a_move_written_to_placement_alone():
    group = {'resources:' + COMPUTE: '3', 'resources:' + MEMORY: '4'}
    small = {'resources:' + COMPUTE: '1', 'resources:' + MEMORY: '1'}
    request = {'device_rp_uuid': 'a', 'group': group}
    # Another ARQ of the instance holds a 1g.10gb on b already.
    requests = [request, {'device_rp_uuid': 'b', 'group': small}]

    def on(**held):
        return {rp: {'resources': {COMPUTE: c, MEMORY: m}}
                for rp, (c, m) in held.items()}

    assert mig_move.placed_on(on(a=(3, 4), b=(1, 1)), requests, request,
                              ['a', 'b', 'c']) == 'a'
    assert mig_move.placed_on(on(b=(4, 5)), requests, request,
                              ['a', 'b', 'c']) == 'b'
    assert mig_move.placed_on(on(b=(1, 1), c=(3, 4)), requests, request,
                              ['a', 'b', 'c']) == 'c'
    # Nowhere to be found (Nova removed it): left where the ARQ says.
    assert mig_move.placed_on(on(b=(1, 1)), requests, request,
                              ['a', 'b', 'c']) == 'a'


def test_moved_takes_the_resources_from_one_provider_to_another():
    before = {'node': {'resources': {'VCPU': 2}},
              'a': {'resources': {COMPUTE: 4, MEMORY: 5}}}
    after = mig_move.moved(before, {COMPUTE: 3, MEMORY: 4}, 'a', 'b')
    assert after == {'node': {'resources': {'VCPU': 2}},
                     'a': {'resources': {COMPUTE: 1, MEMORY: 1}},
                     'b': {'resources': {COMPUTE: 3, MEMORY: 4}}}
    assert mig_move.moved(after, {COMPUTE: 1, MEMORY: 1}, 'a', 'b') == {
        'node': {'resources': {'VCPU': 2}},
        'b': {'resources': {COMPUTE: 4, MEMORY: 5}}}
    with pytest.raises(ValueError):
        mig_move.moved(before, {COMPUTE: 5}, 'a', 'b')


# -- against a real Placement, with its answers lost or refused -----------

@pytest.fixture
def claimed(placement):  # noqa: F811
    """Two providers of 7 compute slices; a consumer holding 3 on the
    first. (client, consumer, first, second)."""
    client = placement.client()
    client.ensure_resource_class(COMPUTE)
    rps = []
    for name in ('first', 'second'):
        rp = client.create_provider(name)
        client.put_inventories(rp['uuid'], rp['generation'],
                               {COMPUTE: {'total': 7}})
        rps.append(rp['uuid'])
    consumer = str(uuid.uuid4())
    client.put_allocations(consumer, {rps[0]: {'resources': {COMPUTE: 3}}},
                           None, 'p', 'u', 'INSTANCE')
    return client, consumer, rps[0], rps[1]


class Faulty:
    """The real client, whose next ``put_allocations`` fails: before
    Placement got it, after it was written (its answer lost), or after
    someone else wrote the consumer."""

    def __init__(self, client, fault):
        self.client = client
        self.fault = fault

    def __getattr__(self, name):
        return getattr(self.client, name)

    def put_allocations(self, consumer, *args):
        fault, self.fault = self.fault, None
        if fault == 'answer lost':
            self.client.put_allocations(consumer, *args)
        if fault == 'another writer':
            now = self.client.get_allocations(consumer)
            self.client.put_allocations(
                consumer, now['allocations'], now['consumer_generation'],
                'p', 'u', 'INSTANCE')
        elif fault is not None:
            raise placement_client.PlacementError('PUT', '/allocations', 503)
        return self.client.put_allocations(consumer, *args)


def held(client, consumer):
    return {rp: a['resources'] for rp, a in
            client.get_allocations(consumer)['allocations'].items()}


@pytest.mark.parametrize('fault', [None, 'answer lost', 'not written',
                                   'another writer'])
def test_a_move_lands_once_whatever_answer_is_lost(claimed, fault):
    client, consumer, first, second = claimed

    mig_move.move(Faulty(client, fault), consumer, {COMPUTE: 3}, first,
                  second)

    assert held(client, consumer) == {second: {COMPUTE: 3}}
    assert client.get_usages(second) == {COMPUTE: 3}
    assert client.get_usages(first) == {COMPUTE: 0}


def test_a_move_to_a_provider_without_room_changes_nothing(claimed):
    client, consumer, first, second = claimed
    other = str(uuid.uuid4())
    client.put_allocations(other, {second: {'resources': {COMPUTE: 5}}},
                           None, 'p', 'u', 'INSTANCE')

    with pytest.raises(mig_move.NoRoom):
        mig_move.move(client, consumer, {COMPUTE: 3}, first, second)

    assert held(client, consumer) == {first: {COMPUTE: 3}}
