"""Conductors that die or restart mid-bind, as separate processes.

Real processes over RabbitMQ (the per-test virtual host of
``conftest.py``), on MariaDB and on PostgreSQL: ``cyborg-agent``,
``cyborg-conductor`` processes, the API under gunicorn and Nova's
external-events stand-in (``tests/nova_events.py``).

1. ``test_conductor_killed_after_the_mdev_was_made``: the agent creates
   a vGPU's mdev on a recorded sysfs tree and holds its answer
   (``[agent] test_prepare_answer_delay``); the conductor is SIGKILLed in
   that window and started again. The ARQ ends Bound on the handle whose
   UUID is the mdev's, and no second mdev is made.
2. ``test_ring_owner_takes_over_a_dead_conductors_bind``: two conductors;
   the one binding dies in the same window. The other looks at the ring
   again the moment the dead one's heartbeat is older than ``[DEFAULT]
   service_down_time``, owns the host then and finishes the bind: within
   two heartbeat intervals of the kill (with ``service_down_time`` under
   two intervals, as configured here), long before ``[conductor]
   bind_timeout``.
3. ``test_conductor_restarted_while_placement_is_down``: one conductor,
   restarted while Placement is unreachable for 45 s; binds sent while it
   is down wait in RabbitMQ and end Bound after the restart, Placement
   still down. Every API request meanwhile answers within ``[api]
   conductor_timeout``, measured by the client over the whole request
   (enable and disable with 503 and the Placement sentence).

The recorded sysfs tree plays the kernel: when the agent writes a UUID to
an mdev type's ``create``, the test makes the mdev (its directory and its
``mdev_type`` link) and empties ``create`` again, so that a second
creation would show. Timings are printed (``pytest -s``).
"""

import os
import signal
import time
import uuid

import sqlalchemy as sa

from cyborg import privsep
from cyborg import states
from cyborg.db import models
from tests import privsep_rig
from tests.functional.services import arq_services
from tests.functional.services.conftest import REPORT_INTERVAL
from tests.functional.services.conftest import ServiceProcess
from tests.functional.services.conftest import on_engine
from tests.nova_events import nova_events  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

ARQ = models.ExtendedAcceleratorRequest
Handle = models.AttachHandle
SIGKILLED = -signal.SIGKILL
VGPU_TYPE = 'nvidia-472'
# The A100's three VFs offer vGPUs of that type.
VF_ADDRESSES = ['0000:af:00.4', '0000:af:00.5', '0000:af:00.6']
# Far beyond anything these tests wait for: a bind failed by its
# deadline instead of finished would show as a timeout of the test.
BIND_TIMEOUT = 120
AGENT_TIMEOUT = 15
# How long the agent holds its answer after making the mdev: the window
# in which the conductor is killed.
PREPARE_DELAY = 2


# -- the processes -----------------------------------------------------------


def vgpu_agent(deployment, sysfs_root):
    directory = deployment.directory / 'agent'
    directory.mkdir()
    text = arq_services.common_config(
        deployment, directory / 'cyborg-agent.log',
        deployment.host) + '\n'.join([
        '[agent]',
        'enabled_drivers = nvidia_gpu_driver',
        'report_interval = %d' % REPORT_INTERVAL,
        'report_timeout = 10',
        'retry_interval = 1',
        'test_prepare_answer_delay = %s' % PREPARE_DELAY,
        '[pci]',
        'sysfs_root = %s' % sysfs_root,
        '[gpu_devices]',
        'enabled_vgpu_types = %s' % VGPU_TYPE,
        '[vgpu_%s]' % VGPU_TYPE,
        'device_addresses = %s' % ','.join(VF_ADDRESSES),
        # The mdev writes go through the agent's privsep daemon, started
        # with this agent's configuration (its sysfs root); the test runs
        # as root, so no sudo in between.
        '[%s]' % privsep.CONFIG_SECTION,
        'helper_command = %s --config-file %s' % (
            privsep_rig.privsep_helper(), directory / 'cyborg-agent.conf'),
        '',
    ])
    return ServiceProcess('cyborg-agent', directory, text)


def fake_agent(deployment, placement):
    directory = deployment.directory / 'agent'
    directory.mkdir()
    text = arq_services.common_config(
        deployment, directory / 'cyborg-agent.log', deployment.host,
        placement=placement) + '\n'.join([
        '[agent]',
        'enabled_drivers = fake_driver',
        'report_interval = %d' % REPORT_INTERVAL,
        'report_timeout = 10',
        'retry_interval = 1',
        '',
    ])
    return ServiceProcess('cyborg-agent', directory, text)


