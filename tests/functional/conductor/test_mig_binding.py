"""MIG instances made on demand, from the API to the card and back, on
each database engine with a real Placement.

API, conductor and the agent's endpoint share oslo.messaging's in-process
transport; the agent's NVIDIA driver serves the recorded H100 host's
tree, the card is the NVML stand-in with the H100 80GB's profile and
placement tables, and the agent's privileged calls run in the test
process, their checks included. Placement holds the GPU's provider: its
traits must say, after every bind and unbind, which profiles the card
can still create.
"""

import threading
import types
import uuid

import prometheus_client
import pytest

from cyborg.conductor import mig
from cyborg.metrics import agent as agent_metrics
from cyborg.metrics import conductor as conductor_metrics
from tests import arq_stack
from tests import threads
from tests.arq_stack import ARQS
from tests.functional.conductor import mig_host
from tests.functional.conductor.mig_host import HOST
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401

SLICES = {'1g.10gb': (1, 1), '3g.40gb': (3, 4), '4g.40gb': (4, 4),
          '7g.80gb': (7, 8), '2g.20gb': (2, 2)}


class Rig(mig_host.Tenant):

    def __init__(self, api, library, placement_client, rp, metrics,
                 driver, binder):
        super().__init__(api, library, rp)
        self.placement = placement_client
        self.metrics = metrics
        self.driver = driver
        self.binder = binder

    def free_slices(self):
        """{kind: free slices} of the GPU in the agent's metrics."""
        registry = prometheus_client.CollectorRegistry()
        registry.register(agent_metrics.AgentCollector(
            HOST, lambda: types.SimpleNamespace(drivers=[self.driver])))
        return {kind: registry.get_sample_value('cyborg_mig_free_slices', {
            'Hostname': HOST, 'address': mig_host.H100, 'kind': kind})
            for kind in agent_metrics.MIG_SLICE_KINDS}

    def counted(self):
        """{outcome: MIG instances the conductor counted}."""
        return {outcome: self.metrics.registry.get_sample_value(
            'cyborg_conductor_mig_instances_total', {'outcome': outcome})
            for outcome in conductor_metrics.MIG_OUTCOMES}

    def offered(self):
        """The profiles Placement says the GPU can still create."""
        traits = self.placement.get_traits(self.rp)[1]
        return sorted(
            mig.profile_asked({'trait:' + t: 'required'}) for t in traits
            if t.startswith(mig.TRAIT_PREFIX))


@pytest.fixture
def rig(conf, db, tmp_path, monkeypatch, admin_context, privileged_on,
        mig_nvml, placement):  # noqa: F811
    metrics = conductor_metrics.ConductorMetrics()
    kept = {}
    with mig_host.mig_host(conf, db, tmp_path, monkeypatch, admin_context,
                           privileged_on, mig_nvml, placement,
                           SLICES) as host, arq_stack.serving_with_agent(
            conf, db, HOST, [host.driver], agent_args={'glance': None},
            binder_args={'sync': host.sync, 'metrics': metrics},
            kept=kept) as api:
        yield Rig(api, host.library, host.client, host.rp, metrics,
                  host.driver, kept['binder'])


def binding_in_thread(rig, bound, name, profile):
    """A bind of ``profile`` in its own thread, started: its ARQ goes to
    ``bound[name]``."""
    thread = threading.Thread(
        target=lambda: bound.setdefault(name, rig.bind(profile)))
    thread.start()
    return thread


