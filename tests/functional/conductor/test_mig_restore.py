"""MIG instances made on demand put back when the agent starts again.

The stack of ``test_mig_binding``: API, conductor and the agent's
endpoint on oslo.messaging's in-process transport, the agent's NVIDIA
driver on the recorded H100 host's tree, the NVML stand-in with the H100
80GB's MIG behaviour (``lose_instances`` is a host reboot), the agent's
privileged calls in the test process, a real Placement. An agent that
starts again is a new ``AgentManager`` and driver serving the host, and
runs what the agent runs at start: its first inventory report.

The subject is not SQL: one engine (the compare-and-set of an ARQ's new
details runs on each in ``test_mig_restore_records``).
"""

import contextlib

import pytest

from cyborg import rpc
from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import mig_nvml as mig_ops
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import rpcapi as conductor_rpcapi
from tests import arq_stack
from tests.conftest import database_url_on
from tests.functional.conductor import mig_host
from tests.functional.conductor.mig_host import H100
from tests.functional.conductor.mig_host import HOST
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401

database_url = database_url_on('sqlite')

SLICES = {'1g.10gb': (1, 1), '3g.40gb': (3, 4), '2g.20gb': (2, 2)}


class Rig(mig_host.Tenant):
    """The stack, and the agent of ``HOST`` as it runs now."""

    def __init__(self, conf, api, library, transport, root, rp):
        super().__init__(api, library, rp)
        self.conf = conf
        self.transport = transport
        self.root = root
        self.agent = None
        self.driver = None
        self._server = None

    def start_agent(self):
        """A new agent process on the host: its own driver and
        endpoint; the one before stops serving."""
        self.stop_agent()
        self.driver = nvidia.NvidiaGPUDriver(
            self.conf, pci.PCIReader(str(self.root)))
        self.agent = agent_manager.AgentManager(
            self.conf, [self.driver],
            conductor_rpcapi.ConductorAPI(
                self.transport, timeout=10,
                version_cap=self.conf.upgrade_levels.conductor),
            candidates=[(HOST, 'the configured host')], glance=None)
        self._server = rpc.get_server(self.transport, rpc.AGENT_TOPIC, HOST,
                                      [self.agent])
        self._server.start()

    def stop_agent(self):
        if self._server is not None:
            self._server.stop()
            self._server.wait()
            self._server = None

    def restart_agent(self):
        """The agent started again, up to its first report."""
        self.start_agent()
        assert self.agent.mig_restore.pending
        return self.agent.report_inventory()


@pytest.fixture
def rig(conf, db, tmp_path, monkeypatch, admin_context, privileged_on,
        mig_nvml, placement):  # noqa: F811
    with contextlib.ExitStack() as stack:
        host = stack.enter_context(mig_host.mig_host(
            conf, db, tmp_path, monkeypatch, admin_context, privileged_on,
            mig_nvml, placement, SLICES))
        transport = stack.enter_context(arq_stack.fake_transport(conf))
        stack.enter_context(arq_stack.serving_conductor(
            transport, db, arq_stack.binder(
                conf, agent_rpcapi.AgentAPI(transport, timeout=10),
                sync=host.sync), placement_client=host.client))
        api = arq_stack.webtest_app(conf, db, transport)
        rig = Rig(conf, api, host.library, transport, host.root, host.rp)
        rig.start_agent()
        stack.callback(rig.stop_agent)
        yield rig


def details(arq):
    info = arq['attach_handle_info']
    return info['mig_uuid'], (info['mig_profile'], int(info['start']))


