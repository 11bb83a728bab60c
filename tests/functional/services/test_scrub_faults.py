"""Scrubs between tenants, with faults: nothing of one tenant reaches the
next.

Real processes over RabbitMQ, on PostgreSQL: a ``cyborg-agent`` whose
fake FPGA's sixteen handles are scrubbed between tenants (``[fake_driver]
scrub = pass``, every ``FAIL_EVERY``-th scrub failing its verification,
every ``HANG_EVERY``-th outlasting the conductor's timeout), one
``cyborg-conductor``, the API under gunicorn, Nova's external-events
stand-in. Each handle's memory is a file (``[fake_driver] memory_dir``)
that its tenant writes a secret into while it holds it, and that a
passing scrub empties.

``TENANTS`` threads play instances: create an ARQ, bind it, read the
handle's memory (it must be empty: anything there is a former tenant's
secret), write a secret of their own, release the handle (unbind, or
delete), again, until ``CYCLES`` binds were held in all. Meanwhile the
test kills:

- the agent (SIGKILL) while a scrub runs on it, and starts it again;
- the conductor right after a release, before it scrubs: the release is
  one transaction of the API that made the handle dirty;
- the conductor while a scrub it asked for runs; restarted, it takes its
  own scrub over at once.

Then, with the faults over: 0 binds found a former tenant's secret, 0
binds got a handle whose last scrub had not passed, and every handle is
free again (none stuck dirty or scrubbing). The counts are printed
(``pytest -s``).
"""

import collections
from concurrent import futures
import json
import pathlib
import threading
import time
import uuid

import sqlalchemy as sa

from cyborg import states
from cyborg.accelerator.drivers import fake
from cyborg.conductor import scrubber
from cyborg.db import models
from cyborg.db.api import scrubs
from cyborg.objects import inventory
from tests.functional.services import arq_services
from tests.functional.services.conftest import REPORT_INTERVAL
from tests.functional.services.conftest import ServiceProcess
from tests.functional.services.conftest import on_engine
from tests.nova_events import nova_events  # noqa: F401

ARQ = models.ExtendedAcceleratorRequest
Handle = models.AttachHandle

CYCLES = 200
TENANTS = 4
PROFILE = 'scrubbed-fpga'
SCRUB_SECONDS = 0.1
FAIL_EVERY = 17
HANG_EVERY = 23
# The conductor waits this long for a scrub; a hung one takes longer.
SCRUB_TIMEOUT = 2
HANG_SECONDS = SCRUB_TIMEOUT + 1.5
RETRY_INTERVAL = 2
# When the kills happen: after this many held binds.
KILL_AGENT_AT = 40
KILL_CONDUCTOR_AFTER_RELEASE_AT = 90
KILL_CONDUCTOR_WHILE_SCRUBBING_AT = 140
# A loaded 2-core machine: one bind, or the end of the faults' effects.
SETTLE = 90


def agent_process(deployment, memory_dir):
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
        'scrub = pass\n'
        'scrub_seconds = %s\n'
        'memory_dir = %s\n'
        'scrub_fail_every = %d\n'
        'scrub_hang_every = %d\n'
        'scrub_hang_seconds = %s\n' % (
            REPORT_INTERVAL, SCRUB_SECONDS, memory_dir, FAIL_EVERY,
            HANG_EVERY, HANG_SECONDS))
    return ServiceProcess('cyborg-agent', directory, config)


def conductor_process(deployment, nova):
    directory = deployment.directory / 'conductor'
    directory.mkdir()
    config = arq_services.common_config(
        deployment, directory / 'cyborg-conductor.log',
        'conductor-%s' % deployment.host) + (
        '[conductor]\n'
        'retry_interval = 1\n'
        'recovery_interval = 1\n'
        '[scrub]\n'
        'interval = 1\n'
        'timeouts = fake:%d\n'
        'retry_interval = %d\n' % (SCRUB_TIMEOUT, RETRY_INTERVAL)
    ) + nova.conf_section()
    return ServiceProcess('cyborg-conductor', directory, config)


