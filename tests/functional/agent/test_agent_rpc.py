"""The agent's RPC API over the real RabbitMQ, on a virtual host of the
test's own: what the conductor gets back, answers and errors, once they
have crossed the wire as JSON."""

import uuid

import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import pci
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from tests.functional.services.conftest import vhost_url  # noqa: F401
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import ReportedInventories
from tests.unit.agent.conftest import StandInGlance
from tests.unit.agent.conftest import agent_conf

IMAGE_ID = 'e1d2c3b4-a5f6-4e7d-8c9b-0a1b2c3d4e5f'
FUNCTION_UUID = '5a4c3e2f-1b0d-4f9e-8a7b-6c5d4e3f2a1b'


class RefusingDriver(fake.FakeDriver):
    """The fake FPGA, whose programming always fails."""

    def program(self, device, bitstream, metadata=None):
        raise base.DriverError('fpgaconf exited with status 4: No '
                               'suitable slots found.')


@pytest.fixture
def agent_api(vhost_url):  # noqa: F811
    """An agent serving on the virtual host, and a client of it on a
    transport of its own, as a conductor has."""
    conf = agent_conf({('fake_driver', 'program_seconds'): 0.2})
    conf.set_override('transport_url', vhost_url)
    drivers = [fake.FakeDriver(conf, pci.PCIReader('/'))]
    manager = agent_manager.AgentManager(
        conf, drivers, ReportedInventories(),
        candidates=[(HOST, 'the configured host')],
        glance=StandInGlance({IMAGE_ID: b'bitstream'}))
    server_transport = rpc.get_transport(conf)
    server = rpc.get_server(server_transport, rpc.AGENT_TOPIC, HOST,
                            [manager])
    server.start()
    client_transport = rpc.get_transport(conf)
    try:
        yield agent_rpcapi.AgentAPI(client_transport, timeout=20), manager
    finally:
        server.stop()
        server.wait()
        client_transport.cleanup()
        server_transport.cleanup()


def test_answers_and_errors_cross_rabbitmq(agent_api):
    api, manager = agent_api
    context = cyborg_context.admin_context(None)
    assert api.ping(context, HOST) == {'host': HOST,
                                       'version': agent_rpcapi.VERSION,
                                       'drivers': ['fake_driver']}
    handle = fake.FakeDriver(None, None).discover()[0].deployables[
        0].attach_handles[0]
    payload = {'uuid': str(uuid.uuid4()), 'attach_type': handle.attach_type,
               'attach_info': handle.attach_info}
    assert api.prepare_attach_handle(context, HOST, 'fake_driver', payload,
                                     'arq-1') is None
    summary = api.program(context, HOST, 'fake_driver',
                          fake.ADDRESS.as_info(),
                          {'image_id': IMAGE_ID,
                           'properties': {'function_uuid': FUNCTION_UUID}})
    assert summary['device'] == str(fake.ADDRESS)
    assert summary['function_uuid'] == FUNCTION_UUID
    assert summary['seconds'] >= 0.2
    snapshot = manager.conductor.next(timeout=20)
    assert ('CUSTOM_FPGA_FUNCTION_ID_5A4C3E2F1B0D4F9E8A7B6C5D4E3F2A1B'
            in snapshot['devices'][0]['deployables'][0]['traits'])

    # Errors arrive as themselves, with the agent's message alone.
    with pytest.raises(agent_rpcapi.DriverNotEnabled) as caught:
        api.release_attach_handle(context, HOST, 'nvidia_gpu_driver',
                                  payload, 'arq-1')
    assert caught.value.message == ('Driver nvidia_gpu_driver is not '
                                    'enabled on host %s (enabled: '
                                    'fake_driver)' % HOST)
    with pytest.raises(agent_rpcapi.NotOnThisHost) as caught:
        api.program(context, HOST, 'fake_driver',
                    dict(fake.ADDRESS.as_info(), bus='0d'),
                    {'image_id': IMAGE_ID, 'properties': {}})
    assert caught.value.status == 404
    with pytest.raises(agent_rpcapi.BitstreamUnavailable) as caught:
        api.program(context, HOST, 'fake_driver', fake.ADDRESS.as_info(),
                    {'image_id': 'missing', 'properties': {}})
    assert 'Glance has no image missing' in caught.value.message


def test_driver_errors_cross_rabbitmq(vhost_url):  # noqa: F811
    conf = agent_conf()
    conf.set_override('transport_url', vhost_url)
    manager = agent_manager.AgentManager(
        conf, [RefusingDriver(conf, None)], ReportedInventories(),
        candidates=[(HOST, 'the configured host')],
        glance=StandInGlance({IMAGE_ID: b'bitstream'}))
    transport = rpc.get_transport(conf)
    server = rpc.get_server(transport, rpc.AGENT_TOPIC, HOST, [manager])
    server.start()
    try:
        api = agent_rpcapi.AgentAPI(transport, timeout=20)
        context = cyborg_context.admin_context(None)
        with pytest.raises(base.DriverError) as caught:
            api.program(context, HOST, 'fake_driver', fake.ADDRESS.as_info(),
                        {'image_id': IMAGE_ID, 'properties': {}})
        assert caught.value.message == ('fpgaconf exited with status 4: No '
                                        'suitable slots found.')
        # A host without an agent: the caller's timeout.
        with pytest.raises(messaging.MessagingTimeout):
            agent_rpcapi.AgentAPI(transport, timeout=1).ping(context,
                                                             'no-such-host')
    finally:
        server.stop()
        server.wait()
        transport.cleanup()
