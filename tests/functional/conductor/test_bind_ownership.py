"""Who may fail or finish a bind: per-ARQ deadlines, the takeover of a
dead conductor's binds, binds queued for a conductor that starts, and
Nova answers that end the retries of an event.

Real databases (three engines); the fake FPGA of ``tests/arq_stack.py``,
whose handles need no agent; conductors' liveness from real ``services``
rows (a dead one is a row whose heartbeat is old).
"""

import datetime
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg import states
from cyborg.clients import glance as glance_client
from cyborg.clients import nova as nova_client
from cyborg.conductor import binding
from cyborg.conductor import manager
from cyborg.conductor import membership
from cyborg.conductor import recovery
from cyborg.db import models
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import services
from tests import arq_stack
from tests.nova_events import nova_events  # noqa: F401

api = arq_stack.api
fpga_rp = arq_stack.fpga_rp
profile = arq_stack.profile
transport = arq_stack.transport

ME = 'conductor-1'
DOWN_AFTER = 30
ARQ = models.ExtendedAcceleratorRequest


def started_binds(api, admin_context, rp, count=3, instance=None):
    """``count`` ARQs moved to BindStarted as the API does, with no cast
    to any conductor; their uuids."""
    uuids = []
    while len(uuids) < count:
        uuids.extend(a['uuid'] for a in api.post_json(
            arq_stack.ARQS,
            {'device_profile_name': arq_stack.PROFILE}).json['arqs'])
    uuids = uuids[:count]
    instance = instance or str(uuid.uuid4())
    arq_db.start_binding(admin_context, {u: {
        'hostname': arq_stack.HOST, 'device_rp_uuid': rp,
        'instance_uuid': instance} for u in uuids})
    return uuids


def conductors(admin_context, alive=(ME,), dead=()):
    """``services`` rows: heartbeats now for ``alive``, two minutes old
    for ``dead``; the Membership of ``ME`` over them."""
    for host in (*alive, *dead):
        services.heartbeat(admin_context, host, services.CONDUCTOR)
    old = models.utcnow() - datetime.timedelta(seconds=120)
    with admin_context.db.writer(admin_context) as session:
        session.execute(sa.update(models.Service).where(
            models.Service.host.in_(list(dead))).values(last_seen_at=old))
    ring = membership.Membership(admin_context, ME, DOWN_AFTER)
    ring.refresh()
    return ring


def rows(db, uuids):
    with db.engine.connect() as conn:
        return {r.uuid: r for r in conn.execute(sa.select(
            ARQ.uuid, ARQ.state, ARQ.bind_conductor, ARQ.bind_deadline,
            ARQ.attach_handle_id).where(ARQ.uuid.in_(uuids)))}


def state_of(db, uuids):
    return {u: r.state for u, r in rows(db, uuids).items()}


@pytest.fixture
def recorded_nova():
    return arq_stack.RecordingNova()


# -- deadlines ----------------------------------------------------------------

class SlowBinder(binding.Binder):
    """Each ARQ takes ``seconds`` to prepare, as a 2.2 s FPGA program."""

    seconds = 2.2

    def _prepare(self, context, item):
        time.sleep(self.seconds)
        return super()._prepare(context, item)


def test_binds_done_one_after_another_each_get_the_whole_timeout(
        conf, db, api, fpga_rp, profile, admin_context):
    """3 ARQs x 2.2 s with bind_timeout 5: the third starts at 4.4 s and
    ends at 6.6 s, past a deadline counted from the claim, while another
    conductor fails overdue binds all along. All end Bound."""
    conf.set_override('bind_timeout', 5, group='conductor')
    uuids = started_binds(api, admin_context, fpga_rp)
    binder = SlowBinder(conf, arq_stack.NoAgent(), owner=ME)
    other = binding.Binder(conf, arq_stack.NoAgent(), owner='conductor-2')
    done = threading.Event()
    failed = []

    def recover():
        while not done.is_set():
            failed.extend(other.fail_overdue(admin_context))
            time.sleep(0.1)

    watcher = threading.Thread(target=recover)
    watcher.start()
    try:
        started = time.monotonic()
        binder.bind(admin_context, uuids)
        took = time.monotonic() - started
    finally:
        done.set()
        watcher.join()

    assert took > conf.conductor.bind_timeout
    assert failed == []
    assert state_of(db, uuids) == dict.fromkeys(uuids, states.BOUND)
    assert all(r.bind_deadline is None for r in rows(db, uuids).values())