def test_each_bind_gets_its_own_instance_and_the_traits_follow(rig):
    assert rig.offered() == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                             '3g.40gb', '4g.40gb', '7g.80gb']
    assert rig.free_slices() == {'compute': 7, 'memory': 8, 'media': 1}

    big = rig.bind('3g.40gb')

    assert big['state'] == 'Bound', big
    assert big['attach_handle_type'] == 'MIG'
    info = big['attach_handle_info']
    assert info['mig_profile'] == '3g.40gb'
    # Best fit: at slot 4, where it leaves the 4g.40gb creatable.
    assert info['start'] == '4'
    assert rig.held()[info['mig_uuid']] == ('3g.40gb', 4)
    assert '7g.80gb' not in rig.offered()
    assert '4g.40gb' in rig.offered()
    assert rig.free_slices() == {'compute': 4, 'memory': 4, 'media': 1}

    small = [rig.bind('1g.10gb') for _ in range(4)]

    assert [a['state'] for a in small] == ['Bound'] * 4
    uuids = {a['attach_handle_info']['mig_uuid'] for a in small}
    assert len(uuids | {info['mig_uuid']}) == 5
    assert sorted(int(a['attach_handle_info']['start']) for a in small) == [
        0, 1, 2, 3]
    # The card is full: Placement offers nothing more.
    assert rig.offered() == []
    assert rig.free_slices() == {'compute': 0, 'memory': 0, 'media': 1}

    freed = rig.unbind(big)

    assert freed['state'] == 'Unbound'
    assert info['mig_uuid'] not in rig.held()
    assert len(rig.held()) == 4
    assert rig.offered() == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                             '3g.40gb']
    assert rig.counted() == {'created': 5, 'destroyed': 1, 'moved': 0,
                             'packed': 0, 'refused': 0}


# The refusal is the card's: one engine is enough.
@pytest.mark.parametrize('database_url', ['sqlite'], indirect=True)
def test_a_bind_the_card_cannot_place_fails_with_that_reason(rig):
    first = rig.bind('4g.40gb')
    assert first['state'] == 'Bound'
    assert rig.offered() == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                             '3g.40gb']

    # A 7g.80gb, as a scheduler that raced the first bind would ask: the
    # card refuses it and nothing is made.
    refused = rig.bind('7g.80gb')

    assert refused['state'] == 'BindFailed'
    assert len(rig.held()) == 1
    assert rig.counted() == {'created': 1, 'destroyed': 0, 'moved': 0,
                             'packed': 0, 'refused': 1}


def test_an_arq_binds_by_the_profile_revision_it_was_made_from(rig):
    """A profile changed from 1g.10gb to 2g.20gb between the creation
    and the bind of an ARQ: that ARQ still gets a 1g.10gb instance,
    while one made after the change gets a 2g.20gb."""
    v27 = {'OpenStack-API-Version': 'accelerator 2.7'}
    made_before = rig.bind('1g.10gb')
    waiting, = rig.api.post_json(ARQS, {
        'device_profile_name': 'mig-1g.10gb'}, headers=v27).json['arqs']
    assert waiting['device_profile_revision'] == 1

    updated = rig.api.patch_json('/v2/device_profiles/mig-1g.10gb', {
        'groups': [{'resources:CUSTOM_MIG_COMPUTE_SLICE': '2',
                    'resources:CUSTOM_MIG_MEMORY_SLICE': '2',
                    'trait:CUSTOM_MIG_PROFILE_2G_20GB': 'required'}]},
        headers=v27).json['device_profile']
    assert updated['revision'] == 2

    instance = str(uuid.uuid4())
    rig.api.patch_json(ARQS, arq_stack.bind_body([waiting], rig.rp,
                                                 instance, HOST))
    old, = arq_stack.wait_resolved(rig.api, instance)
    new = rig.bind('1g.10gb')

    assert [a['state'] for a in (made_before, old, new)] == ['Bound'] * 3
    assert [a['attach_handle_info']['mig_profile']
            for a in (made_before, old, new)] == [
        '1g.10gb', '1g.10gb', '2g.20gb']
    assert sorted(profile for profile, _ in rig.held().values()) == [
        '1g.10gb', '1g.10gb', '2g.20gb']
    shown = rig.api.get(ARQS + '/' + new['uuid'], headers=v27).json
    assert shown['device_profile_revision'] == 2


