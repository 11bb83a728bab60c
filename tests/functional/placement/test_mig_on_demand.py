"""A GPU of MIG instances made on demand, as the agent discovers it (the
recorded H100 host's tree and the NVML stand-in with the H100 80GB's
profile and placement tables) and as a real Placement offers it: one
provider of compute slices, memory slices and the media engine, with a
trait for each profile the card can still create.

Counters alone cannot say whether a profile fits: the placements do.
"""

import pytest

from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import mig_nvml
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.conductor import inventory as inventory_sync
from cyborg.conductor import placement_sync
from tests.functional.conductor import inventories
from tests.functional.placement.conftest import COMPUTE_HOST
from tests.placement_service import placement  # noqa: F401
from tests.unit.drivers.conftest import make_driver_conf
from tests.unit.drivers.conftest import mig_nvml as mig_stand_in  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

H100 = hosts.H100.bdf
ON_DEMAND = {('gpu_devices', 'mig_on_demand_addresses'): [H100]}
# Slices and media engine of each profile, as a device profile asks.
ASKED = {
    '1g.10gb': (1, 1, 0), '1g.20gb': (1, 2, 0), '2g.20gb': (2, 2, 0),
    '3g.40gb': (3, 4, 0), '4g.40gb': (4, 4, 0), '7g.80gb': (7, 8, 1),
    '1g.10gb+me': (1, 1, 1)}


@pytest.fixture
def host(tmp_path, mig_stand_in):  # noqa: F811
    root = tmp_path / 'host'
    sysfs.build(root, [f for f in hosts.H100_HOST
                       if f.bdf in {H100, hosts.H100.parent}])
    mig_stand_in(H100)
    driver = nvidia.NvidiaGPUDriver(make_driver_conf(ON_DEMAND),
                                    pci.PCIReader(str(root)))
    return driver


def discover(driver):
    [gpu] = [d for d in driver.discover()
             if d.controlpath_info['bus'] == '4e']
    [deployable] = gpu.deployables
    return deployable


def publish(client, compute_node, driver):
    deployable = discover(driver)
    result = placement_sync.sync_provider_tree(
        client, compute_node, placement_sync.desired_providers(
            COMPUTE_HOST, [deployable]))
    assert not result.failed, result.failed
    return deployable


def candidates(service, profile):
    compute, memory, media = ASKED[profile]
    resources = ('CUSTOM_MIG_COMPUTE_SLICE:%d,CUSTOM_MIG_MEMORY_SLICE:%d'
                 % (compute, memory))
    if media:
        resources += ',CUSTOM_MIG_MEDIA_ENGINE:1'
    trait = 'CUSTOM_MIG_PROFILE_' + profile.upper().replace(
        '.', '_').replace('+', '_')
    # A trait no provider ever had is unknown to Placement: 400.
    service.client().ensure_trait(trait)
    answer = service.adapter().get('/allocation_candidates', params={
        'resources': resources, 'required': trait},
        microversion='1.29').json()
    return len(answer['allocation_requests'])


def offered(service):
    return {profile for profile in ASKED if candidates(service, profile)}


def test_an_empty_card_offers_every_profile_in_one_provider(
        host, client, compute_node, placement):  # noqa: F811
    deployable = publish(client, compute_node, host)

    assert deployable.name == 'migs_' + H100
    assert deployable.resource_class == 'CUSTOM_MIG_COMPUTE_SLICE'
    assert deployable.num_accelerators == 7
    assert [h.attach_info['slot'] for h in deployable.attach_handles] == [
        str(n) for n in range(7)]
    assert {h.attach_type for h in deployable.attach_handles} == {'MIG'}
    rp = placement_sync.provider_uuid('%s_%s' % (COMPUTE_HOST,
                                                 deployable.name))
    inventories = client.get_inventories(rp)[1]
    assert {rc: inv['total'] for rc, inv in inventories.items()} == {
        'CUSTOM_MIG_COMPUTE_SLICE': 7, 'CUSTOM_MIG_MEMORY_SLICE': 8,
        'CUSTOM_MIG_MEDIA_ENGINE': 1}
    assert offered(placement) == set(ASKED)


