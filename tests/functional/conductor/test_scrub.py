"""Released attach handles are dirty until scrubbed and verified.

Three engines and a real Placement. The agent runs the fake driver with
``[fake_driver] scrub`` set, so its FPGA's sixteen handles (one provider
of sixteen units) are scrubbed between tenants; the API, the conductor
(binds, host syncs, the ``Scrubber``) and the agent's endpoint share
oslo.messaging's in-process transport.
"""

import contextlib
import datetime
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.accelerator.drivers import fake
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import health as health_module
from cyborg.conductor import membership
from cyborg.conductor import scrubber as scrubber_module
from cyborg.db import models
from cyborg.db.api import device_health
from cyborg.db.api import scrubs
from cyborg.metrics import conductor as conductor_metrics
from tests import arq_stack
from tests import notification_sink
from tests.arq_stack import ARQS
from tests.functional.conductor.conftest import HOST
from tests.placement_service import allocate

ONE_FPGA = [{'resources:FPGA': '1'}]
Handle = models.AttachHandle


@contextlib.contextmanager
def scrubbing_stack(conf, db, client, behaviour='pass'):
    """(API, Scrubber, the agent's driver, HostSync): the fake FPGA of
    ``HOST`` reported and synced to Placement, its scrub ``behaviour``."""
    conf.set_override('host', HOST)
    conf.set_override('scrub', behaviour, group='fake_driver')
    driver = fake.FakeDriver(conf, None)
    context = cyborg_context.admin_context(db)
    with arq_stack.fake_transport(conf) as transport:
        agent = agent_manager.AgentManager(
            conf, [driver], conductor=None,
            candidates=[(HOST, 'the configured host')], glance=None)
        server = rpc.get_server(transport, rpc.AGENT_TOPIC, HOST, [agent])
        server.start()
        agent_api = agent_rpcapi.AgentAPI(transport, timeout=10)
        try:
            with arq_stack.serving_conductor(
                    transport, db, arq_stack.binder(conf, agent_api),
                    placement_client=client) as endpoint:
                sync = endpoint.sync
                sync.report(context, agent.discover().to_dict(), [HOST])
                health = health_module.DeviceHealth(sync, hold_down=0)
                metrics = conductor_metrics.ConductorMetrics()
                scrubber = scrubber_module.Scrubber(
                    conf, agent_api, health, sync, 'conductor-1',
                    metrics=metrics, notifier=RecordingNotifier())
                yield (arq_stack.webtest_app(conf, db, transport), scrubber,
                       driver, sync)
        finally:
            driver.end_hung_scrubs()
            server.stop()
            server.wait()


class RecordingNotifier:
    """The notifications a Scrubber sends, as (event type, payload as
    sent, priority)."""

    enabled = True

    def __init__(self):
        self.sent = []

    def send(self, context, event_type, payload, priority):
        self.sent.append((event_type, payload.to_primitive(), priority))


def _rp(db):
    with db.engine.connect() as connection:
        return connection.execute(sa.select(models.Deployable.rp_uuid).where(
            models.Deployable.name == fake.DEPLOYABLE_NAME)).scalar_one()


def _handles(db):
    with db.engine.connect() as connection:
        return {row.uuid: row for row in connection.execute(
            sa.select(Handle.__table__))}


def _by_state(db):
    found = {}
    for row in _handles(db).values():
        found.setdefault(row.state, []).append(row)
    return found


def _reserved(observer, rp):
    return observer.get_inventories(rp)[1]['FPGA']['reserved']


def _pass(scrubber, context):
    return scrubber.run_pass(context, membership.SoleMembership(None))


def _bind(api, rp, placement):
    instance = str(uuid.uuid4())
    allocate(placement.adapter(), instance, rp, {'FPGA': 1})
    bound = arq_stack.bind_one(api, 'one', rp, instance, hostname=HOST)
    return bound, instance


def _release(api, placement, arq, instance):
    """Nova's deletion of the instance: the ARQ, then the allocation."""
    api.delete(ARQS + '/' + arq['uuid'], status=204)
    placement.adapter().delete('/allocations/' + instance,
                               raise_exc=False)


def test_a_released_handle_is_dirty_reserved_and_free_once_scrubbed(
        conf, db, admin_context, placement, client, observer,
        compute_node):
    arq_stack.make_profile(admin_context, 'one', ONE_FPGA)
    with scrubbing_stack(conf, db, client) as (api, scrubber, _, sync):
        rp = _rp(db)
        assert _reserved(observer, rp) == 0
        arq, instance = _bind(api, rp, placement)
        first = arq['attach_handle_uuid']

        _release(api, placement, arq, instance)
        handle = _handles(db)[first]
        assert (handle.state, handle.in_use) == (scrubs.DIRTY, True)
        assert handle.dirty_since is not None
        # The release bumped the host: its next sync reserves one unit.
        sync.sync_host(admin_context, HOST)
        assert _reserved(observer, rp) == 1

        # The next bind takes another handle.
        second, other = _bind(api, rp, placement)
        assert second['attach_handle_uuid'] != first

        assert _pass(scrubber, admin_context) == {first: scrubs.PASSED}
        handle = _handles(db)[first]
        assert (handle.state, handle.in_use) == (scrubs.FREE, False)
        assert handle.last_scrub_result == scrubs.PASSED
        assert handle.last_scrub_seconds is not None
        assert _reserved(observer, rp) == 0
        assert scrubber.metrics.scrubs.labels(
            'fake', 'passed')._value.get() == 1

        # Scrubbed, it is bound again: fifteen more binds take every
        # handle but the one held.
        taken = {_bind(api, rp, placement)[0]['attach_handle_uuid']
                 for _ in range(15)}
        assert first in taken
        assert second['attach_handle_uuid'] not in taken