# The order of two binds' writes is the conductor's: one engine is enough.
@pytest.mark.parametrize('database_url', ['sqlite'], indirect=True)
def test_two_binds_on_one_card_leave_the_traits_of_the_last(rig,
                                                            monkeypatch):
    """The first bind's answer reaches Placement late (its thread held
    after the card made its instance): the second bind, on the same card,
    waits for it, so the traits left are those of the card with both
    instances, not the first bind's older view."""
    import pynvml

    from cyborg.conductor import binding
    from tests.unit.drivers import test_nvml_mig_standin as standin

    entered, held = threading.Event(), threading.Event()
    follow = binding.Binder._follow_mig_traits

    def late_first(self, context, deployable, creatable, stranded):
        if not entered.is_set():
            entered.set()
            held.wait(3)  # the second bind finishes meanwhile, or waits
        return follow(self, context, deployable, creatable, stranded)

    monkeypatch.setattr(binding.Binder, '_follow_mig_traits', late_first)
    bound = {}
    first = binding_in_thread(rig, bound, 'first', '3g.40gb')
    assert entered.wait(10)
    second = binding_in_thread(rig, bound, 'second', '4g.40gb')
    second.join(30)
    held.set()
    first.join(30)

    assert [bound[k]['state'] for k in ('first', 'second')] == [
        'Bound', 'Bound']
    gpu = pynvml.nvmlDeviceGetHandleByPciBusId(mig_host.H100)
    creatable = sorted(name for name, count
                       in standin.capacity(gpu).items() if count > 0)
    assert creatable == []  # a 3g.40gb and a 4g.40gb fill the card
    assert rig.offered() == creatable


def claim(rig, profile):
    """A new instance holding ``profile``'s slices of the GPU in
    Placement, as Nova's scheduler claims them before the bind."""
    instance = str(uuid.uuid4())
    compute, memory = SLICES[profile]
    rig.placement.put_allocations(instance, {rig.rp: {'resources': {
        'CUSTOM_MIG_COMPUTE_SLICE': compute,
        'CUSTOM_MIG_MEMORY_SLICE': memory}}}, None, 'demo-project',
        'demo-user', 'INSTANCE')
    return instance


def test_a_bind_leaves_room_for_the_instances_placement_gave_its_card(
        rig, monkeypatch):
    """Two boots served from one snapshot of the traits: Placement gave
    an empty card a 1g.10gb and a 4g.40gb. Best fit alone puts the
    1g.10gb at slot 0, the 4g.40gb's only start; the conductor reads the
    4g.40gb's claim on the GPU's provider, before its bind even comes,
    and the 1g.10gb goes past slot 3."""
    from cyborg.conductor import binding

    weighed = []
    waiting = binding.Binder._mig_waiting
    monkeypatch.setattr(
        binding.Binder, '_mig_waiting',
        lambda *args: weighed.append(waiting(*args)) or weighed[-1])
    small, large = claim(rig, '1g.10gb'), claim(rig, '4g.40gb')

    first = arq_stack.bind_one(rig.api, 'mig-1g.10gb', rig.rp, small, HOST)
    second = arq_stack.bind_one(rig.api, 'mig-4g.40gb', rig.rp, large, HOST)

    assert [first['state'], second['state']] == ['Bound', 'Bound']
    assert int(first['attach_handle_info']['start']) >= 4
    assert second['attach_handle_info']['start'] == '0'
    # The 1g.10gb made, its claim is accounted for; a bind never waits
    # for its own instance.
    assert weighed == [['4g.40gb'], []]
    assert rig.counted()['refused'] == 0


# The database's list, when Placement cannot be read: one engine would
# do, but the query is the database's.
def test_without_placement_a_bind_leaves_room_for_binds_under_way(
        rig, monkeypatch):
    """The same two binds when the allocations cannot be read: the
    conductor weighs the binds under way on the card in the database,
    here the 4g.40gb, bound while the 1g.10gb waits for the card."""
    import time

    from cyborg.clients import placement as placement_client
    from cyborg.conductor import binding
    from cyborg.db.api import arqs as arqs_db

    def unreadable(self, uuid):
        raise placement_client.PlacementError(
            'GET', '/resource_providers/%s/allocations' % uuid, 503)

    monkeypatch.setattr(placement_client.PlacementClient,
                        'get_provider_allocations', unreadable)
    entered = threading.Event()
    waiting = binding.Binder._mig_waiting
    seen = []

    def once_the_other_waits(self, context, deployable, item):
        if not entered.is_set():
            entered.set()
            deadline = time.monotonic() + 10
            while (len(arqs_db.requests_on_provider(
                    context, item['device_rp_uuid'])) < 2
                   and time.monotonic() < deadline):
                time.sleep(0.02)
        seen.append(waiting(self, context, deployable, item))
        return seen[-1]

    monkeypatch.setattr(binding.Binder, '_mig_waiting',
                        once_the_other_waits)
    bound = {}
    small = binding_in_thread(rig, bound, 'small', '1g.10gb')
    assert entered.wait(10)
    large = binding_in_thread(rig, bound, 'large', '4g.40gb')
    small.join(30)
    large.join(30)

    assert seen == [['4g.40gb'], []]
    assert [bound[k]['state'] for k in ('small', 'large')] == [
        'Bound', 'Bound']
    assert int(bound['small']['attach_handle_info']['start']) >= 4
    assert bound['large']['attach_handle_info']['start'] == '0'
    assert rig.counted()['refused'] == 0


