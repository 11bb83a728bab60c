"""Device health rows on the three engines (``cyborg.db.api.device_health``)
and an agent's usage on its services row."""

import dataclasses
import datetime

import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import device_health as health_db
from cyborg.db.api import host_sync_states as states_db
from cyborg.db.api import services as services_db
from tests import inventory_rows

FIRST, SECOND = 'ffff:0c:00.0', 'ffff:0d:00.0'


def two_devices():
    first, = inventory_rows.fake_devices()
    second = dataclasses.replace(
        first, controlpath_info=dict(first.controlpath_info, bus='0D'),
        deployables=[])
    return [first, second]


@pytest.fixture
def host(db):
    """Two devices on h1, one on h2; the uuids of h1's."""
    stored = inventory_rows.add_host(db.engine, 'h1', two_devices())
    inventory_rows.add_host(db.engine, 'h2', two_devices()[:1])
    return [device.uuid for device in stored]


def read(admin_context, hostname='h1'):
    with admin_context.db.read_connection(admin_context) as connection:
        return health_db.read_host(connection, hostname)


def write(admin_context, *updates):
    with admin_context.db.writer(admin_context) as session:
        health_db.write_health(session.connection(), list(updates))


def desired_generation(admin_context, hostname='h1'):
    with admin_context.db.read_connection(admin_context) as connection:
        state = states_db.read(connection, hostname)
    return state.desired_generation if state else 0


def age(db, seconds):
    """Every device's health observed ``seconds`` ago."""
    devices = models.Device.__table__
    with db.engine.begin() as connection:
        connection.execute(devices.update().where(
            devices.c.health_updated_at.is_not(None)).values(
            health_updated_at=models.utcnow()
            - datetime.timedelta(seconds=seconds)))


@pytest.mark.parametrize('quarantined, override, effective', [
    (False, None, False), (True, None, True),
    (False, 'quarantine', True), (True, 'quarantine', True),
    (False, 'ignore', False), (True, 'ignore', False)])
def test_effective_quarantine(quarantined, override, effective):
    row = health_db.DeviceHealth(1, 'u', FIRST, 'healthy', None, None,
                                 quarantined, override)
    assert health_db.effective_quarantine(row) is effective


def test_read_host_keys_the_devices_by_pci_address(
        admin_context, host, sql_counter):
    sql_counter.reset()
    found = read(admin_context)
    assert len(sql_counter) == 1
    assert sorted(found) == [FIRST, SECOND]  # the bus 0D read as 0d
    assert [found[a].uuid for a in (FIRST, SECOND)] == host
    assert {(d.health, d.health_reason, d.health_updated_at, d.quarantined,
             d.health_override) for d in found.values()} == {
        ('unknown', None, None, False, None)}


def test_the_time_moves_only_when_the_state_does(admin_context, db, host):
    row = read(admin_context)[FIRST]
    write(admin_context, (row, 'unhealthy', 'fell off', True))
    first = read(admin_context)[FIRST]
    assert (first.health, first.health_reason, first.quarantined) == (
        'unhealthy', 'fell off', True)
    assert first.health_updated_at is not None
    age(db, 100)
    aged = read(admin_context)[FIRST]

    write(admin_context, (aged, 'unhealthy', 'still off', True))
    same_state = read(admin_context)[FIRST]
    assert same_state.health_reason == 'still off'
    assert same_state.health_updated_at == aged.health_updated_at

    write(admin_context, (same_state, 'healthy', 'no problem seen', True))
    healthy = read(admin_context)[FIRST]
    assert healthy.health_updated_at > aged.health_updated_at
    # Only the device written changed.
    assert read(admin_context)[SECOND].health == 'unknown'
    assert read(admin_context, 'h2')[FIRST].health == 'unknown'


def test_release_is_a_compare_and_set_on_the_hold_down(
        admin_context, db, host):
    rows = read(admin_context)
    write(admin_context, (rows[FIRST], 'healthy', 'ok', True),
          (rows[SECOND], 'healthy', 'ok', True))
    age(db, 100)
    cutoff = models.utcnow() - datetime.timedelta(seconds=50)
    with admin_context.db.read_connection(admin_context) as connection:
        due = health_db.due_for_release(connection, cutoff)
    assert [(r.hostname, r.uuid) for r in due] == [('h1', u) for u in host]

    # The second turns unhealthy between the SELECT and the release.
    write(admin_context, (read(admin_context)[SECOND], 'unhealthy', 'x',
                          True))
    with admin_context.db.writer(admin_context) as session:
        released = health_db.release(session.connection(),
                                     [r.id for r in due], cutoff)
    assert released == 1
    after = read(admin_context)
    assert (after[FIRST].quarantined, after[SECOND].quarantined) == (
        False, True)
    # Healthy for less than the hold-down: not due.
    write(admin_context, (after[SECOND], 'healthy', 'ok', True))
    with admin_context.db.read_connection(admin_context) as connection:
        assert health_db.due_for_release(connection, cutoff) == []


def test_agent_heartbeat_stores_its_usage_in_one_update(
        admin_context, db, sql_counter):
    usage = {FIRST: {'gpu_util_percent': 7, 'observed_at': 1.5}}
    at = datetime.datetime(2026, 1, 2, 3, 4, 5)
    services_db.heartbeat(admin_context, 'h1', services_db.AGENT, '1.0',
                          '1.1', usage=usage, usage_at=at)
    sql_counter.reset()
    usage[FIRST]['gpu_util_percent'] = 8
    services_db.heartbeat(admin_context, 'h1', services_db.AGENT, '1.0',
                          '1.1', usage=usage, usage_at=at)
    assert len(sql_counter) == 1
    assert sql_counter.statements[0].lstrip().upper().startswith('UPDATE')
    table = models.Service.__table__
    with db.engine.connect() as connection:
        row = connection.execute(sa.select(table)).one()
    assert (row.usage, row.usage_at) == (usage, at)