class Tenants(arq_services.ProcessRig):
    """The processes, and the tenants' threads with what they saw."""

    def __init__(self, deployment, nova, memory_dir):
        super().__init__(deployment)
        self.nova = nova
        self.memory_dir = memory_dir
        self.rp_uuid = None
        self.lock = threading.Lock()
        self.held = 0  # binds held and released
        self.counts = collections.Counter()
        self.leaks = []  # (handle, what a bind found in its memory)
        self.unverified = []  # (handle, its last scrub) at a bind
        self.stop = threading.Event()

    # -- the processes ----------------------------------------------------

    def start(self):
        self.conductor = self.add(conductor_process(self.deployment,
                                                    self.nova)).start()
        self.api = arq_services.APIServer(self.deployment, workers=1)
        self.api.start()
        self.conductor.wait_for_log(r'cyborg-conductor started', timeout=60)
        self.agent = self.add(agent_process(self.deployment,
                                            self.memory_dir)).start()
        providers = self.deployment.wait_until_converged(
            {fake.DEPLOYABLE_NAME}, timeout=60)
        self.rp_uuid = providers['%s_%s' % (self.deployment.host,
                                            fake.DEPLOYABLE_NAME)][0]
        self.request('POST', '/v2/device_profiles', 201, json=[{
            'name': PROFILE, 'groups': [{'resources:FPGA': '1'}]}])

    def restart(self, process, pattern):
        size = process.log_size()
        process.start()
        process.wait_for_log(pattern, timeout=60, since=size)

    # -- what the database holds ---------------------------------------------

    def handle_states(self):
        return arq_services.count_by(self.engine, Handle.state)

    def scrubbing(self):
        """{handle uuid: scrub start} of the handles being scrubbed."""
        with self.engine.connect() as connection:
            return dict(connection.execute(
                sa.select(Handle.uuid, Handle.scrub_started_at).where(
                    Handle.state == scrubs.SCRUBBING)).all())

    def last_scrub(self, handle_uuid):
        with self.engine.connect() as connection:
            return connection.execute(
                sa.select(Handle.last_scrub_result, Handle.last_scrub_step)
                .where(Handle.uuid == handle_uuid)).one()

    # -- a tenant -------------------------------------------------------------

    def arq_state(self, arq_uuid):
        answer = self.request('GET', '/v2/accelerator_requests/%s'
                              % arq_uuid, 200)
        return answer.json()

    def wait_for_bind(self, arq_uuid):
        deadline = time.monotonic() + SETTLE
        while True:
            arq = self.arq_state(arq_uuid)
            if arq['state'] in (states.BOUND, states.BIND_FAILED):
                return arq
            assert time.monotonic() < deadline, (
                'ARQ %s still %s %d s after its bind'
                % (arq_uuid, arq['state'], SETTLE))
            time.sleep(0.05)

    def cycle(self, number):
        """One instance's bind, use and release; True if it held a
        handle."""
        created = self.request('POST', '/v2/accelerator_requests', 201,
                               json={'device_profile_name': PROFILE})
        [arq_uuid] = [arq['uuid'] for arq in created.json()['arqs']]
        instance = str(uuid.uuid4())
        self.request('PATCH', '/v2/accelerator_requests', 202, json={
            arq_uuid: [
                {'op': 'add', 'path': '/hostname',
                 'value': self.deployment.host},
                {'op': 'add', 'path': '/device_rp_uuid',
                 'value': self.rp_uuid},
                {'op': 'add', 'path': '/instance_uuid', 'value': instance}]})
        arq = self.wait_for_bind(arq_uuid)
        if arq['state'] == states.BIND_FAILED:
            # Every handle dirty, or the conductor away: as Nova would,
            # give up this ARQ.
            self.request('DELETE', '/v2/accelerator_requests?arqs=%s'
                         % arq_uuid, 204)
            with self.lock:
                self.counts['bind failed'] += 1
            time.sleep(0.5)
            return False
        handle = arq['attach_handle_uuid']
        last = self.last_scrub(handle)
        memory = pathlib.Path(self.memory_dir) / str(
            inventory.PCIAddress(**arq['attach_handle_info']))
        found = memory.read_text() if memory.exists() else ''
        secret = 'secret of instance %s, bind %d\n' % (instance, number)
        memory.write_text(secret)
        with self.lock:
            if found:
                self.leaks.append((handle, found.strip()))
            if last.last_scrub_result not in (None, scrubs.PASSED):
                self.unverified.append((handle, tuple(last)))
        if number % 2:
            self.request('PATCH', '/v2/accelerator_requests', 202, json={
                arq_uuid: [{'op': 'remove', 'path': path} for path in (
                    '/hostname', '/device_rp_uuid', '/instance_uuid')]})
            self.request('DELETE', '/v2/accelerator_requests?arqs=%s'
                         % arq_uuid, 204)
            kind = 'unbound, then deleted'
        else:
            self.request('DELETE', '/v2/accelerator_requests?instance=%s'
                         % instance, 204)
            kind = 'deleted bound'
        with self.lock:
            self.counts[kind] += 1
            self.held += 1
        return True

    def tenant(self, index):
        number = index
        while not self.stop.is_set():
            with self.lock:
                if self.held >= CYCLES:
                    return
            self.cycle(number)
            number += TENANTS

    # -- the faults ---------------------------------------------------------

    def wait_for_held(self, count, workers):
        while self.held < count:
            for worker in workers:
                if worker.done():
                    worker.result()  # raises what stopped it
            time.sleep(0.02)

    def kill_agent_while_scrubbing(self):
        deadline = time.monotonic() + SETTLE
        while not self.scrubbing():
            assert time.monotonic() < deadline, 'no scrub to interrupt'
            time.sleep(0.01)
        self.agent.kill()
        self.counts['agent killed while scrubbing'] += 1
        self.restart(self.agent, r'cyborg-agent started|Reported')

    def kill_conductor_after_release(self):
        deadline = time.monotonic() + SETTLE
        while not self.handle_states().get(scrubs.DIRTY):
            assert time.monotonic() < deadline, 'no release to follow'
            time.sleep(0.005)
        self.conductor.kill()
        self.counts['conductor killed after a release'] += 1
        # Released meanwhile: dirty, waiting for a conductor.
        time.sleep(1)
        assert self.handle_states().get(scrubs.DIRTY), self.handle_states()
        self.restart(self.conductor, r'cyborg-conductor started')

    def kill_conductor_while_scrubbing(self):
        deadline = time.monotonic() + SETTLE
        while True:
            taken = self.scrubbing()
            if taken:
                break
            assert time.monotonic() < deadline, 'no scrub to interrupt'
            time.sleep(0.005)
        self.conductor.kill()
        self.counts['conductor killed while scrubbing'] += 1
        self.restart(self.conductor, r'cyborg-conductor started')
        # Its successor takes over the scrubs it left at once, not once
        # their time and the grace are up.
        restarted = time.monotonic()
        while any(self.scrubbing().get(handle) == start
                  for handle, start in taken.items()):
            assert time.monotonic() - restarted < scrubber.TAKEOVER_GRACE, (
                'the restarted conductor left its scrubs %s' % taken)
            time.sleep(0.05)
        return time.monotonic() - restarted

    def wait_until_all_free(self):
        """Seconds until every handle is free, once the tenants stopped."""
        started = time.monotonic()
        deadline = started + SETTLE
        while True:
            found = self.handle_states()
            if found == {scrubs.FREE: fake.HANDLES}:
                return time.monotonic() - started
            assert time.monotonic() < deadline, (
                'handles not free %d s after the faults ended: %s'
                % (SETTLE, found))
            time.sleep(0.2)


