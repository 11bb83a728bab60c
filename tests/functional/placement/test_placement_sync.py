"""sync_provider_tree against real Placement."""

import uuid

import pytest

from cyborg.clients import placement as placement_client
from cyborg.conductor import placement_sync
from cyborg.objects.inventory import Deployable
from tests.functional.placement.conftest import COMPUTE_HOST
from tests.placement_service import allocate
from tests.placement_service import create_compute_node

OWNER = 'OWNER_CYBORG'


def fake_fpga(name='fpga0', total=1):
    return Deployable(name=name, num_accelerators=total,
                      resource_class='FPGA', driver_name='fake_driver',
                      traits=['CUSTOM_FAKE_DEVICE'])


def qat_vf(index):
    return Deployable(name='qat_vf%d' % index, num_accelerators=1,
                      resource_class='CUSTOM_QAT',
                      driver_name='intel_qat_driver',
                      traits=['CUSTOM_QAT_8086',
                              'CUSTOM_QAT_PRODUCT_ID_37C9'])


def gpu(name='gpu0'):
    return Deployable(name=name, num_accelerators=1, resource_class='PGPU',
                      driver_name='nvidia_gpu_driver',
                      traits=['CUSTOM_GPU_NVIDIA'])


def desired(*deployables, disabled=()):
    return placement_sync.desired_providers(COMPUTE_HOST, deployables,
                                            disabled=disabled)


def rp_uuid(deployable_name):
    return placement_sync.provider_uuid('%s_%s' % (COMPUTE_HOST,
                                                   deployable_name))


def children(observer, compute_node):
    return {rp['name']: rp
            for rp in observer.providers_in_tree(compute_node['uuid'])
            if rp['parent_provider_uuid'] == compute_node['uuid']}


def inventory(observer, deployable_name):
    return observer.get_inventories(rp_uuid(deployable_name))[1]


def traits(observer, deployable_name):
    return observer.get_traits(rp_uuid(deployable_name))[1]


def test_desired_providers_shape():
    [provider] = desired(qat_vf(0))

    name = '%s_qat_vf0' % COMPUTE_HOST
    assert provider.name == name
    # Deterministic: a restarted conductor finds the same RP.
    assert provider.uuid == str(uuid.uuid3(uuid.NAMESPACE_DNS, name))
    assert provider.inventories == {'CUSTOM_QAT': {
        'total': 1, 'reserved': 0, 'min_unit': 1, 'max_unit': 1,
        'step_size': 1, 'allocation_ratio': 1.0}}
    assert provider.traits == {'CUSTOM_QAT_8086',
                               'CUSTOM_QAT_PRODUCT_ID_37C9', OWNER}


def test_desired_providers_refuses_duplicate_names():
    with pytest.raises(ValueError, match='fpga0'):
        desired(fake_fpga(), fake_fpga())


def test_first_sync_creates_children_with_inventory_and_traits(
        client, observer, compute_node):
    result = placement_sync.sync_provider_tree(
        client, compute_node,
        desired(fake_fpga(total=2), qat_vf(0), gpu()))

    assert sorted(result.created) == sorted(
        '%s_%s' % (COMPUTE_HOST, n) for n in ('fpga0', 'qat_vf0', 'gpu0'))
    assert (result.updated, result.deleted, result.kept,
            result.failed) == ([], [], {}, {})
    tree = children(observer, compute_node)
    assert set(tree) == set(result.created)
    for rp in tree.values():
        assert rp['root_provider_uuid'] == compute_node['uuid']
    assert tree['%s_gpu0' % COMPUTE_HOST]['uuid'] == rp_uuid('gpu0')

    assert inventory(observer, 'fpga0')['FPGA'] == {
        'total': 2, 'reserved': 0, 'min_unit': 1, 'max_unit': 2,
        'step_size': 1, 'allocation_ratio': 1.0}
    assert inventory(observer, 'qat_vf0')['CUSTOM_QAT']['total'] == 1
    assert traits(observer, 'fpga0') == {'CUSTOM_FAKE_DEVICE', OWNER}
    assert traits(observer, 'qat_vf0') == {
        'CUSTOM_QAT_8086', 'CUSTOM_QAT_PRODUCT_ID_37C9', OWNER}
    # The compute node itself is Nova's: untouched.
    assert observer.get_traits(compute_node['uuid'])[1] == frozenset()
    assert set(inventory_of(observer, compute_node)) == {'VCPU',
                                                         'MEMORY_MB'}
    # One listing; per RP a POST and two PUTs; the custom RC and the
    # four custom traits once each.
    assert result.reads == 1
    assert result.writes == 3 * 3 + 1 + 4