def test_two_requests_of_one_instance_on_one_gpu_leave_each_other_room(
        rig, admin_context):
    """One instance asks for a 1g.10gb and a 4g.40gb of the same GPU (one
    device profile of two groups, bound in one PATCH): its claim there is
    their sum, which names no profile. The 1g.10gb, made first, leaves
    the 4g.40gb its only start, slot 0."""
    arq_stack.make_profile(admin_context, 'mig-pair', [
        {'resources:CUSTOM_MIG_COMPUTE_SLICE': '1',
         'resources:CUSTOM_MIG_MEMORY_SLICE': '1',
         'trait:CUSTOM_MIG_PROFILE_1G_10GB': 'required'},
        {'resources:CUSTOM_MIG_COMPUTE_SLICE': '4',
         'resources:CUSTOM_MIG_MEMORY_SLICE': '4',
         'trait:CUSTOM_MIG_PROFILE_4G_40GB': 'required'}])
    instance = str(uuid.uuid4())
    rig.placement.put_allocations(instance, {rig.rp: {'resources': {
        'CUSTOM_MIG_COMPUTE_SLICE': 5, 'CUSTOM_MIG_MEMORY_SLICE': 5}}},
        None, 'demo-project', 'demo-user', 'INSTANCE')
    arqs = rig.api.post_json(ARQS, {
        'device_profile_name': 'mig-pair'}).json['arqs']

    rig.api.patch_json(ARQS, arq_stack.bind_body(arqs, rig.rp, instance,
                                                 HOST))
    bound = arq_stack.wait_resolved(rig.api, instance)

    assert [a['state'] for a in bound] == ['Bound', 'Bound'], bound
    made = {a['attach_handle_info']['mig_profile']:
            int(a['attach_handle_info']['start']) for a in bound}
    assert made['4g.40gb'] == 0
    assert made['1g.10gb'] >= 4
    assert rig.counted()['refused'] == 0


def test_placement_holds_back_the_slices_no_placement_can_use(rig, conf):
    """A 3g.40gb at slot 0 takes compute slices 0-2 and memory slices 0-3:
    compute slice 3 stays free, but no profile can start there, so
    Placement must not count it, or a 4g.40gb's worth of compute slices
    would seem free where none can be made."""
    conf.set_override('mig_placement_rule', 'lowest-slot', group='conductor')

    def reserved():
        inventories = rig.placement.get_inventories(rig.rp)[1]
        return {rc: inventories[rc]['reserved'] for rc in (
            'CUSTOM_MIG_COMPUTE_SLICE', 'CUSTOM_MIG_MEMORY_SLICE')}

    made = rig.bind('3g.40gb')

    assert made['attach_handle_info']['start'] == '0'
    assert reserved() == {'CUSTOM_MIG_COMPUTE_SLICE': 1,
                          'CUSTOM_MIG_MEMORY_SLICE': 0}

    rig.unbind(made)

    assert reserved() == {'CUSTOM_MIG_COMPUTE_SLICE': 0,
                          'CUSTOM_MIG_MEMORY_SLICE': 0}


# Two 2g.20gb and a 1g.10gb; the 2g.20gb go, another 1g.10gb comes.
CHURN = [('+', 'a', '2g.20gb'), ('+', 'b', '2g.20gb'), ('+', 'c', '1g.10gb'),
         ('-', 'a'), ('-', 'b'), ('+', 'd', '1g.10gb')]


