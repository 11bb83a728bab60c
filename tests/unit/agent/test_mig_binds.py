"""MIG instances made at bind and destroyed at unbind, through the agent's
RPC endpoint, on the recorded H100 host's tree and the NVML stand-in with
the H100 80GB's MIG behaviour. The agent's privileged calls
(``cyborg.privsep.mig``) run in the test process, their checks included.
"""

import uuid

import pytest

from cyborg import exception
from cyborg import rpc
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import mig_nvml as mig_ops
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.privsep import checks
from cyborg.privsep import mig as privsep_mig
from tests.threads import race
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import agent_conf
from tests.unit.drivers import conftest as drivers_conftest
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401
from tests.unit.drivers.trees import hosts

H100 = hosts.H100.bdf
DRIVER = 'nvidia_gpu_driver'
ON_DEMAND = {('gpu_devices', 'mig_on_demand_addresses'): [H100]}
EVERY_PROFILE = ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb', '3g.40gb',
                 '4g.40gb', '7g.80gb']
ANSWER = {'mig_profile', 'start', 'gi_id', 'ci_id', 'mig_uuid', 'creatable',
          'stranded'}
ARQ = '5e1f0a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b'


class Card:
    """The agent serving the H100, and the stand-in's view of the GPU."""

    def __init__(self, agent, driver, library):
        self.agent = agent
        self.library = library
        [gpu] = [d for d in driver.discover()
                 if d.controlpath_info['bus'] == '4e']
        [deployable] = gpu.deployables
        self.slots = deployable.attach_handles
        self.uuids = {}  # slot -> the uuid of its last bind

    def handle(self, slot):
        handle = self.slots[slot]
        return {'uuid': self.uuids.setdefault(slot, str(uuid.uuid4())),
                'attach_type': handle.attach_type,
                'attach_info': dict(handle.attach_info)}

    def bind(self, profile, slot=0, rule=None, again=False, waiting=None):
        """A bind of the slot, under a new uuid as the conductor gives
        each bind (``again``: the last one's, a bind resumed or late)."""
        if not again:
            self.uuids[slot] = str(uuid.uuid4())
        request = {'mig_profile': profile}
        if rule:
            request['placement_rule'] = rule
        if waiting is not None:
            request['waiting'] = waiting
        return self.agent.api.prepare_attach_handle(
            self.agent.context, HOST, DRIVER, self.handle(slot), ARQ,
            request=request)

    def unbind(self, details, slot=0):
        return self.agent.api.release_attach_handle(
            self.agent.context, HOST, DRIVER, self.handle(slot), ARQ,
            details=details)

    def held(self):
        """[(profile, start, MIG UUIDs)] on the GPU now."""
        return [(i.profile, i.start, i.uuids)
                for i in self.library.instances(H100)]


@pytest.fixture
def daemon_lists_h100():
    """The daemon's [gpu_devices] lists the H100 for MIG on demand, as the
    agent's configuration files do."""
    conf = checks.daemon_conf()
    conf.set_override('mig_on_demand_addresses', [H100],
                      group='gpu_devices')
    yield
    conf.clear_override('mig_on_demand_addresses', group='gpu_devices')


@pytest.fixture
def card(tmp_path, monkeypatch, serve_agent, privileged_on, mig_nvml,  # noqa: F811
         daemon_lists_h100):
    root = tmp_path / 'host'
    library = drivers_conftest.h100_on_demand_host(
        root, monkeypatch, privileged_on, mig_nvml)
    conf = agent_conf(ON_DEMAND)
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(str(root)))
    return Card(serve_agent(conf, [driver]), driver, library)


