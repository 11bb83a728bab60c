"""The agent's heartbeat: the health and usage of the devices of its last
discovery, cast to its host's owner (any conductor when none is known),
whatever a driver's observation does."""

import logging

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import health
from cyborg.agent import manager as agent_manager
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import agent_conf

ADDRESS = str(fake.ADDRESS)


class Casts:
    """The conductor's side: each heartbeat cast, as sent; a report
    answers with an owner."""

    def __init__(self, refuse_servers=()):
        self.heartbeats = []
        self.refuse_servers = refuse_servers

    def agent_heartbeat(self, context, host, version, rpc_version,
                        server=None, **extra):
        if server in self.refuse_servers:
            raise messaging.MessageDeliveryFailure('no route to %s' % server)
        self.heartbeats.append(dict(extra, host=host, server=server))

    def report_host_inventory(self, context, inventory, compute_node_names,
                              server=None, timeout=None):
        return {'changed': False, 'owner': 'conductor-2'}


class BrokenObserver(fake.FakeDriver):
    """A second card whose driver's observation always fails."""

    name = 'broken_driver'

    def discover(self):
        [device] = super().discover()
        device.controlpath_info = dict(device.controlpath_info, bus='0d')
        device.deployables[0].name = 'Broken'
        return [device]

    def observe(self, devices):
        raise OSError('the vendor library crashed')


def agent(conductor, drivers=None):
    conf = agent_conf()
    return agent_manager.AgentManager(
        conf, drivers or [fake.FakeDriver(conf, None)], conductor,
        candidates=[(HOST, 'the configured host')], glance=None)


def test_before_any_discovery_the_heartbeat_says_alive_only():
    conductor = Casts()
    assert agent(conductor).heartbeat()
    [sent] = conductor.heartbeats
    assert (sent['host'], sent['server'], sent['health'], sent['usage']) == (
        HOST, None, {}, {})


def test_heartbeat_carries_health_and_usage_to_the_owner():
    conductor = Casts()
    manager = agent(conductor)
    manager.report_inventory()
    assert manager.owner == 'conductor-2'
    assert [d.key for d in manager.last_inventory.devices] == [
        d.key for d in fake.FakeDriver(None, None).discover()]

    manager.heartbeat()

    [sent] = conductor.heartbeats
    observation = manager.last_observations[ADDRESS]
    assert isinstance(observation, health.Observation)
    assert sent['server'] == 'conductor-2'
    assert sent['health'] == {ADDRESS: {
        'state': 'healthy', 'reason': 'a fake device is always healthy'}}
    assert sent['usage'] == {ADDRESS: {
        'observed_at': observation.observed_at}}
    assert sent['sent_at'] >= observation.observed_at


def test_a_failed_observation_does_not_stop_the_heartbeat(caplog):
    conductor = Casts()
    conf = agent_conf()
    manager = agent(conductor, [BrokenObserver(conf, None),
                                fake.FakeDriver(conf, None)])
    manager.report_inventory()
    with caplog.at_level(logging.ERROR):
        assert manager.heartbeat()
    [sent] = conductor.heartbeats
    assert list(sent['health']) == [ADDRESS]
    assert list(manager.last_observations) == [ADDRESS]
    assert len(manager.last_inventory.devices) == 2
    assert ('Driver broken_driver failed to observe its devices'
            in caplog.text)


def test_heartbeat_goes_to_any_conductor_when_the_owners_fails():
    conductor = Casts(refuse_servers=('conductor-2',))
    manager = agent(conductor)
    manager.report_inventory()
    assert manager.heartbeat()
    assert [h['server'] for h in conductor.heartbeats] == [None]


def test_heartbeat_interval_must_be_below_service_down_time():
    conf = agent_conf({('agent', 'heartbeat_interval'): 30})
    conf.set_override('service_down_time', 30)
    with pytest.raises(agent_manager.TimeoutsDoNotFit) as caught:
        agent_manager.check_timeouts(conf)
    assert str(caught.value) == (
        '[agent] heartbeat_interval (30 s) must be shorter than [DEFAULT] '
        'service_down_time (30 s), after which an agent without a '
        'heartbeat counts as dead.')
    conf.set_override('heartbeat_interval', 5, group='agent')
    agent_manager.check_timeouts(conf)
