"""A conductor killed (SIGKILL) while the agent programs an FPGA slowly.

Real processes over RabbitMQ (the per-test virtual host of
``conftest.py``), on MariaDB and on PostgreSQL: a ``cyborg-agent`` with
the fake driver, whose FPGA takes ``[fake_driver] program_seconds`` to
load a bitstream downloaded from a real Glance (``tests/glance_service.py``);
``cyborg-conductor`` processes; the API under gunicorn; Nova's
external-events stand-in (``tests/nova_events.py``). Every ARQ's device
profile group asks for that bitstream, so every bind programs the FPGA.

1. ``test_restarted_conductor_resumes_its_binds``: the conductor dies
   while it binds three instances (one PATCH each, as Nova sends them); a
   new conductor process under the same ``[DEFAULT] host`` resumes the
   binds it owned. Every ARQ ends Bound on the handle it had, Nova gets one
   ``completed`` event per ARQ, and the FPGA's resource provider carries
   the function trait of the bitstream.
2. ``test_surviving_conductor_fails_binds_of_a_dead_one``: two
   conductors; the one that holds the binds dies and stays dead. The other
   fails the binds once they are older than ``[conductor] bind_timeout``:
   BindFailed, every handle free again, Nova gets ``failed`` events.
3. ``test_binds_queued_while_the_conductor_is_down``: the conductor dies
   while it binds one instance; two more are bound while it is down (their
   casts wait in RabbitMQ, addressed to it by the API but not claimed).
   After the restart it resumes the one bind it owned and takes the
   queued casts: each ARQ bound once, the card programmed once in all
   (the program the dead conductor asked for; then it holds the
   bitstream and the agent programs it no more).
4. ``test_conductor_killed_while_telling_nova``: the conductor dies
   during its call to Nova (the stand-in holds it unanswered); after the
   restart, recovery sends the events still pending once they are older
   than ``[conductor] nova_event_retry_after``.
5. ``test_conductor_reloaded_while_it_binds``: SIGHUP while the conductor
   waits for a program longer than a stop waits: the bind still running
   in the process must not be resumed a second time.

In all of them, no handle is given twice, none stays taken by an ARQ
that is not Bound, no ARQ stays BindStarted, and Nova is told exactly
once per instance. Timings are printed (``pytest -s``).
"""

import collections
import re
import signal
import time
import uuid

import sqlalchemy as sa

from cyborg import states
from cyborg.accelerator.drivers import fake
from cyborg.conductor import bitstreams
from cyborg.db import models
from tests.functional.services import arq_services
from tests.functional.services.conftest import REPORT_INTERVAL
from tests.functional.services.conftest import ServiceProcess
from tests.functional.services.conftest import on_engine
from tests.glance_service import glance  # noqa: F401
from tests.glance_service import glance_service  # noqa: F401
from tests.nova_events import STALL
from tests.nova_events import nova_events  # noqa: F401

ARQ = models.ExtendedAcceleratorRequest
Handle = models.AttachHandle
INSTANCES = 3
PROFILE = 'crash-fpga'
RECOVERY_INTERVAL = 1
# Scenario 1: the binds run concurrently (one cast per instance) and the
# agent programs one at a time, so the restarted conductor waits for the
# programs its predecessor started before its own: 2 x 3 x 5 s at most.
RESUME_PROGRAM_SECONDS = 5
RESUME_BIND_TIMEOUT = 120
# Scenario 2: the conductor dies about a second into a 15 s program; the
# survivor must not wait for the program, only for bind_timeout.
FAIL_PROGRAM_SECONDS = 15
FAIL_BIND_TIMEOUT = 6
# Only the host's owner acts on its binds: the survivor owns the host
# once the dead conductor's last heartbeat (every 3 s, kept in whole
# seconds on MariaDB) is service_down_time old. That is after the binds'
# deadline, so it fails them as overdue rather than taking them over.
FAIL_HEARTBEATS = ('heartbeat_interval = 3', 'service_down_time = 10')
FAIL_RING_MOVE = 3 + 10 + 1
# A loaded machine: a recovery pass may start late and take a while.
FAIL_SLACK = 4
# Recovery passes every second; a few more must send Nova nothing.
QUIET_AFTER = 3
SIGKILLED = -signal.SIGKILL


# -- the processes -----------------------------------------------------------

def glance_section(glance_url):
    """An unauthenticated Glance: keystoneauth's "none" plugin."""
    return '[glance]\nauth_type = none\nendpoint_override = %s\n' % glance_url


