"""Versioned notifications over the real RabbitMQ: the API and a
conductor in this process (``tests/arq_stack.py``), RPC and notifications
on a virtual host of the test's own, and an oslo.messaging listener on
the versioned topic, as a consumer of the cloud's notifications has.
Each notification received is checked against its payload's schema.
"""

# First: oslo.service's threading backend, before oslo.messaging loads.
from cyborg import service  # noqa: F401, I001

import contextlib
import uuid

import oslo_messaging as messaging
import pytest

from cyborg import rpc
from cyborg.notifications import notifier
from tests import arq_stack
from tests import conductor_rpc
from tests import inventory_rows
from tests import notification_sink
from tests.conftest import database_url_on
from tests.functional.services.conftest import vhost_url  # noqa: F401
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

API_HOST = 'api-1'
CONDUCTOR_HOST = 'conductor-1'
ONE_ARQ = 'fpga-one'


# One engine: what is tested here is the bus, not the SQL.
database_url = database_url_on('mysql')


class Stack:
    def __init__(self, api, sink):
        self.api = api
        self.sink = sink


@contextlib.contextmanager
def notifying_stack(conf, db, vhost_url, placement_client=None):  # noqa: F811
    """The API and a conductor (syncing ``placement_client``) over the
    virtual host, both notifying, and a listener there."""
    conductor_rpc.use_fake_transport(conf, timeout=20)
    conf.set_override('transport_url', vhost_url)
    conf.set_override('host', API_HOST)
    conf.set_override('driver', ['messagingv2'], group=notifier.GROUP)
    with contextlib.ExitStack() as stack:
        rpc_transport = rpc.get_transport(conf)
        stack.callback(rpc_transport.cleanup)
        listen_transport = messaging.get_notification_transport(conf)
        stack.callback(listen_transport.cleanup)
        sink = stack.enter_context(
            notification_sink.listening(listen_transport))
        api_notifier = notifier.Notifier(conf, notifier.API)
        stack.callback(api_notifier.close)
        conductor_notifier = notifier.Notifier(conf, notifier.CONDUCTOR,
                                               host=CONDUCTOR_HOST)
        stack.callback(conductor_notifier.close)
        stack.enter_context(arq_stack.serving_conductor(
            rpc_transport, db,
            arq_stack.binder(conf, notifier=conductor_notifier),
            placement_client=placement_client))
        yield Stack(arq_stack.webtest_app(conf, db, rpc_transport,
                                          notifier=api_notifier), sink)


@pytest.fixture
def stack(conf, db, vhost_url):  # noqa: F811
    with notifying_stack(conf, db, vhost_url) as stack:
        yield stack


@pytest.fixture
def placed_stack(conf, db, vhost_url, placement):  # noqa: F811
    """``stack`` whose conductor syncs a real Placement."""
    create_compute_node(placement.adapter(), arq_stack.HOST)
    with notifying_stack(conf, db, vhost_url, placement.client()) as stack:
        yield stack


