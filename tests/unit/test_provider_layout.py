"""Which deployables share a pooled provider, and how a reshape splits
a pool's allocation back over its devices."""

import dataclasses

import pytest

from cyborg.conductor import inventory
from cyborg.conductor import placement_sync
from cyborg.conductor import reshape

HOST = 'compute1'
TRAITS = ('CUSTOM_GPU_NVIDIA',)


def gpu(name, numa='0', model='H100', device_type='GPU', parent=None,
        attributes=None, disabled=False, total=1):
    return inventory.ProviderDeployable(
        id=hash(name), uuid=None, name=name, resource_class='PGPU',
        total=total, traits=TRAITS, disabled=disabled, missing=False,
        rp_uuid=None, pool=inventory.pool_key(
            device_type, '10de', model, {'numa_node': numa}, parent,
            'nvidia_gpu_driver', 'PGPU', TRAITS, attributes or {}))


def pools(deployables):
    return {p.members: p for p in placement_sync.desired_providers(
        HOST, deployables, layout=placement_sync.POOLED,
        disabled=[d.name for d in deployables if d.disabled])}


def test_identical_devices_on_a_numa_node_share_one_provider():
    found = pools([gpu('a'), gpu('b'), gpu('c', numa='1'),
                   gpu('d', model='A100'), gpu('e', attributes={'x': '1'})])

    assert set(found) == {('a', 'b'), ('c',), ('d',), ('e',)}
    pair = found[('a', 'b')]
    assert pair.inventories['PGPU']['total'] == 2
    assert pair.inventories['PGPU']['max_unit'] == 2
    assert 'CUSTOM_NUMA_NODE_0' in pair.traits
    assert 'CUSTOM_NUMA_NODE_1' in found[('c',)].traits
    # The name is stable: a restart finds the same provider.
    assert pair.uuid == pools([gpu('b'), gpu('a')])[('a', 'b')].uuid


def test_fpgas_and_nested_deployables_keep_a_provider_each():
    found = pools([gpu('f1', device_type='FPGA'),
                   gpu('f2', device_type='FPGA'),
                   gpu('r1', parent='f1'), gpu('r2', parent='f1')])

    assert {p.name for p in found.values()} == {
        HOST + '_' + name for name in ('f1', 'f2', 'r1', 'r2')}


def test_a_pool_reserves_its_disabled_members_only():
    pool, = pools([gpu('a'), gpu('b', disabled=True),
                   gpu('c', total=4, disabled=True)]).values()

    assert (pool.inventories['PGPU']['total'],
            pool.inventories['PGPU']['reserved']) == (6, 5)


def test_per_device_layout_is_unchanged():
    found = placement_sync.desired_providers(HOST, [gpu('a'), gpu('b')])

    assert [(p.name, p.members) for p in found] == [
        (HOST + '_a', ('a',)), (HOST + '_b', ('b',))]
    assert all('CUSTOM_NUMA_NODE_0' not in p.traits for p in found)


def test_unknown_layout_is_refused():
    with pytest.raises(ValueError):
        placement_sync.desired_providers(HOST, [], layout='sideways')


MEMBERS = [reshape.Move('a', 1, 'rp-a'), reshape.Move('b', 1, 'rp-b'),
           reshape.Move('c', 1, 'rp-c')]


def test_a_split_follows_the_handles_the_consumer_holds():
    room = {m.deployable: m.amount for m in MEMBERS}

    placed = reshape._split(MEMBERS, 2, {'c': 1, 'b': 1}, room, 'vm')

    assert sorted(placed) == [('rp-b', 1), ('rp-c', 1)]
    assert room == {'a': 1, 'b': 0, 'c': 0}


def test_a_split_without_holders_takes_free_members_and_can_run_out():
    room = {'a': 0, 'b': 1, 'c': 1}

    assert reshape._split(MEMBERS, 1, {}, room, 'vm') == [('rp-b', 1)]
    with pytest.raises(reshape.ReshapeImpossible):
        reshape._split(MEMBERS, 2, {}, room, 'vm')


def test_moves_name_only_deployables_whose_provider_changes():
    listed = [gpu('a'), gpu('b')]
    listed = [dataclasses.replace(d, rp_uuid=rp)
              for d, rp in zip(listed, ['old-a', None], strict=True)]
    desired = placement_sync.desired_providers(
        HOST, listed, layout=placement_sync.POOLED)

    moves = reshape.plan_moves(desired, listed)

    assert moves == {'old-a': [reshape.Move('a', 1, desired[0].uuid)]}


def test_a_provider_of_its_own_reserves_what_its_driver_holds_back():
    from cyborg.objects import inventory as objects_inventory

    card = objects_inventory.Deployable(
        name='migs', num_accelerators=7,
        resource_class='CUSTOM_MIG_COMPUTE_SLICE', driver_name='nvidia',
        attributes={
            'inventory:CUSTOM_MIG_MEMORY_SLICE': '8',
            'reserved:CUSTOM_MIG_COMPUTE_SLICE': '1',
            'reserved:CUSTOM_MIG_MEMORY_SLICE': '12',
            # Not a number, or no inventory of that class: ignored.
            'reserved:CUSTOM_MIG_MEDIA_ENGINE': 'one',
            'reserved:VGPU': '2'})

    [provider] = placement_sync.desired_providers(HOST, [card])

    assert {rc: inv['reserved'] for rc, inv in
            provider.inventories.items()} == {
        'CUSTOM_MIG_COMPUTE_SLICE': 1,
        # Never more than the total.
        'CUSTOM_MIG_MEMORY_SLICE': 8}
