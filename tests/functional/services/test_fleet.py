"""A fleet of conductors that stays consistent under load and faults.

Separate processes over the real RabbitMQ and MariaDB (and again on
PostgreSQL) and a real Placement (``fleet.py``): 3 conductors, the API
under gunicorn with 2 workers, 10 agents with distinct host names, each
with its own fake FPGA (16 attach handles) under its own compute node
provider. Nova is played by the test: its scheduler picks an FPGA
provider that Placement offers (one host is hot, so that its handles
are contended), its compute binds the instance's two ARQs there, waits
for the ``accelerator-request-bound`` events at the stand-in of
``tests/nova_events.py``, reads the ARQs, and then unbinds them, deletes
them, or both, while many instances cycle at once.

Meanwhile a chaos thread SIGKILLs a random conductor every
``KILL_EVERY`` seconds and starts it again, cuts Placement off from
every Cyborg service for ``PLACEMENT_DOWN`` seconds (disabling one
device and enabling another meanwhile, which the API answers 503 by
design) and deletes a provider in Placement behind Cyborg's back.

At the end, once the fleet is quiet:

- no ARQ is BindStarted, Deleting or UnbindFailed;
- no attach handle was held by two instances at once (the times the
  test saw each handle Bound, up to its release, never overlap) and the
  handles in use are exactly those of Bound ARQs;
- no bind failed for another reason than a lack of free handles or a
  dead host (the reasons come from the conductors' logs: BindFailed rows
  keep none);
- Nova got exactly one event per ARQ that was Bound or BindFailed;
- Placement's providers, inventories, reserved and traits equal what the
  database wants, within one reconciliation interval.

The counts are printed (``pytest -s``) and logged, one line each.
"""

import collections
from concurrent import futures
import logging
import math
import random
import signal
import threading
import time
import uuid

import requests

from cyborg import states
from cyborg.accelerator.drivers import fake
from tests.functional.services import fleet as fleet_module
from tests.functional.services.conftest import on_engine
from tests.nova_events import nova_events  # noqa: F401

LOG = logging.getLogger(__name__)

HOSTS = 10
CONDUCTORS = 3
INSTANCE_CYCLES = 300
CLIENT_THREADS = 16
ARQS_PER_INSTANCE = 2
PROFILE = 'fleet-fpga'
GROUPS = [{'resources:FPGA': str(ARQS_PER_INSTANCE),
           'trait:%s' % fake.TRAIT: 'required'}]
# The hot host gets this many times the instances of another host.
HOT_WEIGHT = 8
# How long an instance keeps its accelerators at most, in seconds.
HOLD = 1.0
# The chaos, in seconds since the cycles started.
FIRST_KILL = 8
KILL_EVERY = 20
PLACEMENT_DOWN_AT = 14
PLACEMENT_DOWN = 30
STATUS_CHANGE_AFTER = 3
DELETE_PROVIDER_AT = 50
# The cycles go on at least this long, and until INSTANCE_CYCLES are done.
MIN_RUN = 60
# Nova waits this long for the events of a bind.
EVENT_TIMEOUT = 90
# A loaded machine: a periodic pass may start a little late.
SLACK = 3
# The owner of the host whose provider is deleted may be the conductor
# just killed: its hosts move on once it misses SERVICE_DOWN_TIME, or it
# is back first, and its first pass reads every provider of its hosts
# afresh from a Placement that the test process serves under load
# (about 10 s seen).
RECREATE_WITHIN = (fleet_module.SERVICE_DOWN_TIME
                   + 2 * fleet_module.RECONCILE_INTERVAL + 15)

JSON = {'Content-Type': 'application/json', 'Accept': 'application/json'}
SIGKILLED = -signal.SIGKILL