def test_a_3g_40gb_and_four_1g_10gb_each_get_an_instance(card):
    big = card.bind('3g.40gb', slot=0)

    assert set(big) == ANSWER
    # Best fit: at 4 the first half stays whole for a 4g.40gb; the
    # 7g.80gb is gone.
    assert (big['mig_profile'], big['start'], big['ci_id']) == (
        '3g.40gb', 4, 0)
    assert big['creatable'] == ['1g.10gb', '1g.10gb+me', '1g.20gb',
                                '2g.20gb', '3g.40gb', '4g.40gb']
    small = [card.bind('1g.10gb', slot=slot) for slot in (1, 2, 3, 4)]
    assert [s['start'] for s in small] == [0, 1, 2, 3]
    # The first 1g.10gb takes the 4g.40gb's start; the last fills the card.
    assert '4g.40gb' not in small[0]['creatable']
    assert '3g.40gb' not in small[0]['creatable']
    assert small[-1]['creatable'] == []
    made = [big, *small]
    assert len({m['mig_uuid'] for m in made}) == 5
    assert len({m['gi_id'] for m in made}) == 5
    assert sorted(card.held(), key=lambda h: h[1]) == sorted(
        ((m['mig_profile'], m['start'], (m['mig_uuid'],)) for m in made),
        key=lambda h: h[1])
    # NVML was told each start: never its own placement.
    assert 'nvmlDeviceCreateGpuInstance' not in card.library.calls

    released = card.unbind(big, slot=0)
    # Slices 4-7 free again: no 4g.40gb (start 0) nor 7g.80gb.
    assert released == {'creatable': ['1g.10gb', '1g.10gb+me', '1g.20gb',
                                      '2g.20gb', '3g.40gb'],
                        'stranded': [0, 0]}
    assert [h[0] for h in card.held()] == ['1g.10gb'] * 4
    for slot, details in zip((1, 2, 3, 4), small, strict=True):
        released = card.unbind(details, slot=slot)
    assert released == {'creatable': EVERY_PROFILE, 'stranded': [0, 0]}
    assert card.held() == []
    assert mig_ops.MIGCard(H100).remaining() == {
        '1g.10gb': 7, '1g.20gb': 4, '2g.20gb': 3, '3g.40gb': 2,
        '4g.40gb': 1, '7g.80gb': 1, '1g.10gb+me': 1}


def test_binds_say_which_free_slices_no_placement_can_use(card):
    # A 3g.40gb at 0 takes memory slices 0-3 and compute slices 0-2:
    # compute slice 3 is free, yet no profile can start there.
    made = card.bind('3g.40gb', rule='lowest-slot')
    assert made['start'] == 0
    assert made['stranded'] == [1, 0]
    fours = [card.bind('1g.10gb', slot=slot, rule='lowest-slot')
             for slot in (1, 2, 3)]
    assert [(m['start'], m['stranded']) for m in fours] == [
        (4, [1, 0]), (5, [1, 0]), (6, [1, 1])]
    # The 1g.10gb at 6 left memory slice 7 to no one. With the 3g.40gb
    # gone compute slice 3 serves again; slice 7 stays out of reach.
    assert card.unbind(made)['stranded'] == [0, 1]


def play(card, rule, steps):
    """Bind ('+', key, profile) and release ('-', key) in turn; the
    answers of the binds still held, by key."""
    live = {}
    for step in steps:
        if step[0] == '+':
            live[step[1]] = card.bind(step[2], rule=rule)
        else:
            card.unbind(live.pop(step[1]))
    return live


# Two 2g.20gb and a 1g.10gb; the 2g.20gb go, another 1g.10gb comes.
CHURN = [('+', 'a', '2g.20gb'), ('+', 'b', '2g.20gb'), ('+', 'c', '1g.10gb'),
         ('-', 'a'), ('-', 'b'), ('+', 'd', '1g.10gb')]


def test_best_fit_keeps_a_3g_40gb_creatable_where_lowest_slot_does_not(
        card):
    lowest = play(card, 'lowest-slot', CHURN)

    # At 4 and then 0: five compute and six memory slices free, in no
    # place a 40gb profile can take.
    assert sorted(m['start'] for m in lowest.values()) == [0, 4]
    assert '3g.40gb' not in lowest['d']['creatable']
    with pytest.raises(mig_ops.MIGRefused) as refused:
        card.bind('3g.40gb')
    assert refused.value.status == 409
    assert refused.value.message == (
        'The GPU at %s is too fragmented for 3g.40gb now: it holds 1g.10gb '
        'at 0, 1g.10gb at 4; its 5 free compute and 6 free memory slices '
        'lie at no start 3g.40gb can take (0, 4).' % H100)
    assert sorted(h[1] for h in card.held()) == [0, 4]
    for details in lowest.values():
        card.unbind(details)

    best = play(card, 'best-fit', CHURN)

    assert sorted(m['start'] for m in best.values()) == [4, 5]
    assert {'3g.40gb', '4g.40gb'} <= set(best['d']['creatable'])
    assert card.bind('3g.40gb')['start'] == 0