def test_a_bind_past_its_own_deadline_is_failed(
        conf, db, api, fpga_rp, profile, admin_context, recorded_nova):
    uuids = started_binds(api, admin_context, fpga_rp, count=2)
    arq_db.claim_binds(admin_context, uuids, 'conductor-2', 300)
    with db.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid == uuids[0]).values(
            bind_deadline=models.utcnow() - datetime.timedelta(seconds=1)))
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME,
                            nova=recorded_nova)

    failed = binder.fail_overdue(admin_context)

    assert [a['uuid'] for a in failed] == [uuids[0]]
    assert state_of(db, uuids) == {uuids[0]: states.BIND_FAILED,
                                   uuids[1]: states.BIND_STARTED}
    assert [(arq, ok) for _, arq, ok in recorded_nova.seen()] == [
        (uuids[0], False)]


# -- owners alive and dead ----------------------------------------------------

def test_a_live_owners_bind_is_left_to_it(
        conf, db, api, fpga_rp, profile, admin_context):
    """Claimed by a live conductor long ago (the API's stamp is old), its
    deadline not passed: neither failed nor taken over."""
    uuids = started_binds(api, admin_context, fpga_rp)
    arq_db.claim_binds(admin_context, uuids, 'conductor-2', 300)
    with db.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid.in_(uuids)).values(
            bind_started_at=models.utcnow() - datetime.timedelta(hours=1)))
    ring = conductors(admin_context, alive=(ME, 'conductor-2'))
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME,
                            membership=ring)

    assert binder.take_over(admin_context) == 0
    assert binder.fail_overdue(admin_context) == []
    assert {u: (r.state, r.bind_conductor)
            for u, r in rows(db, uuids).items()} == dict.fromkeys(
        uuids, (states.BIND_STARTED, 'conductor-2'))


def test_a_dead_owners_binds_are_taken_over_at_once(
        conf, db, api, fpga_rp, profile, admin_context):
    """The owner's heartbeat expired; its ARQs' deadlines are minutes
    away. The ring owner of the host claims them from it and binds them
    in its first pass, on the handle a resumed bind already held."""
    uuids = started_binds(api, admin_context, fpga_rp)
    work = arq_db.claim_binds(admin_context, uuids, 'conductor-2', 300)
    # The dead conductor had taken a handle for the first one.
    held = arq_db.allocate_attach_handle(admin_context, work[0]['id'],
                                         _deployable_id(db, fpga_rp))
    ring = conductors(admin_context, alive=(ME,), dead=('conductor-2',))
    assert ring.owner_of(arq_stack.HOST) == ME
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME,
                            membership=ring)

    assert binder.take_over(admin_context) == 3

    after = rows(db, uuids)
    assert {u: r.state for u, r in after.items()} == dict.fromkeys(
        uuids, states.BOUND)
    assert after[uuids[0]].attach_handle_id == held['id']
    assert arq_stack.handles_in_use(db) == 3
    # Nothing left for a second pass, nor for another conductor.
    assert binder.take_over(admin_context) == 0


def test_two_conductors_taking_over_at_once_bind_each_arq_once(
        conf, db, api, fpga_rp, profile, admin_context):
    uuids = started_binds(api, admin_context, fpga_rp)
    arq_db.claim_binds(admin_context, uuids, 'conductor-2', 300)
    won = [arq_db.take_over_binds(admin_context, uuids, 'conductor-2',
                                  host, 300)
           for host in (ME, 'conductor-3')]
    assert [len(w) for w in won] == [3, 0]