class Client:
    """One ``requests.Session`` per thread, on the API's URL."""

    def __init__(self, url):
        self.url = url
        self._local = threading.local()

    def request(self, method, path, expected=None, **kwargs):
        session = getattr(self._local, 'session', None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers.update(JSON)
        answer = session.request(method, self.url + path, timeout=60,
                                 **kwargs)
        if expected is not None:
            assert answer.status_code == expected, '%s %s: %d %s' % (
                method, path, answer.status_code, answer.text)
        return answer


class Events:
    """Nova's received events by ARQ, indexed as they arrive."""

    def __init__(self, nova):
        self.nova = nova
        self.by_tag = collections.defaultdict(list)
        self._condition = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._index, daemon=True,
                                        name='nova-events-index')
        self._thread.start()

    def _index(self):
        seen = 0
        # The stand-in's own condition wakes us at each new event; read
        # only the new ones rather than copy the whole list each time.
        condition, events = self.nova._condition, self.nova._events
        while not self._stop.is_set():
            with condition:
                condition.wait_for(lambda n=seen: len(events) > n,
                                   timeout=0.5)
                new = events[seen:]
            seen += len(new)
            if new:
                with self._condition:
                    for event in new:
                        self.by_tag[event.tag].append(event)
                    self._condition.notify_all()

    def wait(self, tags, timeout):
        with self._condition:
            return self._condition.wait_for(
                lambda: all(t in self.by_tag for t in tags), timeout)

    def stop(self):
        self._stop.set()
        self._thread.join(5)


class Scheduler:
    """Nova's scheduler as far as Cyborg can tell: an FPGA provider with
    two free units, as Placement offers them, most often on the hot host.

    ``avoid`` is where the operator is about to disable a device: a real
    scheduler would learn it from Placement, which the outage delays.
    """

    def __init__(self, fleet, hot):
        self.fleet = fleet
        self.hot = hot
        self.avoid = set()
        self.in_flight = collections.Counter()
        self._lock = threading.Lock()
        self._candidates = fleet.schedulable()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh, daemon=True,
                                        name='scheduler')
        self._thread.start()

    def _refresh(self):
        while not self._stop.wait(0.5):
            candidates = self.fleet.schedulable()
            with self._lock:
                self._candidates = candidates

    def pick(self, rng):
        """(host, provider uuid), counted in flight until ``done``."""
        while True:
            with self._lock:
                choices = sorted((host, rp) for host, rp
                                 in self._candidates.items()
                                 if host not in self.avoid)
                if choices:
                    weights = [HOT_WEIGHT if host == self.hot else 1
                               for host, _ in choices]
                    host, rp = rng.choices(choices, weights)[0]
                    self.in_flight[host] += 1
                    return host, rp
            time.sleep(0.2)

    def done(self, host):
        with self._lock:
            self.in_flight[host] -= 1

    def idle(self, host):
        with self._lock:
            return not self.in_flight[host]

    def stop(self):
        self._stop.set()
        self._thread.join(5)