def inventory_of(observer, rp):
    return observer.get_inventories(rp['uuid'])[1]


def test_unchanged_sync_writes_nothing(client, compute_node):
    wanted = desired(fake_fpga(), qat_vf(0), qat_vf(1), gpu())
    placement_sync.sync_provider_tree(client, compute_node, wanted)

    result = placement_sync.sync_provider_tree(client, compute_node, wanted)

    assert result.writes == 0
    assert not result.changed
    # Without a cache each RP's inventories and traits are read.
    assert result.reads == 1 + 2 * len(wanted)


def test_unchanged_sync_with_cache_reads_only_the_tree(client,
                                                       compute_node):
    cache = placement_sync.ProviderTreeCache()
    wanted = desired(*(qat_vf(i) for i in range(8)))
    placement_sync.sync_provider_tree(client, compute_node, wanted, cache)

    result = placement_sync.sync_provider_tree(client, compute_node, wanted,
                                               cache)

    assert (result.reads, result.writes) == (1, 0)


def test_cache_does_not_hide_changes_made_by_others(client, observer,
                                                    compute_node):
    cache = placement_sync.ProviderTreeCache()
    wanted = desired(fake_fpga())
    placement_sync.sync_provider_tree(client, compute_node, wanted, cache)
    # Someone resets the inventory behind our back: the generation moves,
    # the cached state no longer applies and the drift is repaired.
    generation, _ = observer.get_inventories(rp_uuid('fpga0'))
    observer.put_inventories(rp_uuid('fpga0'), generation,
                             {'FPGA': {'total': 1, 'reserved': 1}})

    result = placement_sync.sync_provider_tree(client, compute_node, wanted,
                                               cache)

    assert result.updated == ['%s_fpga0' % COMPUTE_HOST]
    assert result.writes == 1
    assert inventory(observer, 'fpga0')['FPGA']['reserved'] == 0


def test_changed_total_updates_only_that_provider(client, observer,
                                                  compute_node):
    placement_sync.sync_provider_tree(
        client, compute_node, desired(fake_fpga(total=1), qat_vf(0)))
    qat_generation = observer.get_traits(rp_uuid('qat_vf0'))[0]

    result = placement_sync.sync_provider_tree(
        client, compute_node, desired(fake_fpga(total=4), qat_vf(0)))

    assert result.updated == ['%s_fpga0' % COMPUTE_HOST]
    assert result.created == result.deleted == []
    assert result.writes == 1
    assert inventory(observer, 'fpga0')['FPGA']['total'] == 4
    assert inventory(observer, 'fpga0')['FPGA']['max_unit'] == 4
    assert observer.get_traits(rp_uuid('qat_vf0'))[0] == qat_generation


def test_reserved_follows_disabled(client, observer, compute_node):
    deployables = (fake_fpga(total=2), gpu())
    placement_sync.sync_provider_tree(client, compute_node,
                                      desired(*deployables))

    disabling = placement_sync.sync_provider_tree(
        client, compute_node, desired(*deployables, disabled={'fpga0'}))
    assert disabling.updated == ['%s_fpga0' % COMPUTE_HOST]
    assert inventory(observer, 'fpga0')['FPGA']['reserved'] == 2

    # Still disabled: the reservation stays and nothing is written.
    staying = placement_sync.sync_provider_tree(
        client, compute_node, desired(*deployables, disabled={'fpga0'}))
    assert staying.writes == 0
    assert inventory(observer, 'fpga0')['FPGA']['reserved'] == 2
    assert inventory(observer, 'gpu0')['PGPU']['reserved'] == 0

    enabling = placement_sync.sync_provider_tree(client, compute_node,
                                                 desired(*deployables))
    assert enabling.updated == ['%s_fpga0' % COMPUTE_HOST]
    assert inventory(observer, 'fpga0')['FPGA']['reserved'] == 0


def test_removed_deployable_provider_is_deleted(client, observer,
                                                compute_node):
    placement_sync.sync_provider_tree(client, compute_node,
                                      desired(fake_fpga(), gpu()))

    result = placement_sync.sync_provider_tree(client, compute_node,
                                               desired(fake_fpga()))

    assert result.deleted == ['%s_gpu0' % COMPUTE_HOST]
    assert set(children(observer, compute_node)) == {
        '%s_fpga0' % COMPUTE_HOST}
    assert observer.get_provider(rp_uuid('gpu0')) is None