def test_a_full_card_says_it_has_no_room(card):
    card.bind('7g.80gb')
    with pytest.raises(mig_ops.MIGRefused) as refused:
        card.bind('1g.10gb')
    assert refused.value.message == (
        'The GPU at %s has no room for 1g.10gb now: it holds 7g.80gb at 0, '
        'leaving 0 compute and 0 memory slices and no media engine.' % H100)


def mig_traits(snapshot):
    """The MIG profile traits of the GPU's provider in a report."""
    return sorted(trait for device in snapshot['devices']
                  for deployable in device['deployables']
                  for trait in deployable.get('traits') or ()
                  if trait.startswith('CUSTOM_MIG_PROFILE_'))


def test_a_refused_bind_reports_what_the_card_can_create_at_once(card):
    # The card filled behind the service's back: what was reported last
    # still offers 1g.10gb.
    mig_ops.MIGCard(H100).create('7g.80gb', 0)

    with pytest.raises(mig_ops.MIGRefused):
        card.bind('1g.10gb')

    # Asked at once, on a thread of its own: nothing creatable now.
    assert mig_traits(card.agent.conductor.next()) == []


def test_binds_racing_on_one_card_get_instances_of_their_own(card):
    # The agent holds one lock per card; the daemon holds its own, for
    # calls from every agent thread.
    made = race(7, lambda i: privsep_mig.create_mig_instance(
        H100, '1g.10gb', 'best-fit'))
    assert all(isinstance(m, dict) for m in made), made
    assert sorted(m['start'] for m in made) == list(range(7))
    assert len({m['gi_id'] for m in made}) == 7
    assert len({m['mig_uuid'] for m in made}) == 7

    gone = race(7, lambda i: privsep_mig.destroy_mig_instance(
        H100, {k: made[i][k] for k in privsep_mig.IDENTITY}))
    assert [g['destroyed'] for g in gone] == [True] * 7
    assert card.held() == []

    binds = race(2, lambda i: card.bind('3g.40gb', slot=i))
    assert sorted(b['start'] for b in binds) == [0, 4]
    assert binds[0]['mig_uuid'] != binds[1]['mig_uuid']
    assert len(card.held()) == 2


def test_an_instance_running_processes_is_not_destroyed(card):
    made = card.bind('2g.20gb')
    card.library.run_process(H100, made['gi_id'], made['ci_id'], 4242)

    with pytest.raises(mig_ops.MIGInUse) as in_use:
        card.unbind(made)
    assert in_use.value.status == 409
    assert 'has running processes: nothing destroyed' in in_use.value.message
    assert card.held() == [('2g.20gb', made['start'], (made['mig_uuid'],))]

    card.library.end_process(H100, made['gi_id'], made['ci_id'], 4242)
    assert card.unbind(made) == {'creatable': EVERY_PROFILE,
                                 'stranded': [0, 0]}
    assert card.held() == []


def test_a_late_release_leaves_the_instance_that_took_the_ids(card):
    first = card.bind('1g.20gb')
    card.unbind(first)
    # The next bind gets the same GI id and start, and a new MIG UUID.
    second = card.bind('1g.20gb')
    assert (second['gi_id'], second['start']) == (first['gi_id'],
                                                  first['start'])

    with pytest.raises(mig_ops.MIGIdentityMismatch) as mismatch:
        card.unbind(first)
    assert 'nothing destroyed' in mismatch.value.message
    # Its ids with another of the profile's starts.
    other_start = dict(second, start=(second['start'] + 2) % 8)
    with pytest.raises(mig_ops.MIGIdentityMismatch):
        card.unbind(other_start)
    assert card.held() == [('1g.20gb', second['start'],
                            (second['mig_uuid'],))]


def test_details_kept_as_text_release_the_instance(card):
    made = card.bind('3g.40gb')
    # As a conductor keeps them: each field as text.
    kept = {k: str(made[k]) for k in privsep_mig.IDENTITY}

    assert card.unbind(kept) == {'creatable': EVERY_PROFILE,
                                 'stranded': [0, 0]}
    assert card.held() == []