@on_engine('postgresql')
def test_no_tenant_reads_another_through_faults(
        deployment, nova_events, tmp_path):  # noqa: F811
    memory_dir = tmp_path / 'fpga-memory'
    memory_dir.mkdir()
    rig = Tenants(deployment, nova_events, memory_dir)
    try:
        rig.start()
        started = time.monotonic()
        with futures.ThreadPoolExecutor(TENANTS) as pool:
            workers = [pool.submit(rig.tenant, i) for i in range(TENANTS)]
            try:
                rig.wait_for_held(KILL_AGENT_AT, workers)
                rig.kill_agent_while_scrubbing()
                rig.wait_for_held(KILL_CONDUCTOR_AFTER_RELEASE_AT, workers)
                rig.kill_conductor_after_release()
                rig.wait_for_held(KILL_CONDUCTOR_WHILE_SCRUBBING_AT, workers)
                takeover = rig.kill_conductor_while_scrubbing()
                rig.wait_for_held(CYCLES, workers)
            finally:
                rig.stop.set()
            for worker in workers:
                worker.result()
        cycling = time.monotonic() - started
        settled = rig.wait_until_all_free()
        stuck = fake.HANDLES - rig.handle_states().get(scrubs.FREE, 0)
        with rig.engine.connect() as connection:
            results = collections.Counter(connection.execute(
                sa.select(Handle.last_scrub_result, Handle.last_scrub_step)
            ).all())
            arqs_left = connection.execute(
                sa.select(sa.func.count()).select_from(ARQ)).scalar()
        failures = [line for line in rig.conductor.log().splitlines()
                    if 'the handle stays dirty' in line]
        timed_out = sum('scrub failed at timeout' in f for f in failures)
        verify_failed = sum('scrub failed at verify' in f for f in failures)
        summary = {
            'binds held': rig.held,
            'binds that found a former tenant\'s data': len(rig.leaks),
            'binds of a handle not verified clean': len(rig.unverified),
            'handles stuck dirty after the faults': stuck,
            'failed scrubs (quarantines)': len(failures),
            'of them timed out': timed_out,
            'of them failed verification': verify_failed,
            'seconds of cycles': round(cycling, 1),
            'seconds until all handles free': round(settled, 1),
            'seconds until a restarted conductor took its scrub over':
                round(takeover, 1),
            **rig.counts}
        print('\n' + json.dumps(summary, indent=1))
        assert rig.held >= CYCLES
        assert not rig.leaks, rig.leaks[:5]
        assert not rig.unverified, rig.unverified[:5]
        assert arqs_left == 0 and stuck == 0
        # The faults happened: scrubs failed their verification, hung
        # past the timeout, and the killed ones' handles were scrubbed
        # again (their last scrubs all passed now).
        assert verify_failed >= 1 and timed_out >= 1, summary
        assert set(results) == {(scrubs.PASSED, None)}, results
    finally:
        rig.close()
