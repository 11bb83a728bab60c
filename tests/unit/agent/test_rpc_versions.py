"""The agent's endpoints take what a conductor of a later release sends:
payloads of a later 1.x version and arguments they do not know."""

import pytest

from cyborg import rpc
from cyborg.accelerator.drivers import fake
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.objects import payload
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import StandInGlance
from tests.unit.agent.conftest import agent_conf

IMAGE_ID = 'c0ffee00-1111-4222-8333-444455556666'
HANDLE_UUID = '6d2b4f0e-8c1a-4e3b-9f5d-7a6c8e0b2d4f'


def newer_call(agent, method, **kwargs):
    """``method`` as a conductor of a later release sends it: with an
    argument that this release does not know."""
    client = rpc.get_client(agent.transport, rpc.AGENT_TOPIC,
                            agent_rpcapi.VERSION, server=HOST, timeout=10)
    return client.prepare(version=agent_rpcapi.VERSION).call(
        agent.context, method, later_argument='x', **kwargs)


@pytest.fixture
def agent(serve_agent):
    conf = agent_conf()
    served = serve_agent(conf, [fake.FakeDriver(conf, None)],
                         glance=StandInGlance({IMAGE_ID: b'bits'}))
    # The in-process transport is one per process and URL.
    served.transport = rpc.get_transport(conf)
    yield served
    served.transport.cleanup()


def test_newer_payloads_and_arguments_are_taken(agent):
    handle = fake.FakeDriver(None, None).discover()[0].deployables[
        0].attach_handles[0]
    attach_handle = {'uuid': HANDLE_UUID, 'attach_type': handle.attach_type,
                     'attach_info': handle.attach_info, 'version': '1.4',
                     'later_field': {'a': 1}}
    assert newer_call(agent, 'ping')['host'] == HOST
    assert newer_call(agent, 'prepare_attach_handle',
                      driver_name='fake_driver', attach_handle=attach_handle,
                      arq_uuid='arq-1') is None
    summary = newer_call(
        agent, 'program', driver_name='fake_driver',
        controlpath_info=fake.ADDRESS.as_info(),
        bitstream={'image_id': IMAGE_ID, 'version': '1.3', 'later': True})
    assert summary['version'] == agent_rpcapi.PROGRAM_SUMMARY.version
    assert summary['image_id'] == IMAGE_ID


def test_a_bitstream_of_a_newer_major_is_refused(agent):
    with pytest.raises(payload.PayloadVersionError) as refused:
        newer_call(agent, 'program', driver_name='fake_driver',
                   controlpath_info=fake.ADDRESS.as_info(),
                   bitstream={'image_id': IMAGE_ID, 'version': '2.0'})
    assert refused.value.message == (
        'The bitstream payload of version 2.0 cannot be read by this '
        'service, which reads 1.x: upgrade this service to the sender\'s '
        'release.')