def test_binds_queued_for_a_conductor_survive_its_start(
        conf, db, api, fpga_rp, profile, admin_context):
    """Binds the API started and cast (unclaimed: no conductor, or the
    conductor the API addressed and that has not claimed them yet) are
    not failed by the recovery workers of a conductor that starts, even
    when the API's stamp is older than bind_timeout."""
    unclaimed = started_binds(api, admin_context, fpga_rp, count=2)
    addressed = started_binds(api, admin_context, fpga_rp, count=1)
    with db.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid.in_(addressed)).values(
            bind_conductor=ME))
        conn.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(unclaimed + addressed)).values(
            bind_started_at=models.utcnow() - datetime.timedelta(seconds=60)))
    conf.set_override('bind_timeout', 300, group='conductor')
    ring = conductors(admin_context)
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME,
                            membership=ring)
    work = recovery.Recovery(binder, admin_context)

    work.fail_overdue()
    assert work.take_over() == 0

    assert state_of(db, unclaimed + addressed) == dict.fromkeys(
        unclaimed + addressed, states.BIND_STARTED)
    # Their casts then bind them.
    binder.bind(admin_context, unclaimed + addressed)
    assert state_of(db, unclaimed + addressed) == dict.fromkeys(
        unclaimed + addressed, states.BOUND)


def test_binds_addressed_to_a_conductors_previous_process_are_adopted(
        conf, db, api, fpga_rp, profile, admin_context):
    """Killed after it received the cast and before it claimed the
    binds: once restarted and past LOST_CAST_GRACE, the conductor binds
    them without waiting for bind_timeout. A bind addressed to it since
    it started is still left to its cast."""
    before = started_binds(api, admin_context, fpga_rp, count=1)
    since = started_binds(api, admin_context, fpga_rp, count=1)
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME,
                            membership=conductors(admin_context))
    work = recovery.Recovery(binder, admin_context)

    def started(seconds_ago):
        """The binder started ``seconds_ago``; ``before`` was addressed
        to it 2 s before that, ``since`` 1 s after."""
        binder.started_at = models.utcnow() - datetime.timedelta(
            seconds=seconds_ago)
        with db.engine.begin() as conn:
            for uuids, offset in ((before, -2), (since, 1)):
                conn.execute(sa.update(ARQ).where(ARQ.uuid.in_(uuids)).values(
                    bind_conductor=ME, bind_started_at=binder.started_at
                    + datetime.timedelta(seconds=offset)))

    # Just started: its queue may still hold the casts.
    started(0)
    assert work.take_over() == 0

    started(binding.LOST_CAST_GRACE + 5)
    assert work.take_over() == 1
    assert state_of(db, before + since) == {
        before[0]: states.BOUND, since[0]: states.BIND_STARTED}


def test_binds_no_conductor_claimed_in_bind_timeout_are_adopted(
        conf, db, api, fpga_rp, profile, admin_context):
    """A cast that never reached a conductor: after bind_timeout the ring
    owner of the host binds the ARQs instead of failing them."""
    uuids = started_binds(api, admin_context, fpga_rp, count=1)
    with db.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid.in_(uuids)).values(
            bind_started_at=models.utcnow() - datetime.timedelta(
                seconds=conf.conductor.bind_timeout + 5)))
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME,
                            membership=conductors(admin_context))

    assert recovery.Recovery(binder, admin_context).take_over() == 1
    assert state_of(db, uuids) == {uuids[0]: states.BOUND}
    # Counted as one request taken over, then bound.
    metrics = binder.metrics.registry
    assert metrics.get_sample_value('cyborg_conductor_recovery_items_total',
                                    {'worker': 'bind-takeover'}) == 1
    assert metrics.get_sample_value('cyborg_conductor_binds_total',
                                    {'outcome': 'bound'}) == 1


def _deployable_id(db, rp):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(models.Deployable.id).where(
            models.Deployable.rp_uuid == rp)).scalar_one()


# -- recovery workers ---------------------------------------------------------

def test_a_failing_deletion_waits_longer_each_time(conf, admin_context):
    clock = [0.0]
    backoff = recovery.Backoff(2, 10, clock=lambda: clock[0])
    assert [backoff.failed('a') for _ in range(5)] == [2, 4, 8, 10, 10]
    assert not backoff.due('a') and backoff.due('b')
    clock[0] = 10
    assert backoff.due('a')
    backoff.succeeded('a')
    assert backoff.failures('a') == 0


class OwnerIs:
    """The ring as seen by a conductor that owns the hosts or not."""

    def __init__(self, owns):
        self._owns = owns

    def current(self):
        return self

    def owns(self, hostname):
        return self._owns

    def is_alive(self, conductor):
        return True


def stale_deleting(api, admin_context, db, fpga_rp, binder, count=2):
    """Bound ARQs the API moved to Deleting long ago; their uuids."""
    uuids = started_binds(api, admin_context, fpga_rp, count=count)
    binder.bind(admin_context, uuids)
    with db.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid.in_(uuids)).values(
            state=states.DELETING,
            updated_at=models.utcnow() - datetime.timedelta(hours=1)))
    return uuids