def test_an_instance_a_reboot_took_is_released(card):
    made = card.bind('4g.40gb')
    card.library.lose_instances(H100)

    assert card.unbind(made) == {'creatable': EVERY_PROFILE,
                                 'stranded': [0, 0]}


def test_a_bind_without_a_profile_or_with_a_bad_one_makes_nothing(card):
    with pytest.raises(base.DriverError) as no_profile:
        card.agent.api.prepare_attach_handle(
            card.agent.context, HOST, DRIVER, card.handle(0), ARQ)
    assert 'the bind names no MIG profile' in no_profile.value.message
    with pytest.raises(base.DriverError) as bad_rule:
        card.bind('1g.10gb', rule='worst-fit')
    assert "'worst-fit' is not a MIG placement rule" in (
        bad_rule.value.message)
    with pytest.raises(base.DriverError) as unknown:
        card.bind('5g.50gb')
    assert 'has no MIG profile 5g.50gb' in unknown.value.message
    assert card.held() == []


@pytest.mark.parametrize('address, profile, rule, refusal', [
    ('0000:4E:00.0', '1g.10gb', 'best-fit', 'not a PCI address'),
    ('../../../dev', '1g.10gb', 'best-fit', 'not a PCI address'),
    (hosts.H100.parent, '1g.10gb', 'best-fit',
     'not listed in .gpu_devices. mig_on_demand_addresses'),
    (H100, '1g.10gb;reboot', 'best-fit', 'not a MIG profile name'),
    (H100, '3G.40GB', 'best-fit', 'not a MIG profile name'),
    (H100, '1\uff11g.10gb', 'best-fit', 'not a MIG profile name'),
    (H100, ['1g.10gb'], 'best-fit', 'not a MIG profile name'),
    (H100, '5g.50gb', 'best-fit', 'has no MIG profile 5g.50gb'),
    (H100, '1g.10gb', 'worst-fit', 'not a MIG placement rule'),
    (H100, '1g.10gb', None, 'not a MIG placement rule'),
])
def test_refused_creations(card, address, profile, rule, refusal):
    with pytest.raises(checks.InvalidArgument, match=refusal):
        privsep_mig.create_mig_instance(address, profile, rule)
    assert card.held() == []
    assert card.library.calls.count(
        'nvmlDeviceCreateGpuInstanceWithPlacement') == 0


@pytest.mark.parametrize('waiting, refusal', [
    ('4g.40gb', 'a list of at most 16 MIG profile names'),
    (['1g.10gb'] * 17, 'a list of at most 16 MIG profile names'),
    (['4g.40gb', '1g.10gb;reboot'], 'not a MIG profile name'),
    (['5g.50gb'], 'has no MIG profile 5g.50gb'),
    ([None], 'not a MIG profile name'),
])
def test_refused_waiting_binds(card, waiting, refusal):
    with pytest.raises(checks.InvalidArgument, match=refusal):
        privsep_mig.create_mig_instance(H100, '1g.10gb', 'best-fit',
                                        waiting)
    assert card.held() == []


def test_a_prepare_leaves_room_for_the_binds_waiting_for_the_card(card):
    made = card.bind('1g.10gb', waiting=['4g.40gb'])
    assert int(made['start']) >= 4
    assert int(card.bind('4g.40gb', slot=1)['start']) == 0


