"""Many instances bind at once onto one deployable, through real processes.

200 accelerator requests (100 instances with 2 each) bind concurrently
through 2 API worker processes (gunicorn) and 2 ``cyborg-conductor``
processes sharing one RabbitMQ virtual host (the API sends a host's
binds to its owner on the conductors' ring), on MariaDB and on
PostgreSQL, onto the fake driver's ``FakeDevice``: one deployable with
16 attach handles, reported by a real ``cyborg-agent``. Nova is the
stand-in of ``tests/nova_events.py``.

Exactly 16 ARQs may end Bound and none twice on a handle; the rest end
BindFailed, none stays BindStarted, and Nova hears of every ARQ once,
in one call per instance.
"""

import collections
from concurrent import futures
import re
import threading
import time
import uuid

import requests
import sqlalchemy as sa

from cyborg import states
from cyborg.accelerator.drivers import fake
from cyborg.db import models
from tests.functional.services import arq_services
from tests.nova_events import nova_events  # noqa: F401

INSTANCES = 100
ARQS_PER_INSTANCE = 2
ARQ_COUNT = INSTANCES * ARQS_PER_INSTANCE
CLIENT_THREADS = 32
PROFILE = 'concurrent-fpga'
GROUPS = [{'resources:FPGA': str(ARQS_PER_INSTANCE),
           'trait:CUSTOM_FAKE_DEVICE': 'required'}]
# Generous: on a loaded 2-core machine the whole bind takes a few
# seconds at most.
RESOLVE_TIMEOUT = 60
# Recovery passes every second; a few of them must send nothing more.
QUIET_AFTER = 3

ARQ = models.ExtendedAcceleratorRequest
Handle = models.AttachHandle
JSON = {'Content-Type': 'application/json', 'Accept': 'application/json'}