@contextlib.contextmanager
def one_released(conf, db, client, placement, admin_context, behaviour):
    """(Scrubber, the uuid of the handle a deleted ARQ released, the
    provider) under ``scrubbing_stack``."""
    arq_stack.make_profile(admin_context, 'one', ONE_FPGA)
    with scrubbing_stack(conf, db, client, behaviour) as (api, scrubber, _,
                                                          sync):
        rp = _rp(db)
        arq, instance = _bind(api, rp, placement)
        _release(api, placement, arq, instance)
        yield scrubber, arq['attach_handle_uuid'], rp


def test_a_scrub_that_fails_quarantines_the_device_with_its_step(
        conf, db, admin_context, placement, client, observer,
        compute_node):
    with one_released(conf, db, client, placement, admin_context,
                      'fail') as (scrubber, handle_uuid, rp):
        assert _pass(scrubber, admin_context) == {
            handle_uuid: scrubs.FAILED}
        handle = _handles(db)[handle_uuid]
        assert (handle.state, handle.last_scrub_result,
                handle.last_scrub_step) == (scrubs.DIRTY, scrubs.FAILED,
                                            'verify')
        assert 'still holds data' in handle.last_scrub_message
        # Announced: the handle, the step and why.
        [(event_type, payload, priority)] = scrubber.notifier.sent
        notification_sink.check_payload(payload)
        data = payload['cyborg_object.data']
        assert (event_type, priority) == ('attach_handle.scrub.error',
                                          'ERROR')
        assert (data['uuid'], data['hostname'], data['method'],
                data['result'], data['step'], data['reason']) == (
            handle_uuid, HOST, fake.SCRUB_METHOD, 'failed', 'verify',
            handle.last_scrub_message)
        with db.engine.connect() as connection:
            device = connection.execute(sa.select(
                models.Device.__table__)).one()
        assert device.quarantined
        assert device.health == 'unhealthy'
        assert device.health_reason.startswith('scrub failed at verify: ')
        # Quarantined: the whole provider is reserved.
        assert _reserved(observer, rp) == 16
        # Healthy again by its agent's word, it stays quarantined while
        # the handle's scrub has not passed.
        address, = _addresses(db)
        scrubber.health.record(admin_context, HOST,
                               {address: ('healthy', 'ok')})
        assert scrubber.health.release_quarantines(admin_context) == {}
        # Not tried again before [scrub] retry_interval.
        assert _pass(scrubber, admin_context) == {}


def _addresses(db):
    with db.engine.connect() as connection:
        return [device_health.pci_address(row.cpid_info)
                for row in connection.execute(sa.select(
                    models.ControlPathID.cpid_info))]


def test_a_scrub_past_its_timeout_fails(
        conf, db, admin_context, placement, client, compute_node):
    conf.set_override('timeouts', {'fake': '1'}, group='scrub')
    with one_released(conf, db, client, placement, admin_context,
                      'hang') as (scrubber, handle_uuid, _):
        assert _pass(scrubber, admin_context) == {
            handle_uuid: scrubs.FAILED}
        handle = _handles(db)[handle_uuid]
        assert (handle.state, handle.last_scrub_step) == (scrubs.DIRTY,
                                                          'timeout')


@pytest.mark.parametrize('left_by', ['another conductor', 'this one'])
def test_a_scrub_left_scrubbing_by_a_crash_is_taken_over(
        conf, db, admin_context, placement, client, compute_node, left_by):
    with one_released(conf, db, client, placement, admin_context,
                      'pass') as (scrubber, handle_uuid, _):
        row, = scrubs.due(admin_context, 300)
        owner = ('conductor-2' if left_by == 'another conductor'
                 else 'conductor-1')
        assert scrubs.start(admin_context, row, owner)
        # Not before its time is up.
        assert _pass(scrubber, admin_context) == {}
        with db.engine.begin() as connection:
            connection.execute(sa.update(Handle).where(
                Handle.uuid == handle_uuid).values(
                scrub_started_at=models.utcnow()
                - datetime.timedelta(seconds=3600)))
        assert _pass(scrubber, admin_context) == {handle_uuid:
                                                  scrubs.PASSED}
        # The one that was cut short cannot record over it.
        assert not scrubs.finish(admin_context, _handles(db)[
            handle_uuid].id, owner, False, 1.0, 'verify', 'late')
        assert _handles(db)[handle_uuid].state == scrubs.FREE