def test_a_reboot_gets_the_instances_of_binds_back_and_no_other(rig):
    big = rig.bind('3g.40gb')
    small = rig.bind('1g.10gb')
    assert [big['state'], small['state']] == ['Bound', 'Bound']
    old = {a['uuid']: details(a) for a in (big, small)}
    assert rig.held() == dict(old.values())

    rig.library.lose_instances(H100)  # the host rebooted
    assert rig.held() == {}
    # An instance no ARQ owns, at a start no bind recorded.
    taken = {start for _, (_, start) in old.values()}
    orphan = mig_ops.MIGCard(H100).create(
        '1g.10gb', next(s for s in range(4) if s not in taken))

    assert rig.restart_agent() is not None, 'the first report failed'

    now = {a['uuid']: details(rig.get(a)) for a in (big, small)}
    for arq_uuid, (mig_uuid, placed) in now.items():
        was_uuid, was_placed = old[arq_uuid]
        assert placed == was_placed  # at the recorded profile and start
        assert mig_uuid != was_uuid  # a new MIG device
    # Exactly the binds' instances, as their ARQs now name them.
    assert rig.held() == dict(now.values())
    assert orphan.mig_uuid not in rig.held()
    assert not rig.agent.mig_restore.pending

    # The unbind destroys the instance made again, by its new identity.
    freed = rig.unbind(big)

    assert freed['state'] == 'Unbound'
    assert rig.held() == {now[small['uuid']][0]: now[small['uuid']][1]}


def test_an_agent_restart_without_a_reboot_keeps_the_instances(rig):
    arqs = [rig.bind('3g.40gb'), rig.bind('1g.10gb')]
    before = rig.library.instances(H100)

    assert rig.restart_agent() is not None

    # The same GPU and compute instances, MIG UUIDs and ARQ details.
    assert rig.library.instances(H100) == before
    assert [details(rig.get(a)) for a in arqs] == [details(a) for a in arqs]
    assert not rig.agent.mig_restore.pending


def test_a_start_taken_by_an_instance_in_use_marks_the_gpu_unhealthy(rig):
    small = rig.bind('1g.10gb')
    mig_uuid, (_, start) = details(small)
    rig.library.lose_instances(H100)
    # Made outside Cyborg at the bind's start, and running a process:
    # it cannot be destroyed, so the bind's instance cannot be made.
    squatter = mig_ops.MIGCard(H100).create('1g.10gb', start)
    rig.library.run_process(H100, squatter.gi_id, squatter.ci_id, 4242)

    rig.restart_agent()

    assert rig.held() == {squatter.mig_uuid: ('1g.10gb', start)}
    assert details(rig.get(small))[0] == mig_uuid  # nothing else to keep
    [gpu] = [d for d in rig.agent.last_inventory.devices
             if d.controlpath_info['bus'] == H100.split(':')[1]]
    [seen] = rig.driver.observe([gpu])
    assert seen.state == health.UNHEALTHY
    assert 'could not be made again at start %d' % start in seen.reason

    # Its release destroys nothing (the squatter's GI may have its old
    # id) and the GPU is healthy again.
    assert rig.unbind(small)['state'] == 'Unbound'
    assert rig.held() == {squatter.mig_uuid: ('1g.10gb', start)}
    [seen] = rig.driver.observe([gpu])
    assert seen.state != health.UNHEALTHY


def test_while_the_conductor_does_not_answer_the_restore_waits(rig):
    small = rig.bind('1g.10gb')
    rig.library.lose_instances(H100)
    rig.conf.set_override('report_timeout', 1, group='agent')
    rig.start_agent()
    # The owner the last answer named is dead: nothing answers there.
    rig.agent.owner = 'conductor-2'

    rig.agent.report_inventory()

    assert rig.held() == {}
    assert rig.agent.mig_restore.pending

    # That report went to any conductor instead; the next one restores.
    assert rig.agent.owner is None
    rig.agent.report_inventory()

    assert not rig.agent.mig_restore.pending
    [(profile, start)] = rig.held().values()
    assert (profile, start) == details(small)[1]
    assert rig.held() == dict([details(rig.get(small))])


def test_under_a_conductor_pin_below_1_5_nothing_is_restored(rig, caplog):
    rig.bind('1g.10gb')
    rig.library.lose_instances(H100)
    orphan = mig_ops.MIGCard(H100).create('7g.80gb', 0)
    rig.conf.set_override('conductor', '1.4', group='upgrade_levels')

    assert rig.restart_agent() is not None  # the report itself goes

    # The agent cannot know what its binds own: it touches nothing.
    assert rig.held() == {orphan.mig_uuid: ('7g.80gb', 0)}
    assert not rig.agent.mig_restore.pending
    assert ('mig_instances_of_host needs conductor RPC API 1.5, but '
            '[upgrade_levels] conductor = 1.4 pins it lower') in caplog.text
