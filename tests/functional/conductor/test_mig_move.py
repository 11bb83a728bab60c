"""A MIG request its GPU cannot place moves to another GPU of the host,
on each database engine with a real Placement.

Two H100s on one host, served by the NVML stand-in with the H100 80GB's
placement rules. The first is fragmented the way the placement rules
allow (1g.10gb instances at slots 0, 1 and 5: 4 compute and 5 memory
slices free, yet no 3g.40gb start free); Nova's scheduler, which counts
slices, claims a 3g.40gb there. The bind must end Bound on the second
GPU, with the instance's allocation moved there in Placement, rather
than fail and put the instance in ERROR.
"""

import threading
import time
import uuid

import pytest

from cyborg.clients import placement as placement_client
from cyborg.conductor import binding
from cyborg.metrics import conductor as conductor_metrics
from tests import arq_stack
from tests.arq_stack import ARQS
from tests.functional.conductor import mig_host
from tests.functional.conductor.mig_host import HOST
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401

FIRST, SECOND = '0000:12:00.0', '0000:1e:00.0'
SLICES = {'1g.10gb': (1, 1), '3g.40gb': (3, 4), '7g.80gb': (7, 8)}
COMPUTE, MEMORY = 'CUSTOM_MIG_COMPUTE_SLICE', 'CUSTOM_MIG_MEMORY_SLICE'


class Rig(mig_host.Tenant):

    def __init__(self, api, host, adapter, metrics, binder):
        super().__init__(api, host.library, host.rps[FIRST])
        self.rps = host.rps
        self.adapter = adapter
        self.metrics = metrics
        self.binder = binder

    def held_on(self, address):
        return sorted((i.profile, i.start)
                      for i in self.library.instances(address))

    def bind_on(self, profile, address):
        return arq_stack.bind_one(self.api, 'mig-' + profile,
                                  self.rps[address], str(uuid.uuid4()), HOST)

    def fragment_first(self):
        """1g.10gb instances at slots 0, 1 and 5 of the first GPU."""
        small = [self.bind_on('1g.10gb', FIRST) for _ in range(6)]
        for arq in small:
            if arq['attach_handle_info']['start'] in ('2', '3', '4'):
                assert self.unbind(arq)['state'] == 'Unbound'
        assert self.held_on(FIRST) == [('1g.10gb', 0), ('1g.10gb', 1),
                                       ('1g.10gb', 5)]

    def claim(self, instance, address, compute, memory):
        """Nova's claim of the slices on the GPU at ``address``."""
        answer = self.adapter.put('/allocations/' + instance, json={
            'allocations': {self.rps[address]: {'resources': {
                COMPUTE: compute, MEMORY: memory}}},
            'consumer_generation': None, 'consumer_type': 'INSTANCE',
            'project_id': 'p', 'user_id': 'u'},
            microversion=placement_client.MICROVERSION, raise_exc=False)
        assert answer.status_code == 204, answer.text

    def allocations(self, instance):
        return {rp: a['resources'] for rp, a in self.adapter.get(
            '/allocations/' + instance,
            microversion=placement_client.MICROVERSION).json()[
                'allocations'].items()}

    def start_bind(self, profile, address, instance):
        arq, = self.api.post_json(ARQS, {
            'device_profile_name': 'mig-' + profile}).json['arqs']
        self.api.patch_json(ARQS, arq_stack.bind_body(
            [arq], self.rps[address], instance, HOST))
        return arq

    def offers(self, address):
        """The MIG profile traits of the GPU's provider in Placement."""
        return sorted(t for t in self.adapter.get(
            '/resource_providers/%s/traits' % self.rps[address],
            microversion=placement_client.MICROVERSION).json()['traits']
            if t.startswith('CUSTOM_MIG_PROFILE_'))

    def counted(self, outcome):
        return self.metrics.registry.get_sample_value(
            'cyborg_conductor_mig_instances_total', {'outcome': outcome})