def test_a_database_error_does_not_strand_deletions(
        conf, db, api, fpga_rp, profile, admin_context, monkeypatch):
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME)
    uuids = stale_deleting(api, admin_context, db, fpga_rp, binder)
    work = recovery.Recovery(binder, admin_context, manager.DATABASE_DOWN)
    real = arq_db.handles_of

    def database_went_away(*args, **kwargs):
        monkeypatch.setattr(recovery.db, 'handles_of', real)
        raise manager.DATABASE_DOWN[0]('connection lost')

    monkeypatch.setattr(recovery.db, 'handles_of', database_went_away)
    with pytest.raises(manager.DATABASE_DOWN[0]):
        work.finish_deletions(wait=True)

    # The next run takes them up again: none is left marked as taken.
    assert len(work.finish_deletions(wait=True)) == 1
    work.stop()
    assert rows(db, uuids) == {}


def test_deletions_and_overdue_binds_of_hosts_owned_elsewhere_are_left(
        conf, db, api, fpga_rp, profile, admin_context):
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME,
                            membership=OwnerIs(False))
    uuids = stale_deleting(api, admin_context, db, fpga_rp,
                           binding.Binder(conf, arq_stack.NoAgent(),
                                          owner=ME))
    overdue = started_binds(api, admin_context, fpga_rp, count=1)
    with db.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid.in_(overdue)).values(
            bind_deadline=models.utcnow() - datetime.timedelta(hours=1)))
    work = recovery.Recovery(binder, admin_context)

    assert work.finish_deletions(wait=True) == []
    assert work.fail_overdue() == []
    assert state_of(db, uuids + overdue) == {
        **dict.fromkeys(uuids, states.DELETING),
        overdue[0]: states.BIND_STARTED}

    binder.membership = OwnerIs(True)
    assert [a['uuid'] for a in work.fail_overdue()] == overdue
    work.finish_deletions(wait=True)
    work.stop()
    assert state_of(db, uuids + overdue) == {overdue[0]: states.BIND_FAILED}


def test_the_workers_are_separate_periodic_tasks(conf, db, admin_context):
    work = recovery.Recovery(arq_stack.binder(conf), admin_context,
                             manager.DATABASE_DOWN)
    assert [name for name, _ in work.workers()] == [
        'bind-takeover', 'overdue-binds', 'deletions', 'nova-events']


# -- Nova ---------------------------------------------------------------------

def test_nova_answers_that_cannot_succeed_end_the_retries(
        conf, db, api, fpga_rp, profile, admin_context,
        nova_events):  # noqa: F811
    """404 for the instance, or 400 for an event in a 207: no longer
    pending. 422 (not on a host yet) in a 207, or a 503: pending."""
    nova_events.configure(conf)
    conf.set_override('event_retries', 0, group='nova')
    nova = nova_client.NovaClient.from_conf(conf)
    binder = binding.Binder(conf, arq_stack.NoAgent(), owner=ME, nova=nova)
    outcomes = {}
    for answer in (404, 503, ('event', 400), ('event', 422)):
        instance = str(uuid.uuid4())
        (arq,) = started_binds(api, admin_context, fpga_rp, count=1,
                               instance=instance)
        if isinstance(answer, tuple):
            nova_events.set_event_code(instance, answer[1])
        else:
            nova_events.answer_next(answer)
        binder.bind(admin_context, [arq])
        with db.engine.connect() as conn:
            outcomes[answer] = conn.execute(sa.select(
                ARQ.nova_event_pending).where(ARQ.uuid == arq)).scalar_one()
    assert outcomes == {404: False, 503: True, ('event', 400): False,
                        ('event', 422): True}


# -- timeouts -----------------------------------------------------------------

def test_remote_clients_have_timeouts_from_configuration(conf):
    conf.set_override('endpoint_override', 'http://127.0.0.1:1',
                      group='glance')
    conf.set_override('auth_type', 'none', group='glance')
    conf.set_override('endpoint_override', 'http://127.0.0.1:1',
                      group='nova')
    conf.set_override('auth_type', 'none', group='nova')
    glance = glance_client.GlanceClient.from_conf(conf)
    nova = nova_client.NovaClient.from_conf(conf)
    assert glance._adapter.session.timeout == 60
    assert nova._adapter.session.timeout == 30
    conf.set_override('timeout', 7, group='glance')
    assert glance_client.GlanceClient.from_conf(
        conf)._adapter.session.timeout == 7


