"""Pooled resource providers: identical GPUs of a host as one provider.

Three engines and a real Placement: the conductor publishes the pools,
Placement schedules several GPUs in one request group onto them, binds
take distinct member handles, a member's state moves the pool by one,
and switching a host's layout keeps every allocation (reshaper) and
every bound ARQ's handle.
"""

import threading
import urllib.parse
import uuid

import pytest
import sqlalchemy as sa

from cyborg.clients import placement as placement_client
from cyborg.conductor import host_sync as host_sync_module
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.db.api import health_override
from cyborg.objects import inventory
from tests import arq_stack
from tests.arq_stack import ARQS
from tests.arq_stack import handles_in_use
from tests.functional.conductor.conftest import HOST
from tests.functional.conductor.inventories import copy
from tests.functional.conductor.inventories import host
from tests.placement_service import allocate

NAMES = [HOST]
PGPU_TRAITS = ['CUSTOM_GPU_NVIDIA', 'CUSTOM_GPU_PRODUCT_ID_2330']


def h100(bus, numa_node='0'):
    """A whole H100 at 0000:<bus>:00.0, as the NVIDIA driver reports it."""
    address = inventory.PCIAddress('0000', bus, '00', '0')
    return inventory.Device(
        type='GPU', vendor='10de', model='H100',
        controlpath_type='PCI', controlpath_info=address.as_info(),
        std_board_info={'vendor_id': '10de', 'product_id': '2330',
                        'numa_node': numa_node},
        deployables=[inventory.Deployable(
            name='gpu_%s' % bus, num_accelerators=1, resource_class='PGPU',
            driver_name='nvidia_gpu_driver', traits=PGPU_TRAITS,
            attach_handles=[inventory.AttachHandle('PCI',
                                                   address.as_info())])])


BUSES = ['%02x' % (0x18 + 0x10 * i) for i in range(8)]


def eight_gpus():
    return host(*[h100(bus) for bus in BUSES])


def report(sync, context, inventory_):
    return sync.report(context, copy(inventory_).to_dict(), NAMES)


@pytest.fixture
def api(conf, db):
    """The API under WebTest and a conductor that binds, on one
    in-process transport."""
    with (arq_stack.fake_transport(conf) as transport,
          arq_stack.serving_conductor(transport, db,
                                      arq_stack.binder(conf))):
        yield arq_stack.webtest_app(conf, db, transport)


@pytest.fixture
def pooled(client):
    return host_sync_module.HostSync(client, layout=placement_sync.POOLED)


def children(observer, compute_node):
    return {rp['uuid']: rp
            for rp in observer.providers_in_tree(compute_node['uuid'])
            if rp['parent_provider_uuid'] == compute_node['uuid']}


def the_pool(observer, compute_node):
    pool, = children(observer, compute_node).values()
    return pool['uuid']


def pgpu(observer, rp):
    return observer.get_inventories(rp)[1]['PGPU']


def rp_of(db, deployable_name):
    with db.engine.connect() as connection:
        return connection.execute(sa.select(models.Deployable.rp_uuid).where(
            models.Deployable.name == deployable_name)).scalar_one()


def device_uuid(db, deployable_name):
    with db.engine.connect() as connection:
        return connection.execute(
            sa.select(models.Device.uuid).join(
                models.Deployable,
                models.Deployable.device_id == models.Device.id).where(
                models.Deployable.name == deployable_name)).scalar_one()


def candidates(placement, query):
    answer = placement.adapter().get(
        '/allocation_candidates?' + urllib.parse.urlencode(query),
        microversion=placement_client.MICROVERSION)
    assert answer.status_code == 200, answer.text
    return answer.json()['allocation_requests']


def bind_all(api, profile, rp, instance):
    arqs = api.post_json(ARQS, {'device_profile_name': profile}).json['arqs']
    api.patch_json(ARQS, arq_stack.bind_body(arqs, rp, instance, HOST))
    return arq_stack.wait_resolved(api, instance)