@pytest.fixture
def rig(conf, db, tmp_path, monkeypatch, admin_context, privileged_on,
        mig_nvml, placement):  # noqa: F811
    # Lowest slot: the fragmentation the test wants comes from the binds.
    conf.set_override('mig_placement_rule', 'lowest-slot', group='conductor')
    metrics = conductor_metrics.ConductorMetrics()
    kept = {}
    with mig_host.mig_host(conf, db, tmp_path, monkeypatch, admin_context,
                           privileged_on, mig_nvml, placement, SLICES,
                           addresses=[FIRST, SECOND]) as host, \
            arq_stack.serving_with_agent(
                conf, db, HOST, [host.driver], agent_args={'glance': None},
                binder_args={'sync': host.sync, 'metrics': metrics},
                kept=kept) as api:
        yield Rig(api, host, placement.adapter(), metrics, kept['binder'])


def test_a_request_its_gpu_cannot_place_moves_to_another_gpu(rig):
    rig.fragment_first()
    instance = str(uuid.uuid4())
    rig.claim(instance, FIRST, 3, 4)  # Placement's counters accept it

    arq = arq_stack.bind_one(rig.api, 'mig-3g.40gb', rig.rps[FIRST],
                             instance, HOST)

    assert arq['state'] == 'Bound', arq
    assert arq['device_rp_uuid'] == rig.rps[SECOND]
    info = arq['attach_handle_info']
    assert info['mig_profile'] == '3g.40gb'
    assert rig.held_on(SECOND) == [('3g.40gb', int(info['start']))]
    assert len(rig.held_on(FIRST)) == 3  # nothing made there for it
    assert rig.allocations(instance) == {
        rig.rps[SECOND]: {COMPUTE: 3, MEMORY: 4}}
    assert (rig.counted('moved'), rig.counted('refused')) == (1, 0)

    assert rig.unbind(arq)['state'] == 'Unbound'
    assert rig.held_on(SECOND) == []


@pytest.mark.parametrize('choice', ['fullest', 'fullest-when-alone'])
def test_the_fullest_gpu_choice_packs_a_request_on_the_busier_gpu(rig, conf,
                                                                    choice):
    conf.set_override('mig_gpu_choice', choice, group='conductor')
    busy = rig.bind_on('1g.10gb', FIRST)  # both empty: it stays
    assert busy['device_rp_uuid'] == rig.rps[FIRST]
    whole = rig.offers(SECOND)
    assert 'CUSTOM_MIG_PROFILE_7G_80GB' in whole
    instance = str(uuid.uuid4())
    rig.claim(instance, SECOND, 1, 1)  # Nova took the empty GPU

    arq = arq_stack.bind_one(rig.api, 'mig-1g.10gb', rig.rps[SECOND],
                             instance, HOST)

    assert arq['state'] == 'Bound', arq
    assert arq['device_rp_uuid'] == rig.rps[FIRST]
    assert rig.held_on(FIRST) == [('1g.10gb', 0), ('1g.10gb', 1)]
    assert rig.held_on(SECOND) == []
    assert rig.allocations(instance) == {
        rig.rps[FIRST]: {COMPUTE: 1, MEMORY: 1}}
    assert rig.offers(SECOND) == whole  # still whole for a 7g.80gb
    assert (rig.counted('packed'), rig.counted('moved')) == (1, 0)


# The choice is the conductor's: one engine is enough.
@pytest.mark.parametrize('database_url', ['sqlite'], indirect=True)
def test_the_scheduler_gpu_choice_keeps_the_gpu_nova_claimed(rig, conf):
    conf.set_override('mig_gpu_choice', 'scheduler', group='conductor')
    rig.bind_on('1g.10gb', FIRST)
    instance = str(uuid.uuid4())
    rig.claim(instance, SECOND, 1, 1)

    arq = arq_stack.bind_one(rig.api, 'mig-1g.10gb', rig.rps[SECOND],
                             instance, HOST)

    assert arq['device_rp_uuid'] == rig.rps[SECOND]
    assert rig.held_on(SECOND) == [('1g.10gb', 0)]
    assert rig.allocations(instance) == {
        rig.rps[SECOND]: {COMPUTE: 1, MEMORY: 1}}
    assert rig.counted('packed') == 0