class Workload:
    """Instances that bind, then unbind and/or delete, over and over."""

    def __init__(self, fleet, client, events, scheduler, seed):
        self.fleet = fleet
        self.client = client
        self.events = events
        self.scheduler = scheduler
        self.seed = seed
        self.stopping = threading.Event()
        self.started = None
        self.cycles = 0
        self.outcomes = {}  # ARQ uuid -> Bound | BindFailed
        self.instances = {}  # ARQ uuid -> instance uuid
        # (handle uuid, instance, first seen Bound, release sent)
        self.holdings = []
        self.refused = []  # binds the API did not accept
        self.unanswered = []  # instances Nova heard nothing of in time
        self.actions = collections.Counter()
        self._lock = threading.Lock()

    def run_thread(self, index):
        rng = random.Random('%s-%d' % (self.seed, index))
        while not self.stopping.is_set():
            self.cycle(rng)
            with self._lock:
                self.cycles += 1

    def cycle(self, rng):
        created = self.client.request(
            'POST', '/v2/accelerator_requests', 201,
            json={'device_profile_name': PROFILE})
        arqs = [arq['uuid'] for arq in created.json()['arqs']]
        assert len(arqs) == ARQS_PER_INSTANCE
        instance = str(uuid.uuid4())
        host, rp_uuid = self.scheduler.pick(rng)
        try:
            answer = self.client.request(
                'PATCH', '/v2/accelerator_requests', json={arq: [
                    {'op': 'add', 'path': '/hostname', 'value': host},
                    {'op': 'add', 'path': '/device_rp_uuid',
                     'value': rp_uuid},
                    {'op': 'add', 'path': '/instance_uuid',
                     'value': instance}] for arq in arqs})
            if answer.status_code != 202:
                self.refused.append((instance, answer.status_code,
                                     answer.text))
                return
            if not self.events.wait(arqs, EVENT_TIMEOUT):
                self.unanswered.append((instance, arqs))
                return
        finally:
            self.scheduler.done(host)
        listed = self.client.request(
            'GET', '/v2/accelerator_requests?instance=%s&bind_state=resolved'
            % instance, 200).json()['arqs']
        seen = time.monotonic()
        assert sorted(a['uuid'] for a in listed) == sorted(arqs), listed
        handles = []
        for arq in listed:
            assert arq['state'] in (states.BOUND, states.BIND_FAILED), arq
            with self._lock:
                self.outcomes[arq['uuid']] = arq['state']
                self.instances[arq['uuid']] = instance
            if arq['state'] == states.BOUND:
                assert arq['attach_handle_uuid'], arq
                handles.append(arq['attach_handle_uuid'])
        failed = len(handles) < len(arqs)
        if self.stopping.is_set() and not failed and rng.random() < 0.5:
            # Instances still running at the end keep their devices.
            self._held(handles, instance, seen, math.inf)
            self._count('kept bound')
            return
        time.sleep(rng.uniform(0, HOLD))
        choice = rng.random()
        released = time.monotonic()
        if failed or choice < 1 / 3:
            self.client.request('DELETE', '/v2/accelerator_requests'
                                '?instance=%s' % instance, 204)
            self._count('deleted')
        else:
            self.client.request(
                'PATCH', '/v2/accelerator_requests', 202, json={arq: [
                    {'op': 'remove', 'path': path} for path in (
                        '/hostname', '/device_rp_uuid', '/instance_uuid')]
                    for arq in arqs})
            if choice < 2 / 3:
                self._count('unbound')
            else:
                self.client.request('DELETE', '/v2/accelerator_requests'
                                    '?arqs=%s' % ','.join(arqs), 204)
                self._count('unbound then deleted')
        self._held(handles, instance, seen, released)

    def _held(self, handles, instance, since, until):
        with self._lock:
            self.holdings.extend((h, instance, since, until)
                                 for h in handles)

    def _count(self, action):
        with self._lock:
            self.actions[action] += 1

    def overlapping_holdings(self):
        """Pairs of instances that held one handle at the same time."""
        by_handle = collections.defaultdict(list)
        for handle, instance, since, until in self.holdings:
            by_handle[handle].append((since, until, instance))
        overlaps = []
        for handle, spans in by_handle.items():
            spans.sort()
            held_until, holder = -math.inf, None
            for start, end, instance in spans:
                if start < held_until:
                    overlaps.append((handle, holder, instance))
                if end > held_until:
                    held_until, holder = end, instance
        return overlaps