def test_the_conductor_refuses_timeouts_that_do_not_fit(conf):
    manager.check_timeouts(conf)  # the defaults fit
    conf.set_override('bind_timeout', 300, group='conductor')
    with pytest.raises(manager.TimeoutsDoNotFit) as error:
        manager.check_timeouts(conf)
    assert str(error.value) == (
        '[conductor] bind_timeout (300 s) must be longer than the agent '
        'calls one bind may make: [conductor] agent_program_timeout (240 s) '
        'plus [conductor] agent_timeout (60 s) = 300 s.')


def test_the_agent_refuses_a_tool_timeout_longer_than_the_call(conf):
    from cyborg.agent import manager as agent_manager
    agent_manager.check_timeouts(conf)  # the defaults fit
    conf.set_override('program_tool_timeout', 240, group='agent')
    with pytest.raises(agent_manager.TimeoutsDoNotFit,
                       match=r'\[agent\] program_tool_timeout \(240 s\) must '
                             r'be shorter than \[conductor\] '
                             r'agent_program_timeout \(240 s\)'):
        agent_manager.check_timeouts(conf)


# -- one sender per event -----------------------------------------------------

class HeldNova(arq_stack.RecordingNova):
    """Claims like the real client, then holds the "POST" until told."""

    def __init__(self):
        super().__init__()
        self.claimed = threading.Event()
        self.release = threading.Event()

    def notify_bound(self, events, claim=None, window=None):
        sent = [e for e in events
                if claim(e.instance_uuid, [e])]
        self.claimed.set()
        self.release.wait(10)
        with self._lock:
            self.events.extend(sent)
        return {e.instance_uuid: nova_client.Delivery(
            e.instance_uuid, delivered=True, attempts=1, status=200)
            for e in sent}


def test_an_event_in_flight_is_not_sent_by_a_second_sender(
        conf, db, api, fpga_rp, profile, admin_context, recorded_nova):
    (arq,) = started_binds(api, admin_context, fpga_rp, count=1)
    arq_db.claim_binds(admin_context, [arq], ME, 300)
    with db.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid == arq).values(
            bind_deadline=models.utcnow() - datetime.timedelta(seconds=1)))
    (failed,) = arq_db.fail_overdue_binds(admin_context)
    events = [(failed['instance_uuid'], arq, states.BIND_FAILED,
               failed['updated_at'])]
    held = HeldNova()
    first = binding.Binder(conf, arq_stack.NoAgent(), owner=ME, nova=held)
    second = binding.Binder(conf, arq_stack.NoAgent(), owner='conductor-2',
                            nova=recorded_nova)
    sending = threading.Thread(target=first.notify,
                               args=(admin_context, events))
    sending.start()
    assert held.claimed.wait(10)

    # The same event, as the other sender saw it: the claim is lost.
    still_pending = second.notify(admin_context, events)
    held.release.set()
    sending.join(10)

    assert still_pending == {arq}
    assert recorded_nova.seen() == []
    assert [a for _, a, _ in held.seen()] == [arq]
    with db.engine.connect() as conn:
        assert conn.execute(sa.select(ARQ.nova_event_pending).where(
            ARQ.uuid == arq)).scalar_one() is False


def test_a_delivery_ends_within_its_claim(conf, nova_events):  # noqa: F811
    nova_events.configure(conf)
    conf.set_override('event_retries', 5, group='nova')
    conf.set_override('event_retry_interval', 1.0, group='nova')
    nova = nova_client.NovaClient.from_conf(conf)
    nova_events.answer_next(503, 503, 503, 503, 503, 503)
    event = nova_client.BoundEvent(str(uuid.uuid4()), str(uuid.uuid4()),
                                   True)

    started = time.monotonic()
    (delivery,) = nova.notify_bound([event], window=2.5).values()

    # 1 s then 2 s between tries: a third try would end past the window.
    assert time.monotonic() - started < 2.5
    assert not delivery.delivered and delivery.attempts == 2
    assert len(nova_events.calls) == 2