def conductor(deployment, directory_name, host, nova=None, default=(),
              placement=None):
    directory = deployment.directory / directory_name
    directory.mkdir()
    text = arq_services.common_config(
        deployment, directory / 'cyborg-conductor.log', host, default,
        placement) + '\n'.join([
        '[conductor]',
        'retry_interval = 1',
        'recovery_interval = 1',
        'bind_timeout = %d' % BIND_TIMEOUT,
        'agent_timeout = %d' % AGENT_TIMEOUT,
        'agent_program_timeout = %d' % (BIND_TIMEOUT - AGENT_TIMEOUT - 1),
        '',
    ]) + (nova.conf_section() if nova is not None else '')
    return ServiceProcess('cyborg-conductor', directory, text)


def api_server(deployment, default=(), placement=None, extra=''):
    api = arq_services.APIServer(deployment, workers=1)
    api.config_file.write_text(arq_services.common_config(
        deployment, api.log_file, 'cyborg-api', default, placement) + extra)
    return api


class Rig(arq_services.ProcessRig):
    """One test's processes, its API session and what the DB holds."""

    def __init__(self, deployment):
        super().__init__(deployment)
        self.started = time.monotonic()

    def now(self):
        return time.monotonic() - self.started

    def start(self, agent, conductors, api):
        self.agent = self.add(agent).start()
        for process in conductors:
            self.add(process).start()
        self.api = api
        api.start()
        for process in conductors:
            process.wait_for_log(r'cyborg-conductor started')

    def make_arqs(self, profile, groups, instances):
        """A profile and one ARQ per instance; {instance: arq uuid}."""
        self.request('POST', '/v2/device_profiles', 201, json=[{
            'name': profile, 'groups': groups}])
        arqs = {}
        for _ in range(instances):
            created = self.request('POST', '/v2/accelerator_requests', 201,
                                   json={'device_profile_name': profile})
            (arq,) = created.json()['arqs']
            arqs[str(uuid.uuid4())] = arq['uuid']
        return arqs

    def bind_body(self, arqs, rp_uuid):
        return {arq: [
            {'op': 'add', 'path': '/hostname',
             'value': self.deployment.host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
            for instance, arq in arqs.items()}

    def deployable_rp(self, resource_class, timeout=60):
        """The resource provider of the host's deployable of
        ``resource_class``, once Placement has it."""
        deployables = models.Deployable.__table__
        query = sa.select(deployables.c.name, deployables.c.rp_uuid).where(
            deployables.c.resource_class == resource_class,
            deployables.c.rp_uuid.isnot(None))

        def published():
            with self.engine.connect() as connection:
                rows = connection.execute(query).all()
            if len(rows) != 1:
                return None
            providers = self.deployment.providers()
            return next((rp for rp, _, _ in providers.values()
                         if rp == rows[0].rp_uuid), None)
        return self.wait_until('a %s provider in Placement' % resource_class,
                               published, timeout)

    def rows(self):
        columns = (ARQ.uuid, ARQ.state, ARQ.attach_handle_id,
                   ARQ.bind_conductor)
        with self.engine.connect() as connection:
            return {row.uuid: row._asdict() for row in connection.execute(
                sa.select(*columns))}

    def handles_in_use(self):
        with self.engine.connect() as connection:
            return {row.id: row.uuid for row in connection.execute(
                sa.select(Handle.id, Handle.uuid).where(
                    Handle.in_use == sa.true()))}

    def wait_until(self, what, predicate, timeout, interval=0.1):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            for process in self.processes:
                if process.process is not None and not process.alive:
                    # Killed by the test: returncode -9.
                    assert process.process.returncode == SIGKILLED or (
                        process.process.returncode == 0), (
                        '%s exited while waiting until %s:\n%s'
                        % (process.name, what, process.tail()))
            assert time.monotonic() < deadline, (
                'not %s within %s s: ARQs %s' % (what, timeout, self.rows()))
            time.sleep(interval)


def no_traceback(process):
    log = process.log()
    assert 'Traceback' not in log, process.tail(80)
    assert 'stopped half way' not in log, process.tail(80)


# -- the vGPU host: the recorded sysfs tree playing the kernel ------------

class VGPUHost:
    """The recorded GPU host of ``tests/unit/drivers/trees``."""

    def __init__(self, directory):
        self.root = str(sysfs.build(str(directory), hosts.HOSTS['gpu'],
                                    pci_ids=hosts.PCI_IDS))
        # The recorded host has mdevs of its own already.
        self.recorded_mdevs = set(self.all_mdevs())

    def type_dir(self, parent):
        return os.path.join(self.root, 'sys/class/mdev_bus', parent,
                            'mdev_supported_types', VGPU_TYPE)

    def create_files(self):
        return [os.path.join(self.type_dir(a), 'create')
                for a in VF_ADDRESSES]

    def make_written_mdevs(self):
        """What the kernel does for each UUID written to a ``create``:
        the mdev appears below its parent device (directory,
        ``mdev_type`` link, ``remove``), linked from the mdev bus, and
        ``create`` reads empty again. Returns {uuid: parent}."""
        made = {}
        for parent in VF_ADDRESSES:
            create = os.path.join(self.type_dir(parent), 'create')
            with open(create) as f:
                written = f.read().strip()
            if not written:
                continue
            mdev = os.path.join(os.path.realpath(os.path.join(
                self.root, 'sys/class/mdev_bus', parent)), written)
            os.makedirs(mdev)
            os.symlink(mdev, os.path.join(self.root, 'sys/bus/mdev/devices',
                                          written))
            os.symlink(os.path.realpath(self.type_dir(parent)),
                       os.path.join(mdev, 'mdev_type'))
            with open(os.path.join(mdev, 'remove'), 'w'):
                pass
            with open(create, 'w'):
                pass
            made[written] = parent
        return made

    def all_mdevs(self):
        path = os.path.join(self.root, 'sys/bus/mdev/devices')
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def mdevs(self):
        """The mdevs made since the tree was recorded."""
        return [m for m in self.all_mdevs() if m not in self.recorded_mdevs]

    def written(self):
        """What the ``create`` files hold now (written since the last
        ``make_written_mdevs``)."""
        found = []
        for create in self.create_files():
            with open(create) as f:
                if f.read().strip():
                    found.append(create)
        return found


def start_vgpu_rig(deployment, nova, hosts_and_dirs, default=()):
    gpu = VGPUHost(deployment.directory / 'gpu')
    assert not gpu.written() and not gpu.mdevs()
    conductors = [conductor(deployment, directory, host, nova, default)
                  for directory, host in hosts_and_dirs]
    rig = Rig(deployment)
    rig.start(vgpu_agent(deployment, gpu.root), conductors,
              api_server(deployment, default))
    rp_uuid = rig.deployable_rp('VGPU')
    (arqs,) = [rig.make_arqs('vgpu', [{'resources:VGPU': '1'}], 1)]
    return rig, gpu, conductors, rp_uuid, arqs


def kill_after_mdev(rig, gpu, arq, rp_uuid, arqs, conductors):
    """Bind; once the agent has made the mdev (and holds its answer),
    SIGKILL the conductor that binds. Returns (the killed one, the mdev
    uuid, the handle id)."""
    rig.request('PATCH', '/v2/accelerator_requests', 202,
                json=rig.bind_body(arqs, rp_uuid))
    rig.wait_until('the agent writes the mdev', gpu.written, 30,
                   interval=0.02)
    made = gpu.make_written_mdevs()
    assert len(made) == 1, made
    (mdev,) = made
    row = rig.rows()[arq]
    (victim,) = [c for c in conductors
                 if c.config_file.read_text().count(
                     'host = %s\n' % row['bind_conductor'])]
    status, _ = victim.stop(signal.SIGKILL)
    assert status == SIGKILLED, victim.tail()
    # Killed between the mdev and Bound: the ARQ holds the handle of
    # the mdev, nothing is recorded as done.
    row = rig.rows()[arq]
    assert row['state'] == states.BIND_STARTED, row
    assert rig.handles_in_use() == {row['attach_handle_id']: mdev}, (
        rig.handles_in_use(), mdev)
    return victim, mdev, row['attach_handle_id']


def check_bound_on(rig, gpu, arqs, arq, mdev, handle_id, nova):
    rig.wait_until('Bound', lambda: rig.rows()[arq]['state'] != (
        states.BIND_STARTED), 30)
    row = rig.rows()[arq]
    assert row['state'] == states.BOUND, row
    assert row['attach_handle_id'] == handle_id, row
    assert rig.handles_in_use() == {handle_id: mdev}
    (instance,) = arqs
    (listed,) = rig.request(
        'GET', '/v2/accelerator_requests?instance=%s&bind_state=resolved'
        % instance, 200).json()['arqs']
    assert listed['state'] == states.BOUND, listed
    assert listed['attach_handle_type'] == 'MDEV', listed
    assert listed['attach_handle_uuid'] == mdev, listed
    # The mdev of the first attempt is the one: none was made again.
    assert gpu.mdevs() == [mdev]
    assert not gpu.written(), 'an mdev was created a second time'
    assert nova.wait_for_events(1, timeout=30), nova.events
    assert [(e.server_uuid, e.tag, e.status) for e in nova.events] == [
        (instance, arq, 'completed')]


# -- 1 -----------------------------------------------------------------------

def test_conductor_killed_after_the_mdev_was_made(
        deployment, nova_events):  # noqa: F811
    host = 'conductor-%s' % deployment.host
    rig, gpu, (first,), rp_uuid, arqs = start_vgpu_rig(
        deployment, nova_events, [('conductor-first', host)])
    try:
        (arq,) = arqs.values()
        _, mdev, handle_id = kill_after_mdev(rig, gpu, arq, rp_uuid, arqs,
                                             [first])
        killed = rig.now()
        second = rig.add(conductor(deployment, 'conductor-second', host,
                                   nova_events))
        second.start()
        second.wait_for_log(r'Resuming 1 binds left unfinished', timeout=60)
        check_bound_on(rig, gpu, arqs, arq, mdev, handle_id, nova_events)
        print('\n%s: killed after the mdev, Bound %.1f s after the kill '
              '(restart included)' % (deployment.engine_name,
                                      rig.now() - killed))
        assert 'ARQ %s bound to MDEV handle %s' % (arq, mdev) in (
            second.log()), second.tail()
        no_traceback(second)
        no_traceback(rig.agent)
    finally:
        rig.close()


# -- 2 -----------------------------------------------------------------------

# Dead after two heartbeats missed at most, in whole seconds (MariaDB):
# a live conductor's heartbeat is never older than 4 s, so 5 s leaves a
# second of slack on a loaded machine.
HEARTBEAT_INTERVAL = 3
SERVICE_DOWN_TIME = 5
HEARTBEATS = ['heartbeat_interval = %d' % HEARTBEAT_INTERVAL,
              'service_down_time = %d' % SERVICE_DOWN_TIME]


def test_ring_owner_takes_over_a_dead_conductors_bind(
        deployment, nova_events):  # noqa: F811
    names = ['conductor-%s-%s' % (letter, deployment.host)
             for letter in 'ab']
    rig, gpu, conductors, rp_uuid, arqs = start_vgpu_rig(
        deployment, nova_events, [(n, n) for n in names], HEARTBEATS)
    try:
        (arq,) = arqs.values()
        # Both in the ring before the bind is routed.
        rig.wait_until('two live conductors', lambda: len(
            live_conductors(rig.engine)) == 2, 2 * HEARTBEAT_INTERVAL + 5)
        victim, mdev, handle_id = kill_after_mdev(
            rig, gpu, arq, rp_uuid, arqs, conductors)
        killed = rig.now()
        (survivor,) = [c for c in conductors if c is not victim]
        rig.wait_until('Bound', lambda: rig.rows()[arq]['state'] != (
            states.BIND_STARTED), BIND_TIMEOUT / 2, interval=0.05)
        resolved = rig.now()
        print('\n%s: takeover finished %.1f s after the kill '
              '(heartbeat_interval %d s, service_down_time %d s, '
              'bind_timeout %d s)'
              % (deployment.engine_name, resolved - killed,
                 HEARTBEAT_INTERVAL, SERVICE_DOWN_TIME, BIND_TIMEOUT))
        check_bound_on(rig, gpu, arqs, arq, mdev, handle_id, nova_events)
        # Not before the victim could be dead (its last heartbeat at
        # most an interval before the kill; MariaDB keeps whole seconds),
        # and within two heartbeat intervals of the kill.
        assert resolved - killed >= (
            SERVICE_DOWN_TIME - HEARTBEAT_INTERVAL - 1)
        assert resolved - killed <= 2 * HEARTBEAT_INTERVAL, (
            resolved - killed)
        assert 'Taking over 1 binds of conductor' in survivor.log(), (
            survivor.tail())
        no_traceback(survivor)
        no_traceback(rig.agent)
    finally:
        rig.close()


def live_conductors(engine):
    services = models.Service.__table__
    with engine.connect() as connection:
        return connection.execute(sa.select(services.c.host).where(
            services.c.binary == 'cyborg-conductor')).scalars().all()


# -- 3 -----------------------------------------------------------------------

OUTAGE = 45
# [api] conductor_timeout: the bound on enable and disable.
CONDUCTOR_TIMEOUT = 4
INSTANCES = 3


class TimedAPI:
    """Every API request the test makes, with how long it took."""

    def __init__(self, rig):
        self.rig = rig
        self.times = []

    def __call__(self, method, path, expected, **kwargs):
        started = time.monotonic()
        answer = self.rig.request(method, path, expected, **kwargs)
        self.times.append((time.monotonic() - started, method, path,
                           answer.status_code))
        return answer

    def status_change(self, device, action):
        answer = self('POST', '/v2/devices/%s/%s' % (device, action), 503)
        assert 'Placement will be updated when it is reachable again' in (
            answer.text), answer.text
        return answer

    def reads(self):
        self('GET', '/v2/devices', 200)
        self('GET', '/v2/deployables', 200)
        self('GET', '/v2/accelerator_requests', 200)

    def slowest(self):
        return max(self.times)


@on_engine('postgresql')
def test_conductor_restarted_while_placement_is_down(deployment):
    gate = deployment.gates['placement']
    placement = 'http://%s' % gate.address
    host = 'conductor-%s' % deployment.host
    first = conductor(deployment, 'conductor-first', host,
                      placement=placement)
    rig = Rig(deployment)
    try:
        rig.start(fake_agent(deployment, placement), [first], api_server(
            deployment, placement=placement,
            extra='[api]\nconductor_timeout = %d\n' % CONDUCTOR_TIMEOUT))
        rp_uuid = rig.deployable_rp('FPGA')
        arqs = rig.make_arqs('fpga', [{'resources:FPGA': '1'}], INSTANCES)
        (device,) = [d['uuid'] for d in rig.request(
            'GET', '/v2/devices?hostname=%s' % deployment.host,
            200).json()['devices']]
        api = TimedAPI(rig)

        gate.close()
        closed = time.monotonic()
        api.reads()
        api.status_change(device, 'disable')
        api.status_change(device, 'enable')
        status, _ = first.stop(signal.SIGTERM)
        assert status == 0, first.tail()
        # Nova binds while no conductor runs: the casts wait in RabbitMQ.
        for instance, arq in arqs.items():
            api('PATCH', '/v2/accelerator_requests', 202,
                json=rig.bind_body({instance: arq}, rp_uuid))
        api.reads()
        api.status_change(device, 'disable')
        api.status_change(device, 'enable')
        assert all(r['state'] == states.BIND_STARTED
                   for r in rig.rows().values())

        second = rig.add(conductor(deployment, 'conductor-second', host,
                                   placement=placement))
        second.start()
        second.wait_for_log(r'cyborg-conductor started', timeout=60)
        restarted = time.monotonic() - closed
        rig.wait_until('bound', lambda: all(
            r['state'] != states.BIND_STARTED
            for r in rig.rows().values()), 60)
        bound = time.monotonic() - closed
        api.reads()
        api.status_change(device, 'disable')
        api.status_change(device, 'enable')
        while time.monotonic() - closed < OUTAGE:
            api.reads()
            time.sleep(1)
        assert not gate.is_open
        gate.open()
        reopened = time.monotonic() - closed

        took, method, path, status_code = api.slowest()
        print('\n%s: Placement down %.1f s; conductor restarted at %.1f s, '
              'binds Bound at %.1f s; %d API requests meanwhile, the '
              'slowest %.2f s (%s %s: %d), bound %d s'
              % (deployment.engine_name, reopened, restarted, bound,
                 len(api.times), took, method, path, status_code,
                 CONDUCTOR_TIMEOUT))
        assert took <= CONDUCTOR_TIMEOUT, api.times
        rows = rig.rows()
        assert {r['state'] for r in rows.values()} == {states.BOUND}, rows
        assert bound < OUTAGE
        handles = {r['attach_handle_id'] for r in rows.values()}
        assert len(handles) == INSTANCES and None not in handles
        assert set(rig.handles_in_use()) == handles

        # Placement back: the device's status reaches it.
        rig.wait_until('enable answers 200', lambda: rig.session.post(
            rig.api.url + '/v2/devices/%s/enable' % device,
            timeout=60).status_code == 200, 30, interval=1)
        no_traceback(second)
        assert 'Traceback' not in rig.api.log(), rig.api.tail(80)
    finally:
        if not gate.is_open:
            gate.open()
        rig.close()