def test_a_bind_racing_another_on_the_host_keeps_the_gpu_nova_claimed(
        rig, monkeypatch):
    """The default, ``fullest-when-alone``: while another MIG bind of the
    host waits for its instance, a bind is not packed onto that bind's
    GPU, where it would wait for the same card."""
    rig.bind_on('1g.10gb', FIRST)
    release = threading.Event()
    making = threading.Event()
    real = rig.binder._make_mig_instance_locked

    def slow(context, item, deployable, handle, profile):
        if item['instance_uuid'] == held:
            making.set()
            assert release.wait(30)
        return real(context, item, deployable, handle, profile)

    monkeypatch.setattr(rig.binder, '_make_mig_instance_locked', slow)
    held = str(uuid.uuid4())
    rig.claim(held, FIRST, 1, 1)
    rig.start_bind('1g.10gb', FIRST, held)
    assert making.wait(30)
    instance = str(uuid.uuid4())
    rig.claim(instance, SECOND, 1, 1)

    try:
        arq = arq_stack.bind_one(rig.api, 'mig-1g.10gb', rig.rps[SECOND],
                                 instance, HOST)
    finally:
        release.set()

    assert arq['state'] == 'Bound', arq
    assert arq['device_rp_uuid'] == rig.rps[SECOND]
    assert rig.held_on(SECOND) == [('1g.10gb', 0)]
    assert rig.counted('packed') == 0
    first, = arq_stack.wait_resolved(rig.api, held)
    assert first['state'] == 'Bound', first
    assert rig.held_on(FIRST) == [('1g.10gb', 0), ('1g.10gb', 1)]


# What is tried and refused is the conductor's: one engine is enough.
@pytest.mark.parametrize('database_url', ['sqlite'], indirect=True)
@pytest.mark.parametrize('moves', ['on, no other GPU has room', 'off'])
def test_a_request_no_gpu_can_place_fails_and_its_claim_stays(rig, conf,
                                                              moves):
    rig.fragment_first()
    if moves == 'off':
        conf.set_override('mig_move_on_refusal', False, group='conductor')
    else:
        assert rig.bind_on('7g.80gb', SECOND)['state'] == 'Bound'
    instance = str(uuid.uuid4())
    rig.claim(instance, FIRST, 3, 4)

    arq = arq_stack.bind_one(rig.api, 'mig-3g.40gb', rig.rps[FIRST],
                             instance, HOST)

    assert arq['state'] == 'BindFailed'
    assert rig.allocations(instance) == {
        rig.rps[FIRST]: {COMPUTE: 3, MEMORY: 4}}
    assert (rig.counted('moved'), rig.counted('refused')) == (0, 1)
    assert len(rig.held_on(FIRST)) == 3


def test_a_bind_cut_between_the_two_writes_of_its_move_follows_it(
        rig, admin_context, monkeypatch):
    """The conductor stops after Placement moved the allocation and
    before the ARQ followed: the resumed bind finds where the allocation
    went and makes the instance there."""
    rig.fragment_first()
    instance = str(uuid.uuid4())
    rig.claim(instance, FIRST, 3, 4)
    cut = threading.Event()

    def stopped(*args, **kwargs):
        rig.binder.stop()
        cut.set()
        raise RuntimeError('the conductor is stopping')

    real = binding.db.move_bind
    monkeypatch.setattr(binding.db, 'move_bind', stopped)
    arq = rig.start_bind('3g.40gb', FIRST, instance)
    assert cut.wait(10)
    deadline = time.monotonic() + 10
    while arq['uuid'] in binding._IN_FLIGHT:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    left = rig.get(arq)
    assert left['state'] == 'BindStarted'
    assert left['device_rp_uuid'] == rig.rps[FIRST]
    assert rig.allocations(instance) == {
        rig.rps[SECOND]: {COMPUTE: 3, MEMORY: 4}}

    monkeypatch.setattr(binding.db, 'move_bind', real)
    rig.binder.stopping.clear()
    rig.binder.resume(admin_context)

    bound, = arq_stack.wait_resolved(rig.api, instance)
    assert bound['state'] == 'Bound', bound
    assert bound['device_rp_uuid'] == rig.rps[SECOND]
    assert rig.held_on(SECOND) == [
        ('3g.40gb', int(bound['attach_handle_info']['start']))]
    assert rig.allocations(instance) == {
        rig.rps[SECOND]: {COMPUTE: 3, MEMORY: 4}}