def test_removed_deployable_with_allocation_is_kept(placement, client,
                                                    observer, compute_node):
    placement_sync.sync_provider_tree(
        client, compute_node, desired(fake_fpga(total=1), gpu()))
    instance = str(uuid.uuid4())
    allocate(placement.adapter(), instance, rp_uuid('gpu0'), {'PGPU': 1})

    # The GPU is gone; in the same sync the FPGA grows and a QAT VF
    # appears: the kept RP must not hold those back.
    result = placement_sync.sync_provider_tree(
        client, compute_node, desired(fake_fpga(total=2), qat_vf(0)))

    gpu_name = '%s_gpu0' % COMPUTE_HOST
    assert result.kept == {gpu_name: 'allocations still use PGPU=1'}
    assert result.deleted == [] and result.failed == {}
    assert result.updated == ['%s_fpga0' % COMPUTE_HOST]
    assert result.created == ['%s_qat_vf0' % COMPUTE_HOST]
    assert gpu_name in children(observer, compute_node)
    # Kept, but nothing new may land on a device that is gone.
    assert inventory(observer, 'gpu0')['PGPU']['reserved'] == 1
    assert inventory(observer, 'fpga0')['FPGA']['total'] == 2

    # Retried on each sync; no write while the allocation remains.
    again = placement_sync.sync_provider_tree(
        client, compute_node, desired(fake_fpga(total=2), qat_vf(0)))
    assert again.kept == {gpu_name: 'allocations still use PGPU=1'}
    assert again.writes == 0

    placement.adapter().delete('/allocations/%s' % instance,
                               microversion=placement_client.MICROVERSION)
    later = placement_sync.sync_provider_tree(
        client, compute_node, desired(fake_fpga(total=2), qat_vf(0)))
    assert later.deleted == [gpu_name]
    assert later.kept == {}
    assert observer.get_provider(rp_uuid('gpu0')) is None


def test_providers_of_others_are_never_touched(client, observer,
                                               compute_node):
    # A child made by another service (say, Neutron for a NIC), without
    # OWNER_CYBORG, and a child of ours that the foreign one hangs under.
    foreign = observer.create_provider('%s:bandwidth' % COMPUTE_HOST,
                                       parent_uuid=compute_node['uuid'])
    observer.put_inventories(foreign['uuid'], 0,
                             {'NET_BW_EGR_KILOBIT_PER_SEC': {'total': 1000}})
    placement_sync.sync_provider_tree(client, compute_node,
                                      desired(fake_fpga()))
    foreign_generation = observer.get_traits(foreign['uuid'])[0]

    result = placement_sync.sync_provider_tree(client, compute_node,
                                               desired())

    assert result.deleted == ['%s_fpga0' % COMPUTE_HOST]
    assert observer.get_traits(foreign['uuid']) == (foreign_generation,
                                                    frozenset())
    assert set(children(observer, compute_node)) == {foreign['name']}


def test_our_provider_with_foreign_child_is_kept(client, observer,
                                                 compute_node):
    placement_sync.sync_provider_tree(client, compute_node,
                                      desired(fake_fpga()))
    observer.create_provider('region-of-someone-else',
                             parent_uuid=rp_uuid('fpga0'))

    result = placement_sync.sync_provider_tree(client, compute_node,
                                               desired(gpu()))

    assert result.kept == {
        '%s_fpga0' % COMPUTE_HOST: 'has child resource providers'}
    assert result.created == ['%s_gpu0' % COMPUTE_HOST]
    assert result.failed == {}


def test_generation_conflict_stops_the_sync_instead_of_replaying_it(
        placement, client, observer, compute_node):
    placement_sync.sync_provider_tree(client, compute_node,
                                      desired(fake_fpga(total=1)))
    meddling = MeddlingClient(placement.adapter(), observer,
                              target=rp_uuid('fpga0'))

    # The other writer may hold a newer state: ours is not written over
    # it; the caller decides again from the database.
    with pytest.raises(placement_sync.TargetOutdated):
        placement_sync.sync_provider_tree(
            meddling, compute_node, desired(fake_fpga(total=3)))

    assert meddling.meddled == 1
    assert inventory(observer, 'fpga0')['FPGA']['total'] == 1

    # Read again, the same target converges.
    result = placement_sync.sync_provider_tree(
        client, compute_node, desired(fake_fpga(total=3)))
    assert result.updated == ['%s_fpga0' % COMPUTE_HOST]
    assert inventory(observer, 'fpga0')['FPGA']['total'] == 3
    # The other writer's trait is not ours to keep: the RP is ours.
    assert traits(observer, 'fpga0') == {'CUSTOM_FAKE_DEVICE', OWNER}


