"""The agent service on the in-process transport: a program reported at
once through the service's periodic report, not an interval later; the
heartbeat at the agent's own interval, with the devices' health."""

import contextlib
import queue

import oslo_messaging as messaging

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.accelerator.drivers import fake
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import rpcapi as conductor_rpcapi
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import StandInGlance
from tests.unit.agent.conftest import agent_conf

IMAGE_ID = '9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a'
FUNCTION_TRAIT = 'CUSTOM_FPGA_FUNCTION_ID_00112233445566778899AABBCCDDEEFF'


class ConductorStandIn:
    """The conductor's report endpoint: each snapshot, in a queue."""

    target = messaging.Target(version=conductor_rpcapi.VERSION)

    def __init__(self):
        self.snapshots = queue.Queue()
        self.heartbeats = queue.Queue()

    def report_host_inventory(self, context, inventory, compute_node_names):
        self.snapshots.put(inventory)
        return {'changed': True}

    def agent_heartbeat(self, context, host, **kwargs):
        self.heartbeats.put(kwargs)


def traits_of(snapshot):
    return snapshot['devices'][0]['deployables'][0]['traits']


@contextlib.contextmanager
def served_agent(conf):
    """(agent service, conductor stand-in) on one in-process transport."""
    transport = rpc.get_transport(conf)
    conductor = ConductorStandIn()
    conductor_server = rpc.get_server(transport, rpc.CONDUCTOR_TOPIC,
                                      'conductor-1', [conductor])
    conductor_server.start()
    agent = agent_manager.AgentService(
        conf, transport=transport,
        glance=StandInGlance({IMAGE_ID: b'bitstream'}))
    try:
        agent.start()
        yield agent, conductor, transport
    finally:
        agent.stop()
        conductor_server.stop()
        conductor_server.wait()
        transport.cleanup()


def test_program_is_reported_by_the_periodic_report_at_once():
    conf = agent_conf({('agent', 'enabled_drivers'): ['fake_driver'],
                       ('agent', 'report_interval'): 3600,
                       ('agent', 'report_timeout'): 10})
    with served_agent(conf) as (agent, conductor, transport):
        assert agent.manager.request_report == agent.report_task.run_now
        first = conductor.snapshots.get(timeout=10)
        assert traits_of(first) == [fake.TRAIT]
        agent_rpcapi.AgentAPI(transport, timeout=10).program(
            cyborg_context.admin_context(None), HOST, 'fake_driver',
            fake.ADDRESS.as_info(),
            {'image_id': IMAGE_ID, 'properties': {
                'function_uuid': '00112233-4455-6677-8899-aabbccddeeff'}})
        # Not an hour later: the next periodic run, right away.
        second = conductor.snapshots.get(timeout=10)
        assert traits_of(second) == [fake.TRAIT, FUNCTION_TRAIT]


def test_heartbeats_follow_the_agents_own_interval():
    conf = agent_conf({('agent', 'enabled_drivers'): ['fake_driver'],
                       ('agent', 'report_interval'): 3600,
                       ('agent', 'heartbeat_interval'): 1})
    # The conductors' interval is not the agent's.
    conf.set_override('heartbeat_interval', 3600)
    with served_agent(conf) as (agent, conductor, transport):
        conductor.snapshots.get(timeout=10)
        # Heartbeats keep coming, the later ones with the discovered
        # device's health.
        while True:
            beat = conductor.heartbeats.get(timeout=10)
            if beat['health']:
                break
        assert beat['health'] == {str(fake.ADDRESS): {
            'state': 'healthy', 'reason': 'a fake device is always healthy'}}