def test_the_traits_follow_what_the_card_can_still_create(
        host, client, compute_node, placement):  # noqa: F811
    card = mig_nvml.MIGCard(H100)
    card.create('3g.40gb', 0)

    publish(client, compute_node, host)

    # The 3g.40gb took slots 0-3: a second fits at 4; no 4g.40gb (slot 0
    # only) nor 7g.80gb. Counters alone (4 compute, 4 memory free) would
    # offer a 4g.40gb.
    assert offered(placement) == {'1g.10gb', '1g.20gb', '2g.20gb', '3g.40gb',
                               '1g.10gb+me'}


def test_a_fragmented_card_offers_no_large_profile(
        host, client, compute_node, placement):  # noqa: F811
    card = mig_nvml.MIGCard(H100)
    for start in (0, 1, 5):
        card.create('1g.10gb', start)

    publish(client, compute_node, host)

    # 4 compute and 5 memory slices free, yet no 3g.40gb (slot 0 or 4)
    # nor 4g.40gb fits: Placement is not offered them.
    assert candidates(placement, '3g.40gb') == 0
    assert candidates(placement, '4g.40gb') == 0
    assert offered(placement) == {'1g.10gb', '1g.20gb', '2g.20gb',
                               '1g.10gb+me'}


def test_a_drained_card_reserves_every_inventory(host):
    deployable = discover(host)

    [provider] = placement_sync.desired_providers(
        COMPUTE_HOST, [deployable], disabled=[deployable.name])

    assert {rc: (inv['total'], inv['reserved'])
            for rc, inv in provider.inventories.items()} == {
        'CUSTOM_MIG_COMPUTE_SLICE': (7, 7), 'CUSTOM_MIG_MEMORY_SLICE': (8, 8),
        'CUSTOM_MIG_MEDIA_ENGINE': (1, 1)}


def test_the_slices_survive_the_database_on_their_way_to_placement(
        host, admin_context, db):
    """The report is stored, and the providers are built from the rows,
    as the conductor does after a restart."""
    [gpu] = [d for d in host.discover() if d.controlpath_info['bus'] == '4e']
    inventory_sync.apply_host_inventory(admin_context, inventories.copy(
        inventories.host(gpu)))

    [stored] = inventory_sync.host_deployables(admin_context,
                                               inventories.HOST)

    assert stored.pool is None
    assert stored.extra_inventories == (('CUSTOM_MIG_MEDIA_ENGINE', 1),
                                        ('CUSTOM_MIG_MEMORY_SLICE', 8))
    assert stored.held_back == (('CUSTOM_MIG_COMPUTE_SLICE', 0),
                                ('CUSTOM_MIG_MEMORY_SLICE', 0))
    [provider] = placement_sync.desired_providers(inventories.HOST,
                                                  [stored])
    assert sorted(provider.inventories) == [
        'CUSTOM_MIG_COMPUTE_SLICE', 'CUSTOM_MIG_MEDIA_ENGINE',
        'CUSTOM_MIG_MEMORY_SLICE']


def test_slices_no_placement_can_use_are_reserved(
        host, client, compute_node, placement):  # noqa: F811
    """A 3g.40gb at 0 and a 2g.20gb at 4 leave compute slices 3 and 6 and
    memory slices 6 and 7 free, but compute slice 3 lies under the
    3g.40gb's memory: only a 1g at 6 can still be made. Counted free,
    Placement would give a 2g.20gb the two compute slices."""
    card = mig_nvml.MIGCard(H100)
    card.create('3g.40gb', 0)
    card.create('2g.20gb', 4)

    deployable = publish(client, compute_node, host)

    assert deployable.attributes['reserved:CUSTOM_MIG_COMPUTE_SLICE'] == '1'
    assert deployable.attributes['reserved:CUSTOM_MIG_MEMORY_SLICE'] == '0'
    rp = placement_sync.provider_uuid('%s_%s' % (COMPUTE_HOST,
                                                 deployable.name))
    inventories = client.get_inventories(rp)[1]
    assert inventories['CUSTOM_MIG_COMPUTE_SLICE']['reserved'] == 1
    assert inventories['CUSTOM_MIG_MEMORY_SLICE']['reserved'] == 0
    assert offered(placement) == {'1g.10gb', '1g.20gb', '1g.10gb+me'}


def test_a_drained_card_reserves_no_more_than_it_has(host):
    card = mig_nvml.MIGCard(H100)
    card.create('3g.40gb', 0)
    deployable = discover(host)

    [provider] = placement_sync.desired_providers(
        COMPUTE_HOST, [deployable], disabled=[deployable.name])

    assert provider.inventories['CUSTOM_MIG_COMPUTE_SLICE']['reserved'] == 7