class MeddlingClient(placement_client.PlacementClient):
    """Another writer changes ``target`` between our read and our write.

    It toggles a trait of its own: Placement bumps the generation only
    when the traits really change.
    """

    def __init__(self, adapter, other, target, every_time=False):
        super().__init__(adapter)
        self.other = other
        self.target = target
        self.every_time = every_time
        self.meddled = 0

    def put_inventories(self, uuid, generation, inventories):
        if uuid == self.target and (self.every_time or not self.meddled):
            self.meddled += 1
            current, traits = self.other.get_traits(uuid)
            self.other.ensure_trait('CUSTOM_MEDDLER')
            self.other.put_traits(uuid, current,
                                  traits ^ {'CUSTOM_MEDDLER'})
        return super().put_inventories(uuid, generation, inventories)


def test_global_traits_and_resource_classes_survive(placement, client,
                                                    compute_node):
    placement_sync.sync_provider_tree(client, compute_node,
                                      desired(qat_vf(0), fake_fpga()))

    result = placement_sync.sync_provider_tree(client, compute_node,
                                               desired())

    assert len(result.deleted) == 2
    # Another host may use them: they stay.
    adapter = placement.adapter()
    for path in ('/resource_classes/CUSTOM_QAT',
                 '/traits/CUSTOM_QAT_8086', '/traits/CUSTOM_FAKE_DEVICE',
                 '/traits/OWNER_CYBORG'):
        response = adapter.get(path, raise_exc=False,
                               microversion=placement_client.MICROVERSION)
        assert response.status_code in (200, 204), path


def test_provider_that_lost_its_owner_trait_is_adopted(client, observer,
                                                       compute_node):
    # A crash between creating the RP and putting its traits leaves it
    # bare; its UUID, derived from the name, still marks it as ours.
    name = '%s_fpga0' % COMPUTE_HOST
    observer.create_provider(name, uuid=rp_uuid('fpga0'),
                             parent_uuid=compute_node['uuid'])

    result = placement_sync.sync_provider_tree(client, compute_node,
                                               desired(fake_fpga()))

    assert result.updated == [name] and result.created == []
    assert traits(observer, 'fpga0') == {'CUSTOM_FAKE_DEVICE', OWNER}


def test_name_taken_elsewhere_fails_only_that_provider(placement, client,
                                                       observer,
                                                       compute_node):
    # The same name already exists in another host's tree.
    other_host = create_compute_node(placement.adapter(), 'compute2')
    observer.create_provider('%s_gpu0' % COMPUTE_HOST,
                             parent_uuid=other_host['uuid'])

    result = placement_sync.sync_provider_tree(
        client, compute_node, desired(gpu(), fake_fpga()))

    assert set(result.failed) == {'%s_gpu0' % COMPUTE_HOST}
    assert 'placement.duplicate_name' in result.failed[
        '%s_gpu0' % COMPUTE_HOST]
    assert result.created == ['%s_fpga0' % COMPUTE_HOST]


def test_sync_after_compute_node_is_gone(client, observer, compute_node):
    observer.delete_provider(compute_node['uuid'])

    with pytest.raises(placement_sync.ComputeNodeGone):
        placement_sync.sync_provider_tree(client, compute_node,
                                          desired(fake_fpga()))


def test_sync_over_http(placement, compute_node):
    # What a conductor in its own process does: the served port.
    client = placement_client.PlacementClient(placement.http_adapter())
    found = placement_sync.find_compute_node(client, [COMPUTE_HOST])
    wanted = desired(fake_fpga(), gpu())

    first = placement_sync.sync_provider_tree(client, found, wanted)
    second = placement_sync.sync_provider_tree(client, found, wanted)

    assert len(first.created) == 2
    assert second.writes == 0 and not second.changed


@pytest.mark.parametrize('count', [1, 16, 64])
def test_call_counts_grow_linearly(client, compute_node, count):
    wanted = desired(*(qat_vf(i) for i in range(count)))
    cache = placement_sync.ProviderTreeCache()

    first = placement_sync.sync_provider_tree(client, compute_node, wanted,
                                              cache)
    cached = placement_sync.sync_provider_tree(client, compute_node, wanted,
                                               cache)
    uncached = placement_sync.sync_provider_tree(client, compute_node,
                                                 wanted)

    # POST + PUT inventories + PUT traits per RP; one custom RC and two
    # custom traits, each ensured once per sync.
    assert (first.reads, first.writes) == (1, 3 * count + 3)
    assert (cached.reads, cached.writes) == (1, 0)
    assert (uncached.reads, uncached.writes) == (1 + 2 * count, 0)