def churn(rig):
    """Bind ('+', key, profile) and unbind ('-', key) in turn, through
    the API: the ARQs still bound, by key."""
    live = {}
    for step in CHURN:
        if step[0] == '+':
            live[step[1]] = rig.bind(step[2])
            assert live[step[1]]['state'] == 'Bound', live[step[1]]
        else:
            assert rig.unbind(live.pop(step[1]))['state'] == 'Unbound'
    return live


def starts(arqs):
    return sorted(int(a['attach_handle_info']['start'])
                  for a in arqs.values())


def test_best_fit_avoids_the_fragmentation_lowest_slot_falls_into(
        rig, conf, caplog):
    """The same binds and unbinds under each rule. The lowest slot leaves
    1g.10gb instances at 0 and 4: five compute and six memory slices
    free, yet no start for a 3g.40gb or a 4g.40gb; Placement stops
    offering them, and a bind that comes anyway is refused by the card,
    with that reason. Best fit puts them at 4 and 5: the first half of
    the card stays whole."""
    conf.set_override('mig_placement_rule', 'lowest-slot', group='conductor')

    lowest = churn(rig)

    assert starts(lowest) == [0, 4]
    assert rig.free_slices() == {'compute': 5, 'memory': 6, 'media': 1}
    assert rig.offered() == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb']
    refused = rig.bind('3g.40gb')
    assert refused['state'] == 'BindFailed'
    assert ('The GPU at %s is too fragmented for 3g.40gb now' % mig_host.H100
            in caplog.text)
    for arq in lowest.values():
        rig.unbind(arq)
    assert rig.held() == {}

    conf.set_override('mig_placement_rule', 'best-fit', group='conductor')

    best = churn(rig)

    assert starts(best) == [4, 5]
    assert rig.free_slices() == {'compute': 5, 'memory': 6, 'media': 1}
    assert {'3g.40gb', '4g.40gb'} <= set(rig.offered())
    made = rig.bind('3g.40gb')
    assert made['state'] == 'Bound'
    assert made['attach_handle_info']['start'] == '0'
    assert rig.counted()['refused'] == 1


def test_binds_racing_on_one_card_each_get_their_own_instance(rig):
    """A 3g.40gb and four 1g.10gb bound at the same instant, each for its
    own instance: every one gets an instance of its own, at a start no
    other holds, and the card holds those five and no other."""
    profiles = ['3g.40gb', '1g.10gb', '1g.10gb', '1g.10gb', '1g.10gb']

    bound = threads.race(len(profiles), lambda i: rig.bind(profiles[i]))

    assert [a['state'] for a in bound] == ['Bound'] * 5, bound
    made = {a['attach_handle_info']['mig_uuid']: (
        a['attach_handle_info']['mig_profile'],
        int(a['attach_handle_info']['start'])) for a in bound}
    assert len(made) == 5
    assert rig.held() == made
    assert len({a['attach_handle_uuid'] for a in bound}) == 5
    assert rig.offered() == []
    assert rig.counted() == {'created': 5, 'destroyed': 0, 'moved': 0,
                             'packed': 0, 'refused': 0}


def test_one_arq_bound_by_two_conductors_at_once_gets_one_instance(
        rig, admin_context):
    """The same ARQ's bind run twice at the same instant, as by a
    conductor that took over the bind of one it wrongly thought dead: the
    card makes one instance, and the ARQ is Bound to it."""
    from cyborg.db.api import arqs as arqs_db

    arq, = rig.api.post_json(ARQS, {
        'device_profile_name': 'mig-2g.20gb'}).json['arqs']
    arqs_db.start_binding(admin_context, {arq['uuid']: {
        'hostname': HOST, 'device_rp_uuid': rig.rp,
        'instance_uuid': str(uuid.uuid4())}})
    first, = arqs_db.claim_binds(admin_context, [arq['uuid']], 'conductor-a',
                                 60)
    second, = arqs_db.take_over_binds(admin_context, [arq['uuid']],
                                      'conductor-a', 'conductor-b', 60)

    threads.race(2, lambda i: rig.binder._bind_one(
        admin_context, (first, second)[i]))

    shown = rig.get(arq)
    assert shown['state'] == 'Bound', shown
    info = shown['attach_handle_info']
    assert rig.held() == {info['mig_uuid']: ('2g.20gb', int(info['start']))}
    assert rig.counted()['created'] == 1
