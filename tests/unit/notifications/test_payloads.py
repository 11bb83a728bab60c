"""Notification payloads: the schema files agree with the payload kinds,
and every payload the emit functions can build, sent through
oslo.messaging's Notifier and received by a listener, is valid by its
schema."""

# First: oslo.service's threading backend, before oslo.messaging loads.
from cyborg import service  # noqa: F401, I001

import itertools
import json
import logging
import os
import pathlib
import socket
import subprocess
import sys
import types

import jsonschema
import oslo_messaging as messaging
import pytest

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg import states
from cyborg.accelerator.drivers import health
from cyborg.db.api import device_config_status
from cyborg.db.api import scrubs
from cyborg.device_config import status as config_status
from cyborg.notifications import emit
from cyborg.notifications import notifier
from cyborg.notifications import payloads
from tests import notification_sink

REPO = pathlib.Path(__file__).resolve().parents[3]
ARQ_UUID = '6e3b0d8c-2f4a-4c1e-9b7d-5a6f8e9d0c1b'
DEVICE_UUID = '0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0'
HANDLE_UUID = '7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f'
POLICY_UUID = '7c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f'


def notifying_conf(url='fake://', driver='messagingv2'):
    conf = cyborg_conf.load(default_config_files=[])
    notifier.register_opts(conf)
    conf.set_override('driver', [driver], group=notifier.GROUP)
    conf.set_override('transport_url', url, group=notifier.GROUP)
    conf.set_override('host', 'ctl-1')
    return conf


def arq_view(state, bound):
    """An ARQ as the database layer reads it (``arqs._view_select``)."""
    binding = bound or None
    return {
        'id': 7, 'uuid': ARQ_UUID, 'state': state,
        'device_profile_name': 'fpga-dp', 'device_profile_group_id': 1,
        'project_id': 'a1b2c3', 'created_at': None, 'updated_at': None,
        'hostname': binding and 'compute-1',
        'device_rp_uuid': binding and '1d2c3b4a-5f6e-4d7c-8b9a-0f1e2d3c4b5a',
        'instance_uuid': binding and '9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d',
        'attach_handle_type': binding and 'PCI',
        'attach_handle_uuid': (binding
                               and 'c5d6e7f8-a9b0-4c1d-8e2f-3a4b5c6d7e8f'),
        'attach_handle_info': binding and {'bus': '0c', 'device': '00',
                                           'domain': '0000', 'function': '1'},
    }


def device_row(status):
    """A row of ``devices``, read by attribute as the API's are."""
    return types.SimpleNamespace(
        id=3, uuid=DEVICE_UUID, type='FPGA', vendor='8086', model='PAC A10',
        hostname='compute-1', status=status, std_board_info=None,
        vendor_board_info=None, health=health.HEALTHY)


def config_policy_row():
    """A row of ``device_config_policies``, read by attribute."""
    return types.SimpleNamespace(
        id=4, uuid=POLICY_UUID, name='nic-8-vfs', priority=10,
        host_selector=['compute-*'],
        device_selector={'vendor_id': '8086', 'product_id': '1572'},
        kind='sriov_vfs', settings={'num_vfs': 8}, restore_on_delete=False)


def config_change(old_state, state):
    return device_config_status.Change(
        device_uuid=DEVICE_UUID, hostname='compute-1',
        policy_uuid=POLICY_UUID, policy_name='nic-8-vfs',
        old_state=old_state, state=state, wanted_settings={'num_vfs': 8})


@pytest.fixture
def sending():
    """A conductor's notifier on an in-process transport, and a listener
    of the versioned topic on it."""
    conf = notifying_conf()
    transport = messaging.get_notification_transport(conf)
    try:
        with notification_sink.listening(transport) as sink:
            yield notifier.Notifier(conf, notifier.CONDUCTOR,
                                    transport=transport), sink
    finally:
        transport.cleanup()