def test_an_arq_life_cycle_is_announced(stack, db, admin_context):
    rp = arq_stack.deployable_rp(db, arq_stack.store_fake_fpga(db))
    arq_stack.make_profile(admin_context)
    arq_stack.make_profile(admin_context, ONE_ARQ, [{'resources:FPGA': '1'}])
    api = stack.api
    instance = str(uuid.uuid4())

    arqs = api.post_json(arq_stack.ARQS, {
        'device_profile_name': arq_stack.PROFILE}).json['arqs']
    api.patch_json(arq_stack.ARQS, arq_stack.bind_body(arqs, rp, instance))
    bound = arq_stack.wait_resolved(api, instance)
    api.patch_json(arq_stack.ARQS, arq_stack.unbind_body(arqs))
    api.delete(arq_stack.ARQS, {'arqs': ','.join(a['uuid'] for a in arqs)})

    # A bind that fails: no deployable has this resource provider.
    failing, = api.post_json(arq_stack.ARQS, {
        'device_profile_name': ONE_ARQ}).json['arqs']
    other = str(uuid.uuid4())
    api.patch_json(arq_stack.ARQS, arq_stack.bind_body(
        [failing], str(uuid.uuid4()), other))
    arq_stack.wait_resolved(api, other)
    api.delete(arq_stack.ARQS, {'instance': other})

    cycle = ['accelerator_request.create',
             'accelerator_request.bind.start',
             'accelerator_request.bind.end',
             'accelerator_request.unbind',
             'accelerator_request.delete']
    for arq in arqs:
        assert stack.sink.events_of(arq['uuid'], len(cycle)) == cycle
    assert stack.sink.events_of(failing['uuid'], 4) == [
        'accelerator_request.create', 'accelerator_request.bind.start',
        'accelerator_request.bind.error', 'accelerator_request.delete']
    messages = stack.sink.messages
    assert len(messages) == len(arqs) * len(cycle) + 4
    for message in messages:
        notification_sink.check(message)

    def of(arq_uuid, event_type):
        found, = [m for m in messages if m['event_type'] == event_type
                  and m['payload']['cyborg_object.data']['uuid'] == arq_uuid]
        return found

    first = arqs[0]['uuid']
    handle = {a['uuid']: a for a in bound}[first]['attach_handle_uuid']
    end = of(first, 'accelerator_request.bind.end')
    assert end['publisher_id'] == 'cyborg-conductor:%s' % CONDUCTOR_HOST
    assert end['priority'] == 'INFO'
    assert end['payload']['cyborg_object.data'] == {
        'uuid': first, 'state': 'Bound',
        'device_profile_name': arq_stack.PROFILE,
        'device_profile_group_id': 0, 'project_id': arqs[0]['project_id'],
        'hostname': arq_stack.HOST, 'device_rp_uuid': rp,
        'instance_uuid': instance, 'attach_handle_type': 'TEST_PCI',
        'attach_handle_uuid': handle}
    for event_type in ('accelerator_request.create',
                       'accelerator_request.bind.start',
                       'accelerator_request.unbind',
                       'accelerator_request.delete'):
        assert of(first, event_type)['publisher_id'] == (
            'cyborg-api:%s' % API_HOST), event_type
    assert of(first, 'accelerator_request.create')['payload'][
        'cyborg_object.data']['state'] == 'Initial'
    # What the unbind released, and what was deleted.
    unbind = of(first, 'accelerator_request.unbind')['payload'][
        'cyborg_object.data']
    assert (unbind['state'], unbind['instance_uuid'],
            unbind['attach_handle_uuid']) == ('Unbound', instance, handle)
    assert of(first, 'accelerator_request.delete')['payload'][
        'cyborg_object.data']['state'] == 'Unbound'

    error = of(failing['uuid'], 'accelerator_request.bind.error')
    assert error['priority'] == 'ERROR'
    assert error['payload']['cyborg_object.name'] == (
        'AcceleratorRequestErrorPayload')
    data = error['payload']['cyborg_object.data']
    assert data['state'] == 'BindFailed'
    assert 'No deployable of this service has resource provider' in (
        data['reason'])


def test_device_disable_and_enable_are_announced(placed_stack, db):
    stack = placed_stack
    device = arq_stack.store_fake_fpga(db)
    path = '/v2/devices/%s' % device.uuid

    # Enabling an enabled device changes nothing: it is not announced.
    for action in ('disable', 'enable', 'enable', 'disable'):
        assert stack.api.post(path + '/' + action).status_int == 200

    assert stack.sink.events_of(device.uuid, 3) == [
        'device.disable', 'device.enable', 'device.disable']
    disabled, enabled, _ = stack.sink.messages
    for message in stack.sink.messages:
        notification_sink.check(message)
        assert message['publisher_id'] == 'cyborg-api:%s' % API_HOST
    assert disabled['event_type'] == 'device.disable'
    assert disabled['payload']['cyborg_object.data']['status'] == (
        'maintaining')
    assert enabled['event_type'] == 'device.enable'
    found, = inventory_rows.fake_devices()
    assert enabled['payload']['cyborg_object.data'] == {
        'uuid': device.uuid, 'type': found.type, 'vendor': found.vendor,
        'model': found.model, 'hostname': arq_stack.HOST,
        'status': 'enabled'}