def test_identical_gpus_share_a_provider_per_numa_node(
        placement, pooled, admin_context, db, observer, compute_node):
    gpus = [h100(bus) for bus in BUSES[:5]] + [
        h100(bus, numa_node='1') for bus in BUSES[5:]]
    summary = report(pooled, admin_context, host(*gpus))

    assert summary['placement']['status'] == 'synced'
    pools = children(observer, compute_node)
    assert len(pools) == 2
    by_numa = {}
    for rp in pools:
        traits = observer.get_traits(rp)[1]
        numa = {t for t in traits if t.startswith('CUSTOM_NUMA_NODE_')}
        assert traits - numa == {*PGPU_TRAITS, 'OWNER_CYBORG'}
        by_numa[numa.pop()] = rp
    assert pgpu(observer, by_numa['CUSTOM_NUMA_NODE_0']) == {
        'total': 5, 'reserved': 0, 'min_unit': 1, 'max_unit': 5,
        'step_size': 1, 'allocation_ratio': 1.0}
    assert pgpu(observer, by_numa['CUSTOM_NUMA_NODE_1'])['total'] == 3
    # Each member records its pool.
    for bus in BUSES[:5]:
        assert rp_of(db, 'gpu_' + bus) == by_numa['CUSTOM_NUMA_NODE_0']
    for bus in BUSES[5:]:
        assert rp_of(db, 'gpu_' + bus) == by_numa['CUSTOM_NUMA_NODE_1']
    # Four GPUs in one request group: one candidate, on NUMA node 0.
    found = candidates(placement, {'resources1': 'PGPU:4', 'limit': 1000})
    assert [list(c['allocations']) for c in found] == [
        [by_numa['CUSTOM_NUMA_NODE_0']]]
    assert found[0]['allocations'][by_numa['CUSTOM_NUMA_NODE_0']][
        'resources'] == {'PGPU': 4}
    # An unchanged report of the pooled host writes nothing.
    again = report(pooled, admin_context, host(*gpus))
    assert again['placement'] == {'status': 'skipped'}


def test_a_pool_binds_four_gpus_of_one_group_to_one_instance(
        placement, pooled, admin_context, db, observer, compute_node, api):
    report(pooled, admin_context, eight_gpus())
    pool = the_pool(observer, compute_node)
    profile = arq_stack.make_profile(admin_context, 'four-gpus',
                                     [{'resources:PGPU': '4'}])
    instance = str(uuid.uuid4())
    allocate(placement.adapter(), instance, pool, {'PGPU': 4})

    bound = bind_all(api, profile, pool, instance)

    assert [a['state'] for a in bound] == ['Bound'] * 4
    assert len({a['attach_handle_uuid'] for a in bound}) == 4
    assert len({json_key(a['attach_handle_info']) for a in bound}) == 4
    assert {a['device_rp_uuid'] for a in bound} == {pool}
    assert handles_in_use(db) == 4
    assert usage(observer, pool) == 4


def json_key(info):
    return tuple(sorted(info.items()))


def usage(observer, rp):
    return observer.get_usages(rp).get('PGPU', 0)


def test_instances_racing_for_the_last_members_never_share_a_handle(
        placement, pooled, admin_context, db, observer, compute_node, api):
    report(pooled, admin_context, eight_gpus())
    pool = the_pool(observer, compute_node)
    arq_stack.make_profile(admin_context, 'six', [{'resources:PGPU': '6'}])
    arq_stack.make_profile(admin_context, 'two', [{'resources:PGPU': '2'}])
    first = bind_all(api, 'six', pool, str(uuid.uuid4()))
    assert [a['state'] for a in first] == ['Bound'] * 6

    # Two instances, two GPUs each, two members left: they race.
    racers = [str(uuid.uuid4()) for _ in range(2)]
    arqs = {i: api.post_json(ARQS, {'device_profile_name': 'two'}).json[
        'arqs'] for i in racers}
    start = threading.Barrier(2)
    errors = []

    def bind(instance):
        try:
            start.wait()
            api.patch_json(ARQS, arq_stack.bind_body(arqs[instance], pool,
                                                     instance, HOST))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=bind, args=(i,)) for i in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    results = [a for i in racers for a in arq_stack.wait_resolved(api, i)]

    won = [a for a in results if a['state'] == 'Bound']
    assert len(won) == 2
    assert sorted(a['state'] for a in results) == [
        'BindFailed', 'BindFailed', 'Bound', 'Bound']
    held = [a['attach_handle_uuid'] for a in first + won]
    assert len(set(held)) == 8
    assert handles_in_use(db) == 8


