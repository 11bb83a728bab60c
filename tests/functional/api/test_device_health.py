"""Device health in the API (microversion 2.5) on each database engine:
the fields as the conductor stores them, the health filter, and the
operator's override through a real conductor and Placement.
"""

import datetime
import time
import uuid

import pytest
import sqlalchemy as sa
import webtest

from cyborg import exception
from cyborg.api import app as api_app
from cyborg.db import models
from cyborg.db.api import health_override
from tests import inventory_rows
from tests.functional.api import test_devices
from tests.functional.api.test_devices import ADMIN
from tests.functional.api.test_devices import DEVICES
from tests.functional.api.test_devices import FIELDS
from tests.functional.api.test_devices import MANAGER
from tests.functional.api.test_devices import MEMBER
from tests.functional.api.test_devices import READER
from tests.functional.api.test_devices import listed
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

# The device API's rig: two hosts' devices, a conductor syncing a real
# Placement over the in-process transport, the app calling it.
hosts = test_devices.hosts
transport = test_devices.transport
conductor = test_devices.conductor
rpc_api = test_devices.rpc_api

V24 = {'OpenStack-API-Version': 'accelerator 2.4'}
V25 = {'OpenStack-API-Version': 'accelerator 2.5'}
HEALTH_FIELDS = {'health', 'health_reason', 'health_updated_at',
                 'health_override', 'quarantined', 'usage'}
# 2026-01-01T00:00:00.500000+00:00
OBSERVED = 1767225600.5


def override_path(device_uuid):
    return DEVICES + '/%s/health_override' % device_uuid


def columns(db, device_uuid):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(
            models.Device.health_override, models.Device.quarantined).where(
            models.Device.uuid == device_uuid)).one()


def generations(db, hostname='host1'):
    """(desired, synced) Placement generations of the host; (0, 0) if
    nothing was ever asked of it."""
    states = models.HostSyncState.__table__
    with db.engine.connect() as conn:
        row = conn.execute(sa.select(
            states.c.desired_generation, states.c.synced_generation).where(
            states.c.hostname == hostname)).one_or_none()
    return tuple(row) if row is not None else (0, 0)


# -- the fields ---------------------------------------------------------------

def test_health_fields_are_shown_from_2_5_only(api, hosts):
    one = DEVICES + '/' + hosts['amd']
    old = [api.get(one, headers=V24).json] + api.get(
        DEVICES, headers=V24).json['devices']
    new = [api.get(one, headers=V25).json] + api.get(
        DEVICES, headers=V25).json['devices']

    assert all(set(d) == FIELDS | {'status'} for d in old)
    assert all(set(d) == FIELDS | {'status'} | HEALTH_FIELDS for d in new)
    # As the schema leaves a device nobody has judged yet.
    assert {(d['health'], d['health_reason'], d['health_updated_at'],
             d['health_override'], d['quarantined'], d['usage'])
            for d in new} == {('unknown', None, None, None, False, None)}
    # Nothing else moves.
    assert [{k: v for k, v in d.items() if k not in HEALTH_FIELDS}
            for d in new] == old


def test_health_and_usage_as_the_conductor_stored_them(api, db, hosts):
    changed = datetime.datetime(2026, 1, 1, 0, 0, 0)
    inventory_rows.set_health(
        db.engine, hosts['nvidia'], health='degraded',
        health_reason='PCIe link trained at x8 of x16',
        health_updated_at=changed)
    usage_at = datetime.datetime(2026, 1, 1, 0, 0, 2)
    inventory_rows.record_usage(db.engine, 'host1', {
        '0000:3b:00.0': {'temperature_c': 61, 'pcie_link_width': 8,
                         'observed_at': OBSERVED},
        # No time of its own: the row's.
        'ffff:0c:00.0': {'pcie_link_width': 16},
        '0000:99:00.0': {'pcie_link_width': 4},
    }, usage_at=usage_at)

    shown = {d['uuid']: d for d in api.get(DEVICES, headers=V25).json[
        'devices']}

    nvidia = shown[hosts['nvidia']]
    assert nvidia['health'] == 'degraded'
    assert nvidia['health_reason'] == 'PCIe link trained at x8 of x16'
    assert nvidia['health_updated_at'] == '2026-01-01T00:00:00+00:00'
    assert nvidia['usage'] == {
        'observed_at': '2026-01-01T00:00:00.500000+00:00',
        'values': {'temperature_c': 61, 'pcie_link_width': 8}}
    assert shown[hosts['fpga']]['usage'] == {
        'observed_at': '2026-01-01T00:00:02+00:00',
        'values': {'pcie_link_width': 16}}
    # host2 has no agent row: the same address there has no figures.
    assert shown[hosts['amd']]['usage'] is None
    assert api.get(DEVICES + '/' + hosts['nvidia'],
                   headers=V25).json == nvidia


@pytest.mark.filterwarnings(
    'ignore:Policy .* was deprecated in .* in favor of:UserWarning')