class Chaos:
    """Kills conductors, cuts Placement off, changes devices' status and
    deletes a provider, on a schedule since ``started``."""

    def __init__(self, fleet, client, scheduler, seed):
        self.fleet = fleet
        self.client = client
        self.scheduler = scheduler
        self.rng = random.Random('chaos-%s' % seed)
        hosts = fleet.hosts
        self.disable_host, self.enable_host, self.deleted_host = hosts[1:4]
        self.kills = []  # (seconds, conductor name)
        self.marks = {}  # what happened -> seconds
        self.status_answers = {}  # action -> HTTP status
        self.errors = []
        self.stopping = threading.Event()
        self.started = None
        self._thread = None

    def start(self, started):
        self.started = started
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='chaos')
        self._thread.start()

    def stop(self):
        self.stopping.set()
        self._thread.join(60)

    def now(self):
        return time.monotonic() - self.started

    def mark(self, what):
        self.marks[what] = self.now()

    @property
    def done(self):
        return 'provider recreated' in self.marks and (
            'Placement follows the status changes' in self.marks)

    def _run(self):
        try:
            self._schedule()
        except Exception as exc:  # reported by the test
            LOG.exception('chaos failed')
            self.errors.append(exc)

    def _schedule(self):
        gate = self.fleet.deployment.gates['placement']
        next_kill = FIRST_KILL
        while not self.stopping.wait(0.2):
            now = self.now()
            if now >= next_kill:
                self._kill()
                next_kill += KILL_EVERY
            if now >= PLACEMENT_DOWN_AT and 'Placement cut' not in self.marks:
                gate.close()
                self.mark('Placement cut')
            if (now >= PLACEMENT_DOWN_AT + STATUS_CHANGE_AFTER
                    and 'status changed' not in self.marks):
                self._change_status()
            if (now >= PLACEMENT_DOWN_AT + PLACEMENT_DOWN
                    and 'Placement back' not in self.marks):
                gate.open()
                self.mark('Placement back')
            if ('Placement back' in self.marks
                    and 'Placement follows the status changes'
                    not in self.marks
                    and self.fleet.reserved(self.disable_host) == fake.HANDLES
                    and self.fleet.reserved(self.enable_host) == 0):
                self.mark('Placement follows the status changes')
            if (now >= DELETE_PROVIDER_AT
                    and 'provider deleted' not in self.marks):
                self.fleet.delete_provider(self.deleted_host)
                self.mark('provider deleted')
            if ('provider deleted' in self.marks
                    and 'provider recreated' not in self.marks
                    and self.fleet.reserved(self.deleted_host) is not None):
                self.mark('provider recreated')

    def _kill(self):
        conductor = self.rng.choice(self.fleet.conductors)
        status, _ = conductor.stop(signal.SIGKILL)
        assert status == SIGKILLED, conductor.tail()
        self.kills.append((self.now(), conductor.config_file.parent.name))
        conductor.start()

    def _change_status(self):
        """While Placement is cut off: disable the device of one host and
        enable that of another (disabled before the run)."""
        self.scheduler.avoid.add(self.disable_host)
        deadline = time.monotonic() + 30
        # No bind may be on its way there: it would fail, rightly, for
        # the device being disabled.
        while not self.scheduler.idle(self.disable_host):
            assert time.monotonic() < deadline, 'binds never ended'
            time.sleep(0.1)
        devices = self.fleet.devices()
        for action, host in (('disable', self.disable_host),
                             ('enable', self.enable_host)):
            answer = self.client.request(
                'POST', '/v2/devices/%s/%s' % (devices[host], action))
            self.status_answers[action] = answer.status_code
        self.mark('status changed')