def test_schema_files_are_those_of_the_payload_kinds():
    files = {p.name for p in payloads.SCHEMA_DIR.glob('*.json')}
    assert files == {payloads.schema_path(k).name for k in payloads.KINDS}
    for kind in payloads.KINDS:
        stored = json.loads(payloads.schema_path(kind).read_text())
        assert stored == payloads.schema(kind), (
            '%s differs from the %s payload: run '
            'tools/gen-notification-schemas' % (payloads.schema_path(kind),
                                                kind.NAME))
        jsonschema.Draft202012Validator.check_schema(stored)
        assert stored['$schema'] == payloads.SCHEMA_DIALECT


def test_every_payload_built_is_valid_by_its_schema(sending):
    notifier_, sink = sending
    context = cyborg_context.admin_context(None)
    for state, bound in itertools.product(states.STATES, (False, True)):
        view = arq_view(state, bound)
        for send in (emit.arqs_created, emit.arqs_bind_started,
                     emit.arqs_bound, emit.arqs_unbound, emit.arqs_deleted):
            send(notifier_, context, [view])
        emit.arqs_bind_failed(notifier_, context, [view],
                              'Every attach handle is in use.')
    for status in payloads.DEVICE_STATUSES:
        emit.device_status_changed(notifier_, context, device_row(status))
    changes = [emit.HealthChange(device_row('enabled'), old, new, reason)
               for old, new in itertools.permutations(health.STATES, 2)
               for reason in (None, 'AER fatal errors grew by 2')]
    emit.devices_health_changed(notifier_, context, changes)
    for event_type in (emit.CONFIG_POLICY_CREATE, emit.CONFIG_POLICY_UPDATE,
                       emit.CONFIG_POLICY_DELETE):
        emit.config_policy_changed(notifier_, context, event_type,
                                   config_policy_row())
    transitions = [(None, 'pending'), ('failed', 'pending'),
                   ('applied', None)] + [
        (old, new) for old, new in itertools.pairwise(config_status.STATES)]
    emit.config_status_changed(notifier_, context, [
        config_change(old, new) for old, new in transitions])
    emit.scrub_failed(notifier_, context, scrubs.Due(
        id=9, uuid=HANDLE_UUID, state=scrubs.SCRUBBING, attach_type='PCI',
        attach_info={'domain': '0000', 'bus': '3b', 'device': '00',
                     'function': '0'},
        scrub_started_at=None, scrub_conductor='ctl-1', method='flr',
        driver_name='nvidia_gpu_driver', hostname='compute-1', device_id=3,
        device_uuid=DEVICE_UUID, cpid_info='{}'), 'verify',
        '0000:3b:00.0 did not come back on the PCI bus after its reset', 2)
    count = (len(states.STATES) * 2 * 6 + 2 + len(changes) + 3
             + len(transitions) + 1)

    messages = sink.wait_for(count)

    for message in messages:
        notification_sink.check(message)
        assert message['publisher_id'] == 'cyborg-conductor:ctl-1'
    assert {m['event_type'] for m in messages} == set(emit.EVENTS)
    for message in messages:
        kind, priority = emit.EVENTS[message['event_type']]
        if message['event_type'] == emit.DEVICE_HEALTH_CHANGE:
            data = message['payload']['cyborg_object.data']
            worse = (health.STATES.index(data['new_health'])
                     > health.STATES.index(data['old_health']))
            priority = notifier.WARN if worse else notifier.INFO
        assert message['priority'] == priority, message


def test_a_payload_off_its_schema_is_refused():
    payload = payloads.AcceleratorRequestPayload.from_fields(
        arq_view(states.BOUND, True)).to_primitive()
    payload['cyborg_object.data']['state'] = 'Gone'
    with pytest.raises(jsonschema.ValidationError):
        notification_sink.check_payload(payload)
    del payload['cyborg_object.data']['state']
    with pytest.raises(jsonschema.ValidationError):
        notification_sink.check_payload(payload)


