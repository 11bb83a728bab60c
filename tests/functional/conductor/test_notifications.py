"""What the conductor announces: the unbind and the delete of a vGPU,
which release a mediated device on the host, and a bind failed for
being overdue. The API, the conductor and the agent share oslo.messaging's
in-process transport; a listener on the versioned topic receives what
both notify, each payload checked against its schema.
"""

# First: oslo.service's threading backend, before oslo.messaging loads.
from cyborg import service  # noqa: F401, I001

import datetime
import uuid

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import arqs as arq_db
from cyborg.notifications import notifier
from tests import arq_stack
from tests import notification_sink
from tests.conftest import database_url_on
from tests.functional.conductor import test_vgpu_binding as vgpu
from tests.functional.conductor.test_vgpu_binding import gpu_root  # noqa: F401
from tests.functional.conductor.test_vgpu_binding import profile  # noqa: F401
from tests.functional.conductor.test_vgpu_binding import vgpu_rp  # noqa: F401

CONDUCTOR_PUBLISHER = 'cyborg-conductor:conductor-1'


# One engine: the SQL of these paths is tested on each elsewhere.
database_url = database_url_on('postgresql')


class Notified:
    def __init__(self, api, sink, conductor_notifier):
        self.api = api
        self.sink = sink
        self.conductor_notifier = conductor_notifier

    def received(self, uuid_, count):
        """``{event type: message}`` about ``uuid_``, once ``count`` have
        come, each checked."""
        self.sink.events_of(uuid_, count)
        found = {}
        for message in self.sink.messages:
            if message['payload']['cyborg_object.data']['uuid'] == uuid_:
                notification_sink.check(message)
                found[message['event_type']] = message
        return found


@pytest.fixture
def notified(conf, db, gpu_root):  # noqa: F811
    notifier.register_opts(conf)
    conf.set_override('driver', ['messagingv2'], group=notifier.GROUP)
    conf.set_override('transport_url', 'fake://', group=notifier.GROUP)
    # The in-process driver delivers only within one transport object:
    # the listener and both notifiers share it.
    transport = messaging.get_notification_transport(conf)
    try:
        with notification_sink.listening(transport) as sink:
            conductor_notifier = notifier.Notifier(
                conf, notifier.CONDUCTOR, host='conductor-1',
                transport=transport)
            api_notifier = notifier.Notifier(conf, notifier.API,
                                             transport=transport)
            with vgpu.vgpu_stack(conf, db, gpu_root, notifier=api_notifier,
                                 binder_args={'notifier': conductor_notifier}
                                 ) as api:
                yield Notified(api, sink, conductor_notifier)
    finally:
        transport.cleanup()


def test_the_conductor_announces_what_it_releases(
        notified, vgpu_rp, profile):  # noqa: F811
    api = notified.api
    instance = str(uuid.uuid4())
    unbound = vgpu.bind(api, vgpu_rp, instance)
    api.patch_json(arq_stack.ARQS + '/' + unbound['uuid'], {
        unbound['uuid']: [{'op': 'remove', 'path': '/hostname'}]})
    deleted = vgpu.bind(api, vgpu_rp, str(uuid.uuid4()))
    api.delete(arq_stack.ARQS + '/' + deleted['uuid'])

    for arq, last in ((unbound, 'accelerator_request.unbind'),
                      (deleted, 'accelerator_request.delete')):
        assert notified.sink.events_of(arq['uuid'], 4) == [
            'accelerator_request.create', 'accelerator_request.bind.start',
            'accelerator_request.bind.end', last]
    unbind = notified.received(unbound['uuid'], 4)[
        'accelerator_request.unbind']
    assert unbind['publisher_id'] == CONDUCTOR_PUBLISHER
    data = unbind['payload']['cyborg_object.data']
    assert (data['state'], data['instance_uuid'], data['attach_handle_type'],
            data['attach_handle_uuid']) == (
        'Unbound', instance, 'MDEV', unbound['attach_handle_uuid'])
    delete = notified.received(deleted['uuid'], 4)[
        'accelerator_request.delete']
    assert delete['publisher_id'] == CONDUCTOR_PUBLISHER
    assert delete['payload']['cyborg_object.data']['state'] == 'Deleting'
    assert delete['payload']['cyborg_object.data'][
        'attach_handle_uuid'] == deleted['attach_handle_uuid']


def test_an_overdue_bind_is_announced_as_failed(
        notified, conf, db, admin_context, vgpu_rp, profile):  # noqa: F811
    arq, = notified.api.post_json(arq_stack.ARQS, {
        'device_profile_name': profile}).json['arqs']
    instance = str(uuid.uuid4())
    # Started, then its conductor went quiet past its deadline.
    arq_db.start_binding(admin_context, {arq['uuid']: {
        'hostname': vgpu.HOST, 'device_rp_uuid': vgpu_rp,
        'instance_uuid': instance}}, conductor='conductor-2')
    with db.engine.begin() as conn:
        conn.execute(sa.update(models.ExtendedAcceleratorRequest).where(
            models.ExtendedAcceleratorRequest.uuid == arq['uuid']).values(
            bind_deadline=models.utcnow() - datetime.timedelta(seconds=1)))
    binder = arq_stack.binder(conf, notifier=notified.conductor_notifier)

    assert [a['uuid'] for a in binder.fail_overdue(admin_context)] == [
        arq['uuid']]

    error = notified.received(arq['uuid'], 2)['accelerator_request.bind.error']
    assert error['publisher_id'] == CONDUCTOR_PUBLISHER
    assert error['priority'] == 'ERROR'
    data = error['payload']['cyborg_object.data']
    assert (data['state'], data['instance_uuid'], data['hostname']) == (
        'BindFailed', instance, vgpu.HOST)
    assert data['reason'] == 'The bind did not finish within %d s.' % (
        conf.conductor.bind_timeout)


def test_a_bind_no_conductor_takes_is_announced_as_failed(
        notified, conf, vgpu_rp, profile):  # noqa: F811
    # The conductors are pinned to an RPC API from before binds.
    conf.set_override('conductor', '1.1', group='upgrade_levels')
    api = notified.api
    arq, = api.post_json(arq_stack.ARQS, {
        'device_profile_name': profile}).json['arqs']

    answer = api.patch_json(arq_stack.ARQS, arq_stack.bind_body(
        [arq], vgpu_rp, str(uuid.uuid4()), vgpu.HOST), expect_errors=True)

    assert answer.status_int == 503, answer.text
    error = notified.received(arq['uuid'], 3)['accelerator_request.bind.error']
    assert error['publisher_id'].startswith('cyborg-api:')
    data = error['payload']['cyborg_object.data']
    assert data['state'] == 'BindFailed'
    assert data['reason'] == answer.json['error_message']