@pytest.mark.parametrize('change, refusal', [
    ({'mig_profile': '1g.10gb/../7g'}, 'not a MIG profile name'),
    ({'start': True}, 'start True is not a whole number'),
    ({'start': '04'}, "start '04' is not a whole number"),
    ({'gi_id': ' 1'}, "gi_id ' 1' is not a whole number"),
    ({'start': 1}, '2g.20gb cannot start at slice 1'),
    ({'gi_id': -1}, 'gi_id -1 is not a whole number'),
    ({'ci_id': 0.0}, 'ci_id 0.0 is not a whole number'),
    ({'mig_uuid': 'GPU-1'}, 'not a MIG device UUID'),
    ({'mig_uuid': None}, 'not a MIG device UUID'),
])
def test_refused_destructions(card, change, refusal):
    made = card.bind('2g.20gb')
    identity = {k: made[k] for k in privsep_mig.IDENTITY}
    with pytest.raises(checks.InvalidArgument, match=refusal):
        privsep_mig.destroy_mig_instance(H100, {**identity, **change})
    for not_an_identity in ([identity], {**identity, 'pid': 1},
                            {k: identity[k] for k in list(identity)[1:]}):
        with pytest.raises(checks.InvalidArgument,
                           match='identified by exactly'):
            privsep_mig.destroy_mig_instance(H100, not_an_identity)
    assert card.held() == [('2g.20gb', made['start'], (made['mig_uuid'],))]
    # Through the agent: the same refusal, as the driver's error.
    with pytest.raises(base.DriverError, match='Cannot destroy MIG'):
        card.unbind({**made, **change})
    assert len(card.held()) == 1


def test_an_agent_of_1_3_is_not_sent_a_mig_bind(card):
    # The in-process transport is one per process and URL: the agent's.
    transport = rpc.get_transport(agent_conf())
    capped = agent_rpcapi.AgentAPI(transport, timeout=10, version_cap='1.3')
    assert not capped.can_send_version(agent_rpcapi.REQUEST_VERSION)
    assert card.agent.api.can_send_version(agent_rpcapi.REQUEST_VERSION)
    with pytest.raises(rpc.VersionCapped) as refused:
        capped.prepare_attach_handle(
            card.agent.context, HOST, DRIVER, card.handle(0), ARQ,
            request={'mig_profile': '1g.10gb'})
    assert refused.value.message.startswith(
        'prepare_attach_handle needs agent RPC API 1.4, but [upgrade_levels] '
        'agent = 1.3 pins it lower')
    with pytest.raises(rpc.VersionCapped):
        capped.release_attach_handle(
            card.agent.context, HOST, DRIVER, card.handle(0), ARQ,
            details={'mig_profile': '1g.10gb'})
    assert card.held() == []
    # A bind sent as 1.1 names no profile: refused, not made silently.
    with pytest.raises(base.DriverError, match='names no MIG profile'):
        capped.prepare_attach_handle(card.agent.context, HOST, DRIVER,
                                     card.handle(0), ARQ)
    transport.cleanup()


def _identity(made):
    return {name: made[name] for name in privsep_mig.IDENTITY}


def test_a_restore_keeps_makes_again_spares_and_destroys(card):
    there = card.bind('3g.40gb', slot=0)
    spared = card.bind('1g.10gb', slot=1)
    lost = card.bind('1g.10gb', slot=2)
    orphan = card.bind('2g.20gb', slot=3)
    privsep_mig.destroy_mig_instance(H100, _identity(lost))

    done = privsep_mig.restore_mig_instances(
        H100, [_identity(there), _identity(lost)], [_identity(spared)])

    assert done['kept'] == [_identity(there)]
    [remade] = done['made']
    assert remade['was'] == _identity(lost)
    now = remade['now']
    assert (now['mig_profile'], now['start']) == ('1g.10gb', lost['start'])
    assert now['mig_uuid'] != lost['mig_uuid']
    assert done['destroyed'] == [_identity(orphan)]
    assert done['failed'] == done['not_destroyed'] == []
    assert sorted(card.held()) == sorted([
        ('3g.40gb', there['start'], (there['mig_uuid'],)),
        ('1g.10gb', spared['start'], (spared['mig_uuid'],)),
        ('1g.10gb', lost['start'], (now['mig_uuid'],))])
    assert '1g.10gb' in done['creatable']

    # Nothing to do the second time.
    again = privsep_mig.restore_mig_instances(
        H100, [_identity(there), now], [_identity(spared)])
    assert again['kept'] == [_identity(there), now]
    assert again['made'] == again['destroyed'] == []


RESTORED = {'mig_profile': '1g.10gb', 'start': 0, 'gi_id': 1, 'ci_id': 0,
            'mig_uuid': 'MIG-0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f'}