def test_usage_is_for_admins_only(conf, db, hosts):
    # Usage describes the workloads of the projects using the devices.
    # Under the legacy defaults a project manager still reads the
    # inventory, but not their figures.
    conf.set_override('enforce_new_defaults', False, group='oslo_policy')
    api = webtest.TestApp(api_app.build_app(conf, db))
    inventory_rows.record_usage(db.engine, 'host1', {
        '0000:3b:00.0': {'temperature_c': 61, 'observed_at': OBSERVED}})
    one = DEVICES + '/' + hosts['nvidia']
    deployables = '/v2/deployables?device_id=' + hosts['nvidia']

    def usage_seen(headers):
        headers = {**headers, **V25}
        listed = {d['uuid']: d for d in api.get(
            DEVICES, headers=headers).json['devices']}
        [deployable] = api.get(deployables, headers=headers).json[
            'deployables']
        shown_deployable = api.get(
            '/v2/deployables/' + deployable['uuid'], headers=headers).json
        return [listed[hosts['nvidia']]['usage'],
                api.get(one, headers=headers).json['usage'],
                deployable['usage'], shown_deployable['usage']]

    figures = {'observed_at': '2026-01-01T00:00:00.500000+00:00',
               'values': {'temperature_c': 61}}
    assert usage_seen(ADMIN) == [figures] * 4
    assert usage_seen(MANAGER) == [None] * 4


def test_quarantined_is_the_quarantine_in_effect(api, db, hosts):
    def shown(override, quarantined):
        inventory_rows.set_health(db.engine, hosts['amd'],
                                  health_override=override,
                                  quarantined=quarantined)
        return api.get(DEVICES + '/' + hosts['amd'],
                       headers=V25).json['quarantined']

    assert [shown(o, q) for o in (None, 'ignore', 'quarantine')
            for q in (False, True)] == [
        False, True,  # health decides
        False, False,  # the operator ignores it
        True, True]  # the operator quarantines it


# -- the filter ---------------------------------------------------------------

def test_list_filters_by_health_in_sql(api, db, hosts, sql_counter):
    inventory_rows.set_health(db.engine, hosts['nvidia'], health='degraded')
    inventory_rows.set_health(db.engine, hosts['amd'], health='unhealthy')
    sql_counter.reset()

    assert listed(api, '?health=degraded', V25) == [hosts['nvidia']]
    assert listed(api, '?health=unhealthy', V25) == [hosts['amd']]
    assert listed(api, '?health=unknown', V25) == [hosts['fpga']]
    assert listed(api, '?health=healthy', V25) == []
    assert listed(api, '?health=unhealthy&hostname=host1', V25) == []
    filtered = [s for s in sql_counter.statements if 'FROM devices' in s]
    assert len(filtered) == 5
    assert all('devices.health =' in s for s in filtered)


@pytest.mark.parametrize('query,sentence', [
    ('?health=sick', "The health filter must be one of healthy, degraded, "
                     "unhealthy, unknown, not 'sick'."),
    ('?health=', "The health filter must be one of healthy, degraded, "
                 "unhealthy, unknown, not ''."),
    ('?health=healthy&health=unknown', 'Give health= at most once.'),
])
def test_a_health_filter_that_is_no_state_is_400(api, hosts, query,
                                                  sentence):
    response = api.get(DEVICES + query, headers=V25, expect_errors=True)

    assert response.status_int == 400
    assert response.json['error_message'] == sentence


def test_below_2_5_the_health_filter_is_ignored_as_before(api, hosts):
    assert len(listed(api, '?health=sick', V24)) == 3


# -- the override: what the database does ------------------------------------

def test_the_generation_moves_exactly_when_the_quarantine_changes(
        admin_context, db, hosts):
    device = hosts['amd']
    # (quarantined by health, override set, quarantine changes)
    steps = [
        (False, 'ignore', False),
        (True, None, True),
        (True, 'quarantine', False),
        (True, 'quarantine', False),
        (True, 'ignore', True),
        (False, None, False),
        (False, 'quarantine', True),
        (False, None, True),
    ]
    seen = []
    for quarantined, override, _ in steps:
        inventory_rows.set_health(db.engine, device, quarantined=quarantined)
        before = generations(db, 'host2')[0]
        outcome = health_override.set_override(admin_context, device,
                                               override)
        assert columns(db, device) == (override, quarantined)
        assert (outcome.hostname, outcome.status) == ('host2', 'enabled')
        seen.append((outcome.quarantine_changed,
                     generations(db, 'host2')[0] - before))

    assert seen == [(changes, int(changes)) for _, _, changes in steps]
    # Other hosts are left alone.
    assert generations(db, 'host1') == (0, 0)


def test_an_unknown_device_has_no_override(admin_context, db, hosts):
    missing = str(uuid.uuid4())

    with pytest.raises(exception.NotFound) as raised:
        health_override.set_override(admin_context, missing, 'quarantine')

    assert raised.value.status == 404
    assert str(raised.value) == 'No device with uuid %s exists.' % missing


# -- the override: the API ---------------------------------------------------