def agent(deployment, glance_url, program_seconds):
    directory = deployment.directory / 'agent'
    directory.mkdir()
    config = arq_services.common_config(
        deployment, directory / 'cyborg-agent.log', deployment.host) + (
        '[agent]\n'
        'enabled_drivers = fake_driver\n'
        'report_interval = %d\n'
        'report_timeout = 10\n'
        'retry_interval = 1\n'
        '[fake_driver]\n'
        'program_seconds = %s\n' % (REPORT_INTERVAL, program_seconds)
    ) + glance_section(glance_url)
    return ServiceProcess('cyborg-agent', directory, config)


def conductor(deployment, directory_name, host, glance_url, nova,
              bind_timeout, nova_event_retry_after=None, agent_timeout=None,
              default=()):
    """A ``cyborg-conductor`` named ``host`` (the owner of its binds),
    logging in a directory of its own; ``default``, more ``[DEFAULT]``
    lines."""
    directory = deployment.directory / directory_name
    directory.mkdir()
    config = arq_services.common_config(
        deployment, directory / 'cyborg-conductor.log', host,
        default=default) + (
        '[conductor]\n'
        'retry_interval = 1\n'
        'recovery_interval = %d\n'
        'bind_timeout = %d\n' % (RECOVERY_INTERVAL, bind_timeout))
    if nova_event_retry_after is not None:
        config += 'nova_event_retry_after = %d\n' % nova_event_retry_after
    # The agent calls of one bind must fit in bind_timeout (checked at
    # start): what is left after the prepare call goes to the program.
    if agent_timeout is None:
        agent_timeout = max(1, bind_timeout // 6)
    config += 'agent_timeout = %d\n' % agent_timeout
    config += 'agent_program_timeout = %d\n' % (
        bind_timeout - agent_timeout - 1)
    config += glance_section(glance_url) + nova.conf_section()
    return ServiceProcess('cyborg-conductor', directory, config)


class Timeline:
    """Seconds since the start of the test, by label."""

    def __init__(self):
        self.started = time.monotonic()
        self.marks = []

    def mark(self, label):
        seconds = time.monotonic() - self.started
        self.marks.append((label, seconds))
        return seconds

    def __getitem__(self, label):
        return dict(self.marks)[label]

    def since(self, earlier, later):
        return self[later] - self[earlier]

    def describe(self):
        return ', '.join('%s %.1f s' % mark for mark in self.marks)


class Rig(arq_services.ProcessRig):
    """One test's processes and what it made through the API."""

    def __init__(self, deployment, glance_server, nova):
        super().__init__(deployment)
        self.glance = glance_server
        self.nova = nova
        self.rp_uuid = None
        self.image = None
        self.arqs = {}  # instance uuid -> [ARQ uuid]

    def start(self, program_seconds, conductors):
        self.agent = self.add(agent(self.deployment, self.glance.url,
                                    program_seconds)).start()
        for process in conductors:
            self.add(process).start()
        self.api = arq_services.APIServer(self.deployment, workers=1)
        self.api.start()
        for process in conductors:
            process.wait_for_log(r'cyborg-conductor started')
        providers = self.deployment.wait_until_converged(
            {fake.DEPLOYABLE_NAME})
        self.rp_uuid = providers['%s_%s' % (self.deployment.host,
                                            fake.DEPLOYABLE_NAME)][0]

    # -- the bitstream, the profile, the ARQs ---------------------------

    def make_arqs(self, instances=INSTANCES):
        """Upload a bitstream for the fake FPGA, make a profile asking for
        it, and one ARQ for each of ``instances`` instances."""
        bs_uuid = str(uuid.uuid4())
        self.image = self.glance.upload_bitstream(
            b'crash-test bitstream ' + bs_uuid.encode() * 64,
            name='crash-%s' % bs_uuid[:8], **{
                'bs-uuid': bs_uuid,
                'bs-name': 'crash-test',
                'vendor': fake.VENDOR_ID,
                'board': 'FakeFPGA',
                'region_uuid': fake.REGION_UUID,
                'function_uuid': str(uuid.uuid4()),
                'function_name': 'crash-test-function',
                'version': '1.0'})
        self.request('POST', '/v2/device_profiles', 201, json=[{
            'name': PROFILE,
            'groups': [{'resources:FPGA': '1',
                        'accel:bitstream_id': bs_uuid}]}])
        for _ in range(instances):
            created = self.request('POST', '/v2/accelerator_requests', 201,
                                   json={'device_profile_name': PROFILE})
            self.arqs[str(uuid.uuid4())] = [
                arq['uuid'] for arq in created.json()['arqs']]
        assert all(len(arqs) == 1 for arqs in self.arqs.values())

    @property
    def owner(self):
        """{ARQ uuid: instance uuid}."""
        return {arq: instance for instance, arqs in self.arqs.items()
                for arq in arqs}

    def bind_body(self, instance_arqs):
        return {arq: [
            {'op': 'add', 'path': '/hostname',
             'value': self.deployment.host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': self.rp_uuid},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
            for instance, arqs in instance_arqs for arq in arqs}

    def bind_each(self):
        """One PATCH per instance, as Nova sends them."""
        for instance, arqs in self.arqs.items():
            self.request('PATCH', '/v2/accelerator_requests', 202,
                         json=self.bind_body([(instance, arqs)]))

    def bind_together(self):
        """One PATCH for every instance: one cast, one conductor."""
        self.request('PATCH', '/v2/accelerator_requests', 202,
                     json=self.bind_body(self.arqs.items()))

    # -- what the database holds ------------------------------------------

    def rows(self):
        columns = (ARQ.uuid, ARQ.state, ARQ.instance_uuid,
                   ARQ.attach_handle_id, ARQ.bind_conductor,
                   ARQ.bind_deadline, ARQ.nova_event_pending)
        with self.engine.connect() as connection:
            return {row.uuid: row._asdict() for row in connection.execute(
                sa.select(*columns))}

    def handles_in_use(self):
        with self.engine.connect() as connection:
            return set(connection.execute(sa.select(Handle.id).where(
                Handle.in_use == sa.true())).scalars())

    def wait_until(self, what, predicate, timeout, alive=()):
        """``predicate()``'s value once true; ``alive`` must not exit."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            for process in alive:
                assert process.alive, (
                    '%s exited while waiting until %s:\n%s'
                    % (process.name, what, process.tail()))
            assert time.monotonic() < deadline, (
                'not %s within %s s: ARQs %s' % (what, timeout, self.rows()))
            time.sleep(0.1)

    def unresolved(self):
        return [r for r in self.rows().values()
                if r['state'] in (states.INITIAL, states.BIND_STARTED)]

    # -- checks ----------------------------------------------------------

    def programming_started(self, since=0):
        return 'Programming FPGA' in self.agent.log()[since:]

    def programs(self, since=0):
        """(started, finished) programs in the agent's log after ``since``."""
        log = self.agent.log()[since:]
        return (len(re.findall(r'Programming FPGA ', log)),
                len(re.findall(r'Programmed FPGA ', log)))

    def wait_until_agent_idle(self, since, quiet):
        """Wait until every program the agent started after ``since`` has
        ended and none started for ``quiet`` seconds; the program count.

        A program waiting for the device's lock is not in the log yet,
        but it starts within moments of the one before it ending."""
        last, still_since = None, time.monotonic()
        deadline = time.monotonic() + 120
        while True:
            now = self.programs(since)
            if now != last:
                last, still_since = now, time.monotonic()
            elif (now[0] == now[1]
                  and time.monotonic() - still_since >= quiet):
                return now[1]
            assert self.agent.alive, self.agent.tail()
            assert time.monotonic() < deadline, (
                'the agent never stopped programming: %s' % (now,))
            time.sleep(0.2)

    def function_trait(self):
        return bitstreams.function_trait(self.image)

    def placement_traits(self):
        return self.deployment.placement.client().get_traits(
            self.rp_uuid)[1]

    def check_nova(self, status, unanswered=0):
        """Exactly one answered call per instance, with the event of each
        of its ARQs, all with ``status``; besides, ``unanswered`` calls
        that the stand-in held without an answer."""
        assert not self.nova.invalid, self.nova.invalid
        held = [c for c in self.nova.calls if c.status is None]
        assert len(held) == unanswered, held
        calls = collections.defaultdict(list)
        for call in self.nova.calls:
            if call.status is None:
                continue
            assert call.status == 200, call
            events = call.json()['events']
            servers = {e['server_uuid'] for e in events}
            assert len(servers) == 1, 'one call told several instances: %s' % (
                events,)
            calls[servers.pop()].append(sorted(
                (e['name'], e['tag'], e['status']) for e in events))
        expected = {instance: [sorted(
            ('accelerator-request-bound', arq, status) for arq in arqs)]
            for instance, arqs in self.arqs.items()}
        assert dict(calls) == expected, (
            'Nova was told %s; expected one call per instance: %s'
            % (dict(calls), expected))
        # What Nova dispatched (the stand-in accepted every event).
        assert sorted((e.server_uuid, e.tag, e.status, e.code)
                      for e in self.nova.events) == sorted(
            (instance, arq, status, 200)
            for instance, arqs in self.arqs.items() for arq in arqs)

    def check_api(self, state):
        """What Nova reads before it spawns: every instance resolved."""
        handles = []
        for instance, arqs in self.arqs.items():
            listed = self.request(
                'GET', '/v2/accelerator_requests?instance=%s'
                '&bind_state=resolved' % instance, 200).json()['arqs']
            assert sorted(a['uuid'] for a in listed) == sorted(arqs)
            for arq in listed:
                assert arq['state'] == state, arq
                assert arq['instance_uuid'] == instance, arq
                if state == states.BOUND:
                    assert arq['attach_handle_type'] == 'TEST_PCI', arq
                    assert arq['attach_handle_uuid'], arq
                    assert arq['device_rp_uuid'] == self.rp_uuid, arq
                    handles.append(arq['attach_handle_uuid'])
                else:
                    assert not arq['attach_handle_uuid'], arq
        assert len(handles) == len(set(handles)), handles


def no_traceback(process):
    log = process.log()
    assert 'Traceback' not in log, process.tail(80)
    assert 'stopped half way' not in log, process.tail(80)


# -- scenario 1 -------------------------------------------------------------

@on_engine('mysql')
def test_restarted_conductor_resumes_its_binds(
        deployment, glance, nova_events):  # noqa: F811
    timeline = Timeline()
    nova = nova_events
    host = 'conductor-%s' % deployment.host
    first = conductor(deployment, 'conductor-first', host, glance.url, nova,
                      RESUME_BIND_TIMEOUT)
    rig = Rig(deployment, glance, nova)
    try:
        rig.start(RESUME_PROGRAM_SECONDS, [first])
        timeline.mark('services up')
        rig.make_arqs()
        owner = rig.owner
        agent_log_start = len(rig.agent.log())

        timeline.mark('bind')
        rig.bind_each()

        # The conductor owns every bind, has taken handles and the agent
        # is programming the first bitstream: kill it now.
        def in_flight():
            rows = rig.rows()
            return (all(r['state'] == states.BIND_STARTED
                        and r['bind_conductor'] == host
                        for r in rows.values())
                    and any(r['attach_handle_id'] is not None
                            for r in rows.values())
                    and rig.programming_started(agent_log_start))

        rig.wait_until('the agent programs', in_flight, 30,
                       alive=[rig.agent, first])
        status, _ = first.stop(signal.SIGKILL)
        timeline.mark('SIGKILL')
        assert status == SIGKILLED, first.tail()
        at_kill = rig.rows()
        assert set(at_kill) == set(owner)
        # Killed in the middle: nothing finished, nothing told to Nova.
        assert all(r['state'] == states.BIND_STARTED
                   and r['bind_conductor'] == host
                   for r in at_kill.values()), at_kill
        handles_at_kill = {u: r['attach_handle_id']
                           for u, r in at_kill.items()
                           if r['attach_handle_id'] is not None}
        assert len(set(handles_at_kill.values())) == len(handles_at_kill)
        assert rig.handles_in_use() == set(handles_at_kill.values())
        assert not nova.calls

        # -- the same conductor again: it resumes what it owned ---------
        second = rig.add(conductor(deployment, 'conductor-second', host,
                                   glance.url, nova, RESUME_BIND_TIMEOUT))
        second.start()
        second.wait_for_log(r'cyborg-conductor started', timeout=60)
        timeline.mark('restarted')
        second.wait_for_log(r'Resuming %d binds left unfinished'
                            % INSTANCES, timeout=30)
        timeline.mark('resuming')
        rig.wait_until('resolved', lambda: not rig.unresolved(), 120,
                       alive=[rig.agent, second])
        timeline.mark('all resolved')
        assert nova.wait_for_events(INSTANCES, timeout=30), (
            'Nova got %s' % nova.events)
        timeline.mark('Nova told')
        trait = rig.function_trait()
        assert trait and trait.startswith('CUSTOM_FPGA_FUNCTION_ID_')
        rig.wait_until('the function trait is in Placement',
                       lambda: trait in rig.placement_traits(),
                       4 * REPORT_INTERVAL + 10, alive=[rig.agent])
        timeline.mark('trait in Placement')
        time.sleep(QUIET_AFTER)
        print('\n%s restart resumes: %s' % (deployment.engine_name,
                                             timeline.describe()))

        # -- every ARQ Bound, on the handle it had ----------------------
        rows = rig.rows()
        assert {u: r['state'] for u, r in rows.items()} == dict.fromkeys(
            owner, states.BOUND), rows
        assert all(r['instance_uuid'] == owner[u] for u, r in rows.items())
        assert all(r['bind_conductor'] is None for r in rows.values())
        assert not [u for u, r in rows.items() if r['nova_event_pending']]
        bound_handles = [r['attach_handle_id'] for r in rows.values()]
        assert None not in bound_handles
        assert len(set(bound_handles)) == INSTANCES, bound_handles
        assert rig.handles_in_use() == set(bound_handles)
        for arq, handle in handles_at_kill.items():
            assert rows[arq]['attach_handle_id'] == handle, (
                'ARQ %s had handle %s when its conductor died and ended on '
                '%s' % (arq, handle, rows[arq]['attach_handle_id']))
        rig.check_api(states.BOUND)
        rig.check_nova('completed')
        assert trait in deployment.db_traits()[fake.DEPLOYABLE_NAME]

        # -- the restarted conductor did the binds; the agent programmed
        # the card at least once (then it holds the bitstream) -----------
        log = second.log()
        bound_lines = re.findall(r'ARQ (\S+) bound to TEST_PCI handle', log)
        assert sorted(bound_lines) == sorted(owner), log
        programmed = len(re.findall(r'Programmed FPGA \S+ with image %s'
                                    % rig.image['id'], rig.agent.log()))
        assert programmed >= 1, rig.agent.tail(80)
        print('%s: %d programs by the agent (%d handles taken before the '
              'kill)' % (deployment.engine_name, programmed,
                         len(handles_at_kill)))
        no_traceback(second)
        no_traceback(rig.agent)
        assert 'Traceback' not in rig.api.log(), rig.api.tail(80)
    finally:
        rig.close()


# -- scenario 2 -------------------------------------------------------------

@on_engine('postgresql')
def test_surviving_conductor_fails_binds_of_a_dead_one(
        deployment, glance, nova_events):  # noqa: F811
    timeline = Timeline()
    nova = nova_events
    hosts = ['conductor-%s-%s' % (letter, deployment.host)
             for letter in 'ab']
    conductors = {host: conductor(deployment, host, host, glance.url, nova,
                                  FAIL_BIND_TIMEOUT, default=FAIL_HEARTBEATS)
                  for host in hosts}
    rig = Rig(deployment, glance, nova)
    try:
        rig.start(FAIL_PROGRAM_SECONDS, list(conductors.values()))
        timeline.mark('services up')
        rig.make_arqs()
        owner = rig.owner
        agent_log_start = len(rig.agent.log())

        timeline.mark('bind')
        rig.bind_together()

        def in_flight():
            rows = rig.rows()
            holders = {r['bind_conductor'] for r in rows.values()}
            return (len(holders) == 1 and None not in holders
                    and all(r['state'] == states.BIND_STARTED
                            for r in rows.values())
                    and any(r['attach_handle_id'] is not None
                            for r in rows.values())
                    and rig.programming_started(agent_log_start)
                    and holders.pop())

        holder = rig.wait_until('the agent programs', in_flight, 30,
                                alive=[rig.agent, *conductors.values()])
        status, _ = conductors[holder].stop(signal.SIGKILL)
        timeline.mark('SIGKILL')
        assert status == SIGKILLED, conductors[holder].tail()
        (survivor,) = [c for h, c in conductors.items() if h != holder]
        # The kill must come first: a live bind older than bind_timeout
        # is failed too, which would prove nothing about the kill.
        assert timeline.since('bind', 'SIGKILL') < FAIL_BIND_TIMEOUT - 2, (
            timeline.describe())
        at_kill = rig.rows()
        assert all(r['state'] == states.BIND_STARTED
                   and r['bind_conductor'] == holder
                   for r in at_kill.values()), at_kill
        taken = {r['attach_handle_id'] for r in at_kill.values()} - {None}
        assert taken and rig.handles_in_use() == taken

        rig.wait_until('resolved', lambda: not rig.unresolved(),
                       FAIL_RING_MOVE + RECOVERY_INTERVAL + 30,
                       alive=[rig.agent, survivor])
        timeline.mark('all failed')
        assert nova.wait_for_events(INSTANCES, timeout=30), (
            'Nova got %s' % nova.events)
        timeline.mark('Nova told')
        time.sleep(QUIET_AFTER)
        print('\n%s survivor fails the binds (bind_timeout %d s, '
              'recovery_interval %d s): %s' % (
                  deployment.engine_name, FAIL_BIND_TIMEOUT,
                  RECOVERY_INTERVAL, timeline.describe()))

        # Failed by the survivor, in time and not before: as soon as the
        # ring gives it the host.
        took = timeline.since('bind', 'all failed')
        due = timeline.since('bind', 'SIGKILL') + FAIL_RING_MOVE
        # MariaDB keeps bind_started_at in whole seconds: up to 1 s early.
        assert FAIL_BIND_TIMEOUT - 1.5 <= took <= (
            due + RECOVERY_INTERVAL + FAIL_SLACK), timeline.describe()
        failed_lines = re.findall(
            r'ARQ (\S+) of instance (\S+): bind did not finish within %d s; '
            r'failed' % FAIL_BIND_TIMEOUT, survivor.log())
        assert sorted(failed_lines) == sorted(owner.items()), (
            survivor.tail(40))

        rows = rig.rows()
        assert {u: r['state'] for u, r in rows.items()} == dict.fromkeys(
            owner, states.BIND_FAILED), rows
        assert all(r['attach_handle_id'] is None
                   and r['bind_conductor'] is None
                   and not r['nova_event_pending'] for r in rows.values())
        assert rig.handles_in_use() == set()
        rig.check_api(states.BIND_FAILED)
        rig.check_nova('failed')
        # The dead conductor stays dead; the survivor did it all.
        assert not conductors[holder].alive
        assert survivor.alive, survivor.tail()
        no_traceback(survivor)
        assert 'Traceback' not in rig.api.log(), rig.api.tail(80)
    finally:
        rig.close()



# -- scenario 3 -------------------------------------------------------------

QUEUED_PROGRAM_SECONDS = 3


@on_engine('mysql')
def test_binds_queued_while_the_conductor_is_down(
        deployment, glance, nova_events):  # noqa: F811
    """The conductor dies while it binds the first instance; Nova binds
    the two others while it is down, and their casts wait in RabbitMQ.
    The restarted conductor resumes the first bind and takes the queued
    casts: each ARQ is bound once more, and the card, which holds the
    bitstream since the first program, is not programmed again."""
    timeline = Timeline()
    nova = nova_events
    host = 'conductor-%s' % deployment.host
    first = conductor(deployment, 'conductor-first', host, glance.url, nova,
                      RESUME_BIND_TIMEOUT)
    rig = Rig(deployment, glance, nova)
    try:
        rig.start(QUEUED_PROGRAM_SECONDS, [first])
        timeline.mark('services up')
        rig.make_arqs()
        owner = rig.owner
        (early, *later) = rig.arqs.items()
        (early_arq,) = early[1]
        agent_log_start = len(rig.agent.log())
        timeline.mark('bind 1')
        rig.request('PATCH', '/v2/accelerator_requests', 202,
                    json=rig.bind_body([early]))

        def in_flight():
            row = rig.rows()[early_arq]
            return (row['state'] == states.BIND_STARTED
                    and row['attach_handle_id'] is not None
                    and rig.programming_started(agent_log_start))

        rig.wait_until('the agent programs', in_flight, 30,
                       alive=[rig.agent, first])
        status, _ = first.stop(signal.SIGKILL)
        timeline.mark('SIGKILL')
        assert status == SIGKILLED, first.tail()
        for item in later:
            rig.request('PATCH', '/v2/accelerator_requests', 202,
                        json=rig.bind_body([item]))
        timeline.mark('binds 2, 3 sent')
        # The program the dead conductor asked for runs to its end: every
        # program after it is the restarted conductor's.
        assert rig.wait_until_agent_idle(agent_log_start, 0.5) == 1
        rows = rig.rows()
        assert all(r['state'] == states.BIND_STARTED for r in rows.values())
        assert rows[early_arq]['bind_conductor'] == host
        assert rows[early_arq]['bind_deadline'] is not None
        # The API addressed the queued binds to the ring owner, which
        # has not claimed them (no deadline) while it is down.
        assert all(rows[arq]['bind_conductor'] == host
                   and rows[arq]['bind_deadline'] is None
                   for _, arqs in later for arq in arqs), rows
        agent_log_restart = len(rig.agent.log())

        second = rig.add(conductor(deployment, 'conductor-second', host,
                                   glance.url, nova, RESUME_BIND_TIMEOUT))
        second.start()
        second.wait_for_log(r'cyborg-conductor started', timeout=60)
        timeline.mark('restarted')
        rig.wait_until('resolved', lambda: not rig.unresolved(), 120,
                       alive=[rig.agent, second])
        timeline.mark('all resolved')
        assert nova.wait_for_events(INSTANCES, timeout=30), nova.events
        timeline.mark('Nova told')
        programmed = rig.wait_until_agent_idle(agent_log_restart,
                                               QUIET_AFTER)
        timeline.mark('agent idle')
        print('\n%s binds queued while the conductor is down: %s'
              % (deployment.engine_name, timeline.describe()))

        rows = rig.rows()
        assert {u: r['state'] for u, r in rows.items()} == dict.fromkeys(
            owner, states.BOUND), rows
        bound_handles = {r['attach_handle_id'] for r in rows.values()}
        assert None not in bound_handles
        assert len(bound_handles) == INSTANCES
        assert rig.handles_in_use() == bound_handles
        assert not [u for u, r in rows.items() if r['nova_event_pending']]
        rig.check_api(states.BOUND)
        rig.check_nova('completed')
        log = second.log()
        # Only the bind of the dead conductor is its to resume; the
        # queued casts are not, even though it claimed them itself.
        assert re.findall(r'Resuming \d+ binds', log) == [
            'Resuming 1 binds'], log
        assert sorted(re.findall(r'ARQ (\S+) bound to TEST_PCI handle',
                                 log)) == sorted(owner), log
        # The card holds the bitstream after the program the dead
        # conductor asked for: the agent says so to the resumed bind,
        # and none of the binds programs it again.
        assert programmed == 0, rig.agent.tail(40)
        assert 'not programming it again' in rig.agent.log()[
            agent_log_restart:], rig.agent.tail(40)
        no_traceback(second)
        no_traceback(rig.agent)
    finally:
        rig.close()


# -- scenario 4 -------------------------------------------------------------

# Events pending longer than this are sent again by a recovery pass.
EVENT_RETRY_AFTER = 5


@on_engine('postgresql')
def test_conductor_killed_while_telling_nova(
        deployment, glance, nova_events):  # noqa: F811
    """The binds are done (Bound, Nova's events pending in the same
    transaction), and the conductor dies in the middle of its call to
    Nova, which holds the request unanswered. After the restart, recovery
    sends the events still pending once they are older than ``[conductor]
    nova_event_retry_after``: each instance is told once."""
    timeline = Timeline()
    nova = nova_events
    host = 'conductor-%s' % deployment.host
    first = conductor(deployment, 'conductor-first', host, glance.url, nova,
                      RESUME_BIND_TIMEOUT, EVENT_RETRY_AFTER)
    rig = Rig(deployment, glance, nova)
    try:
        rig.start(0.5, [first])
        timeline.mark('services up')
        rig.make_arqs()
        owner = rig.owner
        nova.answer_next(STALL)
        timeline.mark('bind')
        rig.bind_together()
        assert nova.wait_for(lambda s: s.calls, timeout=60), first.tail()
        timeline.mark('Nova holds the call')
        status, _ = first.stop(signal.SIGKILL)
        timeline.mark('SIGKILL')
        assert status == SIGKILLED, first.tail()
        # Killed well before its own recovery would send the events again.
        assert timeline.since('Nova holds the call', 'SIGKILL') < (
            EVENT_RETRY_AFTER - 2), timeline.describe()
        rows = rig.rows()
        assert all(r['state'] == states.BOUND and r['nova_event_pending']
                   for r in rows.values()), rows
        nova.release()
        assert [c.status for c in nova.calls] == [None]
        assert not nova.events

        second = rig.add(conductor(deployment, 'conductor-second', host,
                                   glance.url, nova, RESUME_BIND_TIMEOUT,
                                   EVENT_RETRY_AFTER))
        second.start()
        second.wait_for_log(r'cyborg-conductor started', timeout=60)
        timeline.mark('restarted')
        assert nova.wait_for_events(
            INSTANCES, timeout=EVENT_RETRY_AFTER + 30), (
            'Nova got %s; %s' % (nova.events, second.tail()))
        timeline.mark('Nova told')
        time.sleep(QUIET_AFTER)
        print('\n%s killed while telling Nova (nova_event_retry_after %d '
              's): %s' % (deployment.engine_name, EVENT_RETRY_AFTER,
                          timeline.describe()))
        # Not sent again before they were due (MariaDB keeps updated_at
        # in whole seconds: up to 1 s early).
        assert timeline.since('Nova holds the call', 'Nova told') >= (
            EVENT_RETRY_AFTER - 1.5), timeline.describe()
        resent = re.findall(r'Sending Nova (\d+) events again',
                            second.log())
        assert sum(int(n) for n in resent) == INSTANCES, second.tail()

        rows = rig.rows()
        assert {u: r['state'] for u, r in rows.items()} == dict.fromkeys(
            owner, states.BOUND), rows
        assert not [u for u, r in rows.items() if r['nova_event_pending']]
        bound_handles = {r['attach_handle_id'] for r in rows.values()}
        assert None not in bound_handles and len(bound_handles) == INSTANCES
        assert rig.handles_in_use() == bound_handles
        rig.check_api(states.BOUND)
        rig.check_nova('completed', unanswered=1)
        assert 'Resuming' not in second.log()
        no_traceback(second)
    finally:
        rig.close()



# -- scenario 5 -------------------------------------------------------------

# Longer than a stop waits for the RPC server (cyborg.service.STOP_TIMEOUT,
# 8 s): the bind is still in flight when the conductor starts again.
RELOAD_PROGRAM_SECONDS = 12
# Long enough for one program, as [conductor] agent_timeout must be; not
# for two in a row.
RELOAD_AGENT_TIMEOUT = 20


@on_engine('mysql')
def test_conductor_reloaded_while_it_binds(
        deployment, glance, nova_events):  # noqa: F811
    """SIGHUP (read the configuration again, restart the parts, same
    process) while the conductor waits for a program longer than a stop
    waits. The bind still running in the process and the restarted
    parts' resume must not both bind the ARQ: it ends Bound, the FPGA is
    programmed once for it, and Nova is told once, ``completed``."""
    timeline = Timeline()
    nova = nova_events
    host = 'conductor-%s' % deployment.host
    only = conductor(deployment, 'conductor', host, glance.url, nova,
                     RESUME_BIND_TIMEOUT, agent_timeout=RELOAD_AGENT_TIMEOUT)
    rig = Rig(deployment, glance, nova)
    try:
        rig.start(RELOAD_PROGRAM_SECONDS, [only])
        timeline.mark('services up')
        rig.make_arqs(instances=1)
        ((instance, (arq,)),) = rig.arqs.items()
        agent_log_start = len(rig.agent.log())
        timeline.mark('bind')
        rig.bind_each()
        rig.wait_until('the agent programs',
                       lambda: rig.programming_started(agent_log_start),
                       30, alive=[rig.agent, only])
        log_start = only.log_size()
        only.process.send_signal(signal.SIGHUP)
        timeline.mark('SIGHUP')
        only.wait_for_log(r'cyborg-conductor started', timeout=60,
                          since=log_start)
        timeline.mark('restarted')
        rig.wait_until('resolved', lambda: not rig.unresolved(), 120,
                       alive=[rig.agent, only])
        timeline.mark('resolved')
        assert nova.wait_for_events(1, timeout=30), nova.events
        timeline.mark('Nova told')
        programmed = rig.wait_until_agent_idle(agent_log_start, QUIET_AFTER)
        timeline.mark('agent idle')
        print('\n%s reloaded while it binds: %s; %d programs' % (
            deployment.engine_name, timeline.describe(), programmed))

        row = rig.rows()[arq]
        after_reload = only.log()[log_start:]
        story = ('ARQ %s: %s, the FPGA programmed %d times for it, Nova '
                 'told %s. Conductor log since SIGHUP:\n%s' % (
                     arq, row['state'], programmed,
                     [e.status for e in nova.events], after_reload))
        assert row['state'] == states.BOUND, story
        assert rig.handles_in_use() == {row['attach_handle_id']}, story
        assert not row['nova_event_pending'], story
        rig.check_api(states.BOUND)
        rig.check_nova('completed')
        assert programmed == 1 and 'Resuming' not in after_reload, story
    finally:
        rig.close()