@pytest.mark.parametrize('address, wanted, spared, refusal', [
    ('0000:4E:00.0', [], [], 'not a PCI address'),
    (hosts.H100.parent, [], [],
     'not listed in .gpu_devices. mig_on_demand_addresses'),
    (H100, {'a': RESTORED}, [], 'a list of at most 64'),
    (H100, [], None, 'a list of at most 64'),
    (H100, [RESTORED] * 65, [], 'a list of at most 64'),
    (H100, [dict(RESTORED, start=7)], [], '1g.10gb cannot start at slice 7'),
    (H100, [], [dict(RESTORED, mig_uuid='GPU-1')], 'not a MIG device UUID'),
    (H100, [dict(RESTORED, pid=1)], [], 'identified by exactly'),
])
def test_refused_restores(card, address, wanted, spared, refusal):
    made = card.bind('2g.20gb')
    with pytest.raises(checks.InvalidArgument, match=refusal):
        privsep_mig.restore_mig_instances(address, wanted, spared)
    # Refused before NVML was asked: the instance no one named is there.
    assert card.held() == [('2g.20gb', made['start'], (made['mig_uuid'],))]
    assert card.library.calls.count('nvmlGpuInstanceDestroy') == 0


def test_a_release_after_a_lost_prepare_answer_destroys_what_was_made(card):
    """The conductor never heard the prepare's answer (a timeout): its
    release names nothing, and the agent destroys the instance it made
    for that handle's bind, not an orphan left until a restart."""
    card.bind('2g.20gb')
    assert len(card.held()) == 1

    assert card.unbind(None) == {'creatable': EVERY_PROFILE,
                                 'stranded': [0, 0]}
    assert card.held() == []
    # Said again (a retry): nothing more to destroy, and nothing to name.
    with pytest.raises(base.DriverError) as refused:
        card.unbind(None)
    assert 'names none' in str(refused.value)


def test_a_release_naming_nothing_spares_another_binds_instance(card):
    """A handle's uuid is new at each bind: a release of the first bind
    that names nothing cannot reach the instance of a bind of another
    handle."""
    card.bind('1g.10gb', slot=0)
    card.unbind(None, slot=0)
    other = card.bind('1g.10gb', slot=1)
    with pytest.raises(base.DriverError) as refused:
        card.unbind(None, slot=0)
    assert 'names none' in str(refused.value)
    assert card.held() == [('1g.10gb', other['start'],
                            (other['mig_uuid'],))]


def test_a_prepare_that_arrives_after_its_release_makes_nothing(card):
    """The conductor gave up on a prepare and released its handle; the
    prepare reaches the agent after the release (RPC gives no order
    between two calls): what it would make, nobody would release."""
    card.uuids[0] = str(uuid.uuid4())
    with pytest.raises(base.DriverError, match='names none'):
        card.unbind(None)

    with pytest.raises(exception.Conflict) as late:
        card.bind('3g.40gb', again=True)

    assert 'was released before this prepare' in late.value.message
    assert card.held() == []
    # The next bind of the slot has a uuid of its own.
    assert card.bind('3g.40gb')['mig_profile'] == '3g.40gb'



def test_a_release_is_remembered_across_an_agent_restart(
        tmp_path, monkeypatch, serve_agent, privileged_on,
        mig_nvml, daemon_lists_h100):  # noqa: F811
    """The same late prepare, with the agent restarted between the
    release and the prepare: the released uuid is read back from
    ``[DEFAULT] state_path``, and nothing is made."""
    root = tmp_path / 'host'
    library = drivers_conftest.h100_on_demand_host(
        root, monkeypatch, privileged_on, mig_nvml)
    state = tmp_path / 'state'
    state.mkdir()

    def started(exchange):
        # Each agent on an exchange of its own: in-process servers of one
        # topic share its messages.
        conf = agent_conf({**ON_DEMAND, (None, 'state_path'): str(state),
                           (None, 'control_exchange'): exchange})
        driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(str(root)))
        return Card(serve_agent(conf, [driver]), driver, library)

    before = started('before')
    before.uuids[0] = str(uuid.uuid4())
    with pytest.raises(base.DriverError, match='names none'):
        before.unbind(None)

    after = started('after')
    after.uuids = before.uuids
    with pytest.raises(exception.Conflict) as late:
        after.bind('3g.40gb', again=True)

    assert 'was released before this prepare' in late.value.message
    assert after.held() == []
    assert after.bind('3g.40gb')['mig_profile'] == '3g.40gb'