def test_override_put_and_delete_bring_placement_up_to_date(
        rpc_api, db, hosts, conductor):
    create_compute_node(conductor.adapter(), 'host1')
    path = override_path(hosts['fpga'])

    quarantined = rpc_api.put_json(path, {'health_override': 'quarantine'},
                                   headers={**ADMIN, **V25})

    assert quarantined.status_int == 200
    assert set(quarantined.json) == FIELDS | {'status'} | HEALTH_FIELDS
    assert quarantined.json['uuid'] == hosts['fpga']
    assert quarantined.json['health_override'] == 'quarantine'
    assert quarantined.json['quarantined'] is True
    assert columns(db, hosts['fpga']) == ('quarantine', False)
    # Bumped, and the conductor synced the host before answering.
    assert generations(db) == (1, 1)
    assert rpc_api.get(DEVICES + '/' + hosts['fpga'],
                       headers=V25).json == quarantined.json

    ignored = rpc_api.put_json(path, {'health_override': 'ignore'},
                               headers={**ADMIN, **V25})

    assert ignored.json['health_override'] == 'ignore'
    assert ignored.json['quarantined'] is False
    assert generations(db) == (2, 2)

    cleared = rpc_api.delete(path, headers={**ADMIN, **V25})

    assert cleared.status_int == 204
    assert cleared.body == b''
    assert columns(db, hosts['fpga']) == (None, False)
    # Not quarantined before or after: nothing for Placement.
    assert generations(db) == (2, 2)
    assert rpc_api.get(DEVICES + '/' + hosts['fpga'],
                       headers=V25).json['health_override'] is None


@pytest.mark.parametrize('method', ['put', 'delete'])
@pytest.mark.parametrize('headers', [READER, MEMBER, MANAGER],
                         ids=['reader', 'member', 'manager'])
def test_only_admins_override(api, db, hosts, method, headers):
    inventory_rows.set_health(db.engine, hosts['amd'],
                              health_override='ignore')

    response = getattr(api, method + '_json')(
        override_path(hosts['amd']), {'health_override': 'quarantine'},
        headers={**headers, **V25}, expect_errors=True)

    assert response.status_int == 403
    assert 'cyborg:device:health_override' in response.json['error_message']
    assert columns(db, hosts['amd']) == ('ignore', False)
    assert generations(db, 'host2') == (0, 0)


@pytest.mark.parametrize('body,sentence', [
    ([], 'The request body must be a JSON object with the field '
         'health_override, not an array.'),
    ({}, 'The request body needs the field health_override.'),
    ({'health_override': 'ignore', 'reason': 'flaky fan'},
     'The request body has no field reason; it holds health_override '
     'only.'),
    ({'health_override': None}, 'health_override must be ignore or '
     'quarantine, not null; DELETE the health_override to clear it.'),
    ({'health_override': 'Quarantine'}, "health_override must be ignore or "
     "quarantine, not 'Quarantine'."),
    ({'health_override': True}, 'health_override must be ignore or '
     'quarantine, not a boolean.'),
])
def test_a_bad_override_body_is_400(api, db, hosts, body, sentence):
    response = api.put_json(override_path(hosts['amd']), body,
                            headers={**ADMIN, **V25}, expect_errors=True)

    assert response.status_int == 400
    assert response.json['error_message'] == sentence
    assert columns(db, hosts['amd']) == (None, False)


def test_below_2_5_the_override_path_does_not_exist(api, db, hosts):
    path = override_path(hosts['amd'])

    put = api.put_json(path, {'health_override': 'quarantine'},
                       headers={**ADMIN, **V24}, expect_errors=True)
    delete = api.delete(path, headers={**ADMIN, **V24}, expect_errors=True)
    read_new = api.get(path, headers={**ADMIN, **V25}, expect_errors=True)
    read_old = api.get(path, headers={**ADMIN, **V24}, expect_errors=True)

    assert put.status_int == delete.status_int == read_old.status_int == 404
    assert put.json['error_message'] == (
        'The resource /v2/devices/%s/health_override could not be found.'
        % hosts['amd'])
    assert read_new.status_int == 405
    assert read_new.headers['Allow'] == 'DELETE, PUT'
    assert columns(db, hosts['amd']) == (None, False)


def test_a_conductor_that_does_not_answer_is_503_and_the_override_stays(
        conf, db, rpc_api, hosts):
    conf.set_override('conductor_timeout', 1, group='api')

    started = time.monotonic()
    response = rpc_api.put_json(override_path(hosts['amd']),
                                {'health_override': 'quarantine'},
                                headers={**ADMIN, **V25}, expect_errors=True)

    assert time.monotonic() - started < 10
    assert response.status_int == 503
    assert response.json['error_message'] == (
        'The health override of device %s is set to quarantine in Cyborg, '
        'but no conductor updated Placement within 1 seconds; Placement '
        'will be updated when it is reachable again.' % hosts['amd'])
    # Stored with the news: the conductors' next pass syncs the host.
    assert columns(db, hosts['amd']) == ('quarantine', False)
    assert generations(db, 'host2') == (1, 0)