def test_disabling_quarantining_and_removing_a_member_move_the_pool_by_one(
        pooled, admin_context, db, observer, compute_node, api):
    report(pooled, admin_context, eight_gpus())
    pool = the_pool(observer, compute_node)
    assert (pgpu(observer, pool)['total'],
            pgpu(observer, pool)['reserved']) == (8, 0)

    disabled = pooled.set_device_status(
        admin_context, device_uuid(db, 'gpu_18'), 'maintaining')
    assert disabled['placement_updated']
    assert pgpu(observer, pool)['reserved'] == 1

    health_override.set_override(admin_context, device_uuid(db, 'gpu_28'),
                                 'quarantine')
    assert pooled.sync_host(admin_context, HOST)['status'] == 'synced'
    assert pgpu(observer, pool)['reserved'] == 2

    # The other six members serve binds; the two set aside do not.
    arq_stack.make_profile(admin_context, 'six', [{'resources:PGPU': '6'}])
    bound = bind_all(api, 'six', pool, str(uuid.uuid4()))
    assert [a['state'] for a in bound] == ['Bound'] * 6
    buses = {a['attach_handle_info']['bus'] for a in bound}
    assert buses == set(BUSES) - {'18', '28'}

    # A member that is gone (and free) leaves the pool's total.
    gone = report(pooled, admin_context,
                  host(*[h100(bus) for bus in BUSES if bus != '18']))
    assert gone['placement']['status'] == 'synced'
    assert (pgpu(observer, pool)['total'],
            pgpu(observer, pool)['reserved']) == (7, 1)

    health_override.set_override(admin_context, device_uuid(db, 'gpu_28'),
                                 None)
    assert pooled.sync_host(admin_context, HOST)['status'] == 'synced'
    assert pgpu(observer, pool)['reserved'] == 0


def test_switching_layouts_moves_allocations_and_keeps_handles(
        placement, client, admin_context, db, observer, compute_node, api):
    per_device = host_sync_module.HostSync(client)
    report(per_device, admin_context, eight_gpus())
    # One group per GPU, as a profile must ask on per-device providers.
    arq_stack.make_profile(admin_context, 'one', [{'resources:PGPU': '1'}])
    arq_stack.make_profile(admin_context, 'pair', [
        {'resources:PGPU': '1'}, {'resources:PGPU': '1'}])
    # Instance A holds two GPUs, B one: each allocated in Placement and
    # bound in Cyborg to the provider of one device.
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    held = {a: ['gpu_28', 'gpu_58'], b: ['gpu_48']}
    handles = {}
    for instance, names in held.items():
        allocate_many(placement, instance, {
            rp_of(db, name): {'PGPU': 1} for name in names})
        arqs = api.post_json(ARQS, {'device_profile_name': (
            'pair' if len(names) == 2 else 'one')}).json['arqs']
        body = {}
        for arq, name in zip(arqs, names, strict=True):
            body.update(arq_stack.bind_body([arq], rp_of(db, name), instance,
                                            HOST))
        api.patch_json(ARQS, body)
        for bound in arq_stack.wait_resolved(api, instance):
            assert bound['state'] == 'Bound'
            handles[bound['uuid']] = bound['attach_handle_uuid']
    before = {name: rp_of(db, name) for name in held[a] + held[b]}

    pooled = host_sync_module.HostSync(client, layout=placement_sync.POOLED)
    outcome = pooled.reconcile(admin_context)[HOST]

    assert outcome['status'] == 'synced', repr(outcome)
    assert outcome['relaid_out']
    assert sorted(outcome['reshaped']) == sorted(
        HOST + '_' + name for name in before)
    pool = the_pool(observer, compute_node)
    assert pgpu(observer, pool)['total'] == 8
    assert allocations_of(observer, a) == {pool: {'PGPU': 2}}
    assert allocations_of(observer, b) == {pool: {'PGPU': 1}}
    assert usage(observer, pool) == 3
    listed = api.get(ARQS).json['arqs']
    assert {x['uuid']: x['attach_handle_uuid'] for x in listed} == handles
    assert {x['state'] for x in listed} == {'Bound'}
    assert {x['device_rp_uuid'] for x in listed} == {pool}
    assert set(children(observer, compute_node)) == {pool}

    # And back: each instance's units return to the devices whose
    # handles its ARQs hold.
    back = host_sync_module.HostSync(client).reconcile(admin_context)[HOST]
    assert back['status'] == 'synced', back
    assert allocations_of(observer, a) == {
        before['gpu_28']: {'PGPU': 1}, before['gpu_58']: {'PGPU': 1}}
    assert allocations_of(observer, b) == {before['gpu_48']: {'PGPU': 1}}
    listed = api.get(ARQS).json['arqs']
    assert {x['uuid']: x['attach_handle_uuid'] for x in listed} == handles
    assert len(children(observer, compute_node)) == 8


def allocations_of(observer, consumer):
    found = observer.get_allocations(consumer)['allocations']
    return {rp: a['resources'] for rp, a in found.items()}


def allocate_many(placement, consumer, resources_by_provider):
    """Nova's allocation of one instance over several providers."""
    answer = placement.adapter().put(
        '/allocations/%s' % consumer,
        json={'allocations': {rp: {'resources': resources}
                              for rp, resources
                              in resources_by_provider.items()},
              'consumer_generation': None, 'consumer_type': 'INSTANCE',
              'project_id': 'demo-project', 'user_id': 'demo-user'},
        microversion=placement_client.MICROVERSION, raise_exc=False)
    assert answer.status_code == 204, answer.text
