"""A device's health change announced over the real RabbitMQ: the
conductor's heartbeat handling (``cyborg.conductor.health``) with a
notifier on a virtual host of the test's own, and a listener on the
versioned topic; each notification checked against its schema."""

# First: oslo.service's threading backend, before oslo.messaging loads.
from cyborg import service  # noqa: F401, I001

import oslo_messaging as messaging

from cyborg.conductor import health as health_module
from cyborg.notifications import notifier
from tests import arq_stack
from tests import conductor_rpc
from tests import inventory_rows
from tests import notification_sink
from tests.conftest import database_url_on
from tests.functional.services.conftest import vhost_url  # noqa: F401

CONDUCTOR_HOST = 'conductor-1'

# One engine: what is tested here is the bus, not the SQL.
database_url = database_url_on('mysql')


def test_a_health_change_is_announced(conf, db, admin_context,
                                      vhost_url):  # noqa: F811
    conductor_rpc.use_fake_transport(conf, timeout=20)
    conf.set_override('transport_url', vhost_url)
    conf.set_override('driver', ['messagingv2'], group=notifier.GROUP)
    device = arq_stack.store_fake_fpga(db)
    found, = inventory_rows.fake_devices()
    address = found.address
    listen_transport = messaging.get_notification_transport(conf)
    conductor_notifier = notifier.Notifier(conf, notifier.CONDUCTOR,
                                           host=CONDUCTOR_HOST)
    try:
        with notification_sink.listening(listen_transport) as sink:
            health = health_module.DeviceHealth(sync=None,
                                                notifier=conductor_notifier)
            for state, reason in (('degraded', 'link x8 of x16'),
                                  ('degraded', 'link x8 of x16'),
                                  ('healthy', 'no problem seen')):
                health.heartbeat(admin_context, arq_stack.HOST, health={
                    address: {'state': state, 'reason': reason}})
            # The unchanged second heartbeat announces nothing.
            assert sink.events_of(device.uuid, 2) == [
                'device.health_change', 'device.health_change']
            worse, better = sink.messages
    finally:
        conductor_notifier.close()
        listen_transport.cleanup()
    for message in (worse, better):
        notification_sink.check(message)
        assert message['publisher_id'] == 'cyborg-conductor:%s' % (
            CONDUCTOR_HOST)
    assert worse['priority'] == 'WARN'
    assert better['priority'] == 'INFO'
    data = worse['payload']['cyborg_object.data']
    assert (data['uuid'], data['hostname'], data['old_health'],
            data['new_health'], data['reason']) == (
        device.uuid, arq_stack.HOST, 'unknown', 'degraded',
        'link x8 of x16')
    assert better['payload']['cyborg_object.data']['old_health'] == (
        'degraded')