@on_engine('mysql')
def test_fleet_stays_consistent(deployment, nova_events):  # noqa: F811
    nova = nova_events
    seed = deployment.host
    fleet = fleet_module.Fleet(deployment, nova, HOSTS, CONDUCTORS)
    scheduler = events = chaos = None
    try:
        setup_started = time.monotonic()
        fleet.start()
        client = Client(fleet.api.url)
        fleet.wait_until_reported()
        hot, chaos_hosts = fleet.hosts[0], fleet.hosts[1:4]
        # The device enabled during the outage starts disabled.
        devices = fleet.devices()
        assert set(devices) == set(fleet.hosts)
        client.request('POST', '/v2/devices/%s/disable'
                       % devices[chaos_hosts[1]], 200)
        assert fleet.reserved(chaos_hosts[1]) == fake.HANDLES
        client.request('POST', '/v2/device_profiles', 201,
                       json=[{'name': PROFILE, 'groups': GROUPS}])
        setup = time.monotonic() - setup_started

        events = Events(nova)
        scheduler = Scheduler(fleet, hot)
        workload = Workload(fleet, client, events, scheduler, seed)
        chaos = Chaos(fleet, client, scheduler, seed)
        started = time.monotonic()
        chaos.start(started)
        with futures.ThreadPoolExecutor(CLIENT_THREADS) as pool:
            threads = [pool.submit(workload.run_thread, index)
                       for index in range(CLIENT_THREADS)]
            while True:
                elapsed = time.monotonic() - started
                if (elapsed >= MIN_RUN and chaos.done
                        and workload.cycles >= INSTANCE_CYCLES):
                    break
                assert not chaos.errors, chaos.errors
                for thread in threads:
                    if thread.done():
                        thread.result()  # raises what broke it
                assert elapsed < MIN_RUN + 150, (
                    'only %d cycles after %.0f s; chaos: %s'
                    % (workload.cycles, elapsed, chaos.marks))
                time.sleep(0.5)
            chaos.stop()
            workload.stopping.set()
            for thread in threads:
                thread.result()
        cycling = time.monotonic() - started
        assert not chaos.errors, chaos.errors

        # -- quiet: every conductor up, nothing in flight, Placement synced
        for conductor in fleet.conductors:
            if not conductor.alive:
                conductor.start()
        quiet_started = time.monotonic()

        def quiet():
            rows = fleet.arq_rows()
            return (not [r for r in rows.values() if r.state in (
                states.BIND_STARTED, states.DELETING, states.UNBIND_FAILED)
                or r.nova_event_pending] and not fleet.hosts_behind())

        while not quiet():
            fleet.check_alive()
            assert time.monotonic() - quiet_started < BIND_TIMEOUT_WAIT, (
                'never quiet: %s; behind %s' % (collections.Counter(
                    r.state for r in fleet.arq_rows().values()),
                    fleet.hosts_behind()))
            time.sleep(0.5)
        placement_started = time.monotonic()
        while True:
            differences = fleet.placement_differences()
            placement_equal = time.monotonic() - placement_started
            if (not differences or placement_equal
                    > fleet_module.RECONCILE_INTERVAL + SLACK):
                break
            time.sleep(0.5)
        quiet_after = time.monotonic() - quiet_started
        fleet.check_alive()

        # -- what the fleet did --------------------------------------------
        rows = fleet.arq_rows()
        by_state = collections.Counter(r.state for r in rows.values())
        stuck = [u for u, r in rows.items() if r.state in (
            states.BIND_STARTED, states.DELETING, states.UNBIND_FAILED)]
        bound_rows = [r for r in rows.values() if r.state == states.BOUND]
        bound_handles = [r.attach_handle_id for r in bound_rows]
        overlaps = workload.overlapping_holdings()
        handles_in_use = fleet.handles_in_use()

        outcomes = dict(workload.outcomes)
        failed = [arq for arq, state in outcomes.items()
                  if state == states.BIND_FAILED]
        reasons = fleet.bind_failures()
        kinds = collections.Counter()
        bad_failures = {}
        for arq in failed:
            found = reasons.get(arq) or ['no reason logged']
            kind = fleet_module.classify(found[-1])
            kinds[kind] += 1
            if kind not in (fleet_module.NO_FREE_HANDLE,
                            fleet_module.DEAD_HOST):
                bad_failures[arq] = found

        events.stop()
        received = collections.defaultdict(list)
        for event in nova.events:
            received[event.tag].append(event)
        not_one = {arq: len(received.get(arq, ())) for arq in outcomes
                   if len(received.get(arq, ())) != 1}
        wrong_status = [
            (arq, [e.status for e in received[arq]])
            for arq, state in outcomes.items()
            if arq in received and any(
                e.status != ('completed' if state == states.BOUND
                             else 'failed')
                or e.server_uuid != workload.instances[arq]
                for e in received[arq])]
        unknown_events = sorted(set(received) - set(outcomes))

        lines = [
            'engine %s: %d hosts, %d conductors, 2 API workers; set-up '
            '%.0f s, cycles %.0f s, quiet after %.1f s'
            % (deployment.engine_name, HOSTS, CONDUCTORS, setup, cycling,
               quiet_after),
            'instance cycles: %d (%d ARQs bound or failed); after the '
            'bind: %s' % (workload.cycles, len(outcomes),
                          dict(workload.actions)),
            'bind outcomes: %d Bound, %d BindFailed; failures by reason: '
            '%s' % (len(outcomes) - len(failed), len(failed), dict(kinds)),
            'binds refused by the API: %d; instances Nova heard nothing of '
            'within %d s: %d' % (len(workload.refused), EVENT_TIMEOUT,
                                 len(workload.unanswered)),
            'conductors SIGKILLed: %d (%s)' % (len(chaos.kills), ', '.join(
                '%s at %.0f s' % (name, at) for at, name in chaos.kills)),
            'Placement cut off %.0f-%.0f s; disable/enable meanwhile '
            'answered %s; Placement followed at %.1f s'
            % (chaos.marks['Placement cut'], chaos.marks['Placement back'],
               chaos.status_answers,
               chaos.marks['Placement follows the status changes']),
            'provider deleted out of band at %.1f s, recreated %.1f s '
            'later' % (chaos.marks['provider deleted'],
                       chaos.marks['provider recreated']
                       - chaos.marks['provider deleted']),
            'ARQs left: %s; in BindStarted/Deleting/UnbindFailed: %d'
            % (dict(by_state), len(stuck)),
            'attach handles held by two instances at once: %d (seen by the '
            'test); Bound ARQs %d on %d distinct handles, %d handles in '
            'use' % (len(overlaps), len(bound_rows), len(set(bound_handles)),
                     len(handles_in_use)),
            'binds failed for another reason: %d' % len(bad_failures),
            'Nova events: %d for %d ARQs; ARQs without exactly one: %d; '
            'wrong status or instance: %d; events of unknown ARQs: %d; '
            'invalid calls: %d' % (
                sum(len(v) for v in received.values()), len(outcomes),
                len(not_one), len(wrong_status), len(unknown_events),
                len(nova.invalid)),
            'Placement differs from the database on %d hosts, %.1f s after '
            'the fleet was quiet' % (len(differences), placement_equal),
            'tracebacks in logs: %s' % (fleet.tracebacks() or 'none'),
        ]
        print('\n' + '\n'.join(lines))
        for line in lines:
            LOG.info('fleet: %s', line)

        # -- the invariants ------------------------------------------------
        assert workload.cycles >= INSTANCE_CYCLES
        assert len(chaos.kills) >= 2, chaos.kills
        assert chaos.status_answers == {'disable': 503, 'enable': 503}, (
            chaos.status_answers)
        assert not stuck, stuck
        assert not overlaps, overlaps[:5]
        assert None not in bound_handles
        assert len(set(bound_handles)) == len(bound_handles)
        assert handles_in_use == set(bound_handles)
        assert not workload.refused, workload.refused[:3]
        assert not workload.unanswered, workload.unanswered[:3]
        assert not bad_failures, dict(list(bad_failures.items())[:5])
        assert not not_one, describe_events(fleet, received,
                                            list(not_one)[:3])
        assert not wrong_status, wrong_status[:5]
        assert not unknown_events, unknown_events[:5]
        assert not nova.invalid, nova.invalid[:3]
        assert not differences, differences
        assert fleet.reserved(chaos.disable_host) == fake.HANDLES
        assert fleet.reserved(chaos.enable_host) == 0
        assert (chaos.marks['provider recreated']
                - chaos.marks['provider deleted']) <= RECREATE_WITHIN, (
            chaos.marks)
        assert not fleet.tracebacks(), fleet.tracebacks()
    finally:
        if chaos is not None and chaos._thread is not None:
            chaos.stop()
        for part in (scheduler, events):
            if part is not None:
                part.stop()
        deployment.gates['placement'].open()
        fleet.stop()


def describe_events(fleet, received, arqs):
    """What Nova got for ``arqs`` and what the conductors logged of
    them, for a failure message."""
    story = []
    for arq in arqs:
        story.append('ARQ %s: Nova got %s' % (arq, [
            (e.status, e.code) for e in received.get(arq, ())]))
        for conductor in fleet.conductors:
            story += ['  %s: %s' % (conductor.config_file.parent.name,
                                    line[:200])
                      for line in conductor.log().splitlines()
                      if arq in line]
    return '\n'.join(story)


# Binds in flight at the end finish, or fail at their deadline.
BIND_TIMEOUT_WAIT = fleet_module.BIND_TIMEOUT + 30