class Client:
    """One ``requests.Session`` per thread, on the API's URL."""

    def __init__(self, url):
        self.url = url
        self._local = threading.local()

    def _session(self):
        session = getattr(self._local, 'session', None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers.update(JSON)
        return session

    def request(self, method, path, **kwargs):
        return self._session().request(method, self.url + path, timeout=60,
                                       **kwargs)


def bind_body(arqs, rp_uuid, instance, hostname):
    return {arq: [
        {'op': 'add', 'path': '/hostname', 'value': hostname},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
        {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
        for arq in arqs}


def arq_rows(engine):
    columns = (ARQ.uuid, ARQ.state, ARQ.instance_uuid, ARQ.attach_handle_id,
               ARQ.nova_event_pending)
    with engine.connect() as connection:
        return [row._asdict()
                for row in connection.execute(sa.select(*columns))]


def describe_calls(calls, instance):
    """The calls that told ``instance``, in order: (call number, [(ARQ
    uuid, status), ...])."""
    return [(number, [(tag, status) for _, tag, status in call])
            for number, call in enumerate(calls)
            if any(server == instance for server, _, _ in call)]


def wait_until_resolved(engine, started, processes, timeout):
    """Wait until no ARQ is Initial or BindStarted; the seconds since
    ``started`` when that was first seen."""
    deadline = time.monotonic() + timeout
    while True:
        counts = arq_services.count_by(engine, ARQ.state)
        if not counts.get(states.BIND_STARTED) and not counts.get(
                states.INITIAL):
            return time.monotonic() - started
        for process in processes:
            assert process.alive, '%s exited:\n%s' % (process.name,
                                                      process.tail())
        assert time.monotonic() < deadline, (
            'ARQs still unresolved %.0f s after the first bind: %s'
            % (time.monotonic() - started, counts))
        time.sleep(0.05)


def test_200_arqs_from_100_instances_race_for_16_handles(
        deployment, nova_events):  # noqa: F811
    nova = nova_events
    conductors = [
        arq_services.conductor(deployment, 'conductor-%s-%s' % (
            letter, deployment.host), nova.conf_section())
        for letter in 'ab']
    agent = arq_services.agent(deployment)
    api = arq_services.APIServer(deployment, workers=2)
    processes = [*conductors, agent]
    try:
        for conductor in conductors:
            conductor.start()
        api.start()
        # The agent's first report must find a conductor's queue (a
        # message sent before it exists is lost, and the report waits
        # for its timeout).
        for conductor in conductors:
            conductor.wait_for_log(r'cyborg-conductor started', timeout=60)
        agent.start()
        providers = deployment.wait_until_converged({fake.DEPLOYABLE_NAME})
        rp_uuid = providers['%s_%s' % (deployment.host,
                                       fake.DEPLOYABLE_NAME)][0]
        assert deployment.db_deployables()[fake.DEPLOYABLE_NAME][1] == rp_uuid
        client = Client(api.url)

        created = client.request('POST', '/v2/device_profiles', json=[
            {'name': PROFILE, 'groups': GROUPS}])
        assert created.status_code == 201, created.text

        def create_arqs(_):
            answer = client.request('POST', '/v2/accelerator_requests',
                                    json={'device_profile_name': PROFILE})
            assert answer.status_code == 201, answer.text
            return [arq['uuid'] for arq in answer.json()['arqs']]

        with futures.ThreadPoolExecutor(CLIENT_THREADS) as pool:
            made = list(pool.map(create_arqs, range(INSTANCES)))
        instances = {str(uuid.uuid4()): arqs for arqs in made}
        owner = {arq: instance for instance, arqs in instances.items()
                 for arq in arqs}
        assert len(owner) == ARQ_COUNT
        assert arq_services.count_by(deployment.db_engine, ARQ.state) == {
            states.INITIAL: ARQ_COUNT}

        # -- the bind: every instance at once --------------------------
        barrier = threading.Barrier(CLIENT_THREADS)
        latencies = []

        def bind(item):
            index, (instance, arqs) = item
            if index < CLIENT_THREADS:
                # The first request of every thread leaves together.
                barrier.wait(timeout=30)
            sent = time.monotonic()
            answer = client.request(
                'PATCH', '/v2/accelerator_requests',
                json=bind_body(arqs, rp_uuid, instance, deployment.host))
            latencies.append(time.monotonic() - sent)
            return instance, answer.status_code, answer.text

        started = time.monotonic()
        with futures.ThreadPoolExecutor(CLIENT_THREADS) as pool:
            answers = list(pool.map(bind, enumerate(instances.items())))
        patched = time.monotonic() - started
        refused = [a for a in answers if a[1] != 202]
        assert not refused, '%d of %d binds refused, e.g. %s' % (
            len(refused), INSTANCES, refused[:3])

        resolved = wait_until_resolved(deployment.db_engine, started,
                                       processes + [api], RESOLVE_TIMEOUT)
        all_told = nova.wait_for(
            lambda server: {e.tag for e in server.events} >= set(owner),
            timeout=RESOLVE_TIMEOUT)
        notified = time.monotonic() - started
        latencies.sort()
        timing = ('%s: %d PATCHes of %d ARQs from %d threads answered in '
                  '%.2f s (%.0f req/s; latency p50 %.0f ms, max %.0f ms); '
                  'all ARQs resolved after %.2f s; Nova told of all after '
                  '%.2f s' % (deployment.engine_name, INSTANCES, ARQ_COUNT,
                              CLIENT_THREADS, patched, INSTANCES / patched,
                              1000 * latencies[len(latencies) // 2],
                              1000 * latencies[-1], resolved, notified))
        print('\n' + timing)
        assert all_told, 'Nova was told of %d ARQs of %d; %s' % (
            len({e.tag for e in nova.events}), ARQ_COUNT, timing)
        # Let a few recovery passes of both conductors run: they must
        # find nothing left to send.
        time.sleep(QUIET_AFTER)

        # -- the database: 16 Bound on 16 distinct handles ----------------
        rows = arq_rows(deployment.db_engine)
        assert {r['uuid'] for r in rows} == set(owner)
        by_state = collections.Counter(r['state'] for r in rows)
        assert by_state == {states.BOUND: fake.HANDLES,
                            states.BIND_FAILED: ARQ_COUNT - fake.HANDLES}, (
            '%s; %s' % (dict(by_state), timing))
        bound = {r['uuid'] for r in rows if r['state'] == states.BOUND}
        bound_handles = [r['attach_handle_id'] for r in rows
                         if r['state'] == states.BOUND]
        assert None not in bound_handles
        assert len(set(bound_handles)) == fake.HANDLES, bound_handles
        assert all(r['attach_handle_id'] is None for r in rows
                   if r['state'] == states.BIND_FAILED)
        assert all(r['instance_uuid'] == owner[r['uuid']] for r in rows)
        with deployment.db_engine.connect() as connection:
            distinct_handles = connection.execute(
                sa.select(sa.func.count(sa.distinct(ARQ.attach_handle_id)))
                .where(ARQ.attach_handle_id.is_not(None))).scalar_one()
            in_use = set(connection.execute(
                sa.select(Handle.id).where(Handle.in_use == sa.true()))
                .scalars())
        assert distinct_handles == fake.HANDLES
        assert in_use == set(bound_handles)
        pending = [r['uuid'] for r in rows if r['nova_event_pending']]
        assert not pending, 'events never delivered: %s' % pending

        # -- the API says the same -----------------------------------
        listed = client.request('GET', '/v2/accelerator_requests')
        assert listed.status_code == 200, listed.text
        seen = {a['uuid']: a for a in listed.json()['arqs']}
        assert set(seen) == set(owner)
        assert {u for u, a in seen.items()
                if a['state'] == states.BOUND} == bound
        handle_uuids = [seen[u]['attach_handle_uuid'] for u in bound]
        assert len(set(handle_uuids)) == fake.HANDLES
        assert all(seen[u]['attach_handle_type'] == 'TEST_PCI'
                   for u in bound)

        # -- Nova: one call per instance, one event per ARQ -----------------
        assert not nova.invalid, nova.invalid[:3]
        events = nova.events
        calls = [[(e['server_uuid'], e['tag'], e['status'])
                  for e in call.json()['events']] for call in nova.calls]
        tags = collections.Counter(e.tag for e in events)
        repeated = sorted(tag for tag, n in tags.items() if n > 1)
        per_instance = collections.Counter(
            server for call in calls for server in {e[0] for e in call})
        split = sorted(i for i, n in per_instance.items() if n > 1)
        # Told of part of its ARQs first, the rest later.
        partial = sorted(i for i in split if len(
            describe_calls(calls, i)[0][1]) < ARQS_PER_INSTANCE)
        example = (partial or split or [owner[t] for t in repeated])[:1]
        assert not repeated and not split, (
            '%d events for %d ARQs in %d calls for %d instances: %d ARQs '
            'announced more than once, %d instances told in several calls '
            '(%d first of only part of their ARQs). The calls of instance '
            '%s: %s' % (len(events), ARQ_COUNT, len(calls), INSTANCES,
                        len(repeated), len(split), len(partial), example[0],
                        describe_calls(calls, example[0])))
        assert set(tags) == set(owner)
        for event in events:
            assert event.name == 'accelerator-request-bound'
            assert event.server_uuid == owner[event.tag]
            assert event.status == ('completed' if event.tag in bound
                                    else 'failed'), event
        assert all(len({e[0] for e in call}) == 1 for call in calls), (
            'one call told several instances')
        assert set(per_instance) == set(instances)

        # -- each ARQ was handled once, by one conductor; none broke ------
        # The host's binds go to its owner on the conductor ring; the
        # other conductor takes some only while the API's view of the
        # ring is older than the second conductor's start.
        handled = {}
        for conductor in conductors:
            log = conductor.log()
            assert conductor.alive, conductor.tail()
            handled[conductor.config_file] = len(re.findall(
                r'ARQ \S+ (bound to|of instance \S+ failed to bind)', log))
            assert 'Traceback' not in log, conductor.tail(80)
            assert 'stopped half way' not in log, conductor.tail(80)
        assert sum(handled.values()) == ARQ_COUNT, handled
        assert 'Traceback' not in api.log(), api.tail(80)
    finally:
        api.stop()
        for process in processes:
            process.kill()