def test_health_changes_in_a_list_each_sent(sending):
    notifier_, sink = sending
    device = dict(vars(device_row('enabled')))
    emit.devices_health_changed(notifier_, None, [
        (device, health.HEALTHY, health.UNHEALTHY, 'the device left the bus'),
        (device, health.UNHEALTHY, health.HEALTHY, None)])

    worse, better = sink.wait_for(2)

    assert worse['priority'] == notifier.WARN
    assert worse['payload']['cyborg_object.data'] == {
        'uuid': DEVICE_UUID, 'type': 'FPGA', 'vendor': '8086',
        'model': 'PAC A10', 'hostname': 'compute-1', 'status': 'enabled',
        'old_health': 'healthy', 'new_health': 'unhealthy',
        'reason': 'the device left the bus'}
    assert better['priority'] == notifier.INFO
    assert better['payload']['cyborg_object.data']['reason'] is None


def test_off_without_a_driver_reads_and_loads_nothing():
    conf = cyborg_conf.load(default_config_files=[])
    off = notifier.Notifier(conf, notifier.API)
    assert not off.enabled
    emit.arqs_created(off, None, lambda: pytest.fail('read the ARQs'))
    # A service whose configuration does not name the group does not
    # even load oslo.messaging to know.
    code = ('import sys\n'
            'from cyborg import conf\n'
            'from cyborg.notifications import notifier\n'
            'c = conf.load(default_config_files=[])\n'
            'assert not notifier.Notifier(c, notifier.API).enabled\n'
            'assert "oslo_messaging" not in sys.modules\n')
    subprocess.run([sys.executable, '-c', code], check=True, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)


def test_on_when_the_configuration_file_sets_a_driver(tmp_path):
    config = tmp_path / 'cyborg.conf'
    config.write_text('[oslo_messaging_notifications]\n'
                      'driver = messagingv2\n')
    conf = cyborg_conf.load(['--config-file', str(config)],
                            default_config_files=[])
    on = notifier.Notifier(conf, notifier.API)
    assert on.enabled
    assert on.publisher_id == 'cyborg-api:%s' % conf.host
    assert conf.oslo_messaging_notifications.retry == notifier.RETRY
    assert conf.notifications.versioned_notifications_topics == [
        'versioned_notifications']


def test_an_unreachable_bus_is_logged_and_fails_nothing(caplog):
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    # Nothing listens there now: every connection is refused.
    on = notifier.Notifier(notifying_conf(
        'rabbit://guest:guest@127.0.0.1:%d/' % port), notifier.API)
    caplog.set_level(logging.ERROR)
    try:
        emit.arqs_created(on, None, [arq_view(states.INITIAL, False)])
    finally:
        on.close()
    # oslo.messaging's own account of it, with the payload it dropped.
    dropped = [r for r in caplog.records
               if 'Could not send notification' in r.getMessage()]
    assert len(dropped) == 1, caplog.text
    assert ARQ_UUID in dropped[0].getMessage()


def test_a_payload_off_its_schema_is_not_built():
    device = dict(vars(device_row('enabled')), status=None)
    with pytest.raises(TypeError, match='DevicePayload.status must be str, '
                       'not None'):
        payloads.DevicePayload.from_fields(device)
    view = dict(arq_view(states.INITIAL, False), device_profile_group_id='0')
    with pytest.raises(TypeError, match='device_profile_group_id must be '
                       'int'):
        payloads.AcceleratorRequestPayload.from_fields(view)


def test_a_config_policy_payload_names_its_selectors(sending):
    notifier_, sink = sending
    emit.config_policy_changed(notifier_, None, emit.CONFIG_POLICY_CREATE,
                               config_policy_row())

    [message] = sink.wait_for(1)

    assert message['payload']['cyborg_object.data'] == {
        'uuid': POLICY_UUID, 'name': 'nic-8-vfs', 'priority': 10,
        'hosts': ['compute-*'],
        'devices': {'vendor_id': '8086', 'product_id': '1572'},
        'kind': 'sriov_vfs', 'settings': {'num_vfs': 8},
        'restore_on_delete': False}
