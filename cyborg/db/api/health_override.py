"""The operator's word on a device's health, and the quarantine it makes.

``health_override`` is None (the device's health decides), ``ignore``
(never quarantined automatically) or ``quarantine`` (quarantined whatever
its health). A device is quarantined in effect, and Placement reserves
its inventory, per ``effectively_quarantined``. Setting the override is a
compare-and-set on the row as read; when it changes the effective
quarantine, the host's desired Placement generation is bumped in the same
transaction, as a status change does (see ``host_sync_states``).
"""

import dataclasses

import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db.api import host_sync_states

IGNORE = 'ignore'
QUARANTINE = 'quarantine'
OVERRIDES = (IGNORE, QUARANTINE)
# The health state that quarantines a device (device_health.UNHEALTHY).
UNHEALTHY = 'unhealthy'

_devices = models.Device.__table__
# Writers that keep changing the row between our read and our write (the
# conductor's health updates) are outlasted a few times, then reported.
_ATTEMPTS = 5


def effectively_quarantined(override, quarantined):
    return override == QUARANTINE or (override != IGNORE and bool(quarantined))


@dataclasses.dataclass(frozen=True)
class Outcome:
    hostname: str
    status: str  # the device's status (enabled | maintaining) as written
    quarantine_changed: bool


def _quarantined_by_health(row, override):
    """The automatic quarantine once ``override`` is set: an ``ignore``
    that ends hands the decision back to health, so an unhealthy device
    is quarantined then, as its health would have done. Released as
    usual once healthy for the hold-down."""
    if override != IGNORE and row.health == UNHEALTHY:
        return True
    return bool(row.quarantined)


def _same(column, value):
    return column.is_(None) if value is None else column == value


def set_override(context, uuid, override):
    """Set the device's override (None clears it); an ``Outcome``.

    NotFound if there is no such device; Conflict if the row kept
    changing under the write.
    """
    if override is not None and override not in OVERRIDES:
        raise exception.Invalid('A health override is %s, not %r.'
                                % (' or '.join(OVERRIDES), override))
    for _ in range(_ATTEMPTS):
        with context.db.writer(context) as session:
            connection = session.connection()
            row = connection.execute(
                sa.select(_devices.c.hostname, _devices.c.status,
                          _devices.c.health, _devices.c.quarantined,
                          _devices.c.health_override)
                .where(_devices.c.uuid == uuid)).one_or_none()
            if row is None:
                raise exception.NotFound(
                    'No device with uuid %s exists.' % uuid,
                    code='cyborg.device.not_found')
            if row.health_override == override:
                return Outcome(row.hostname, row.status, False)
            quarantined = _quarantined_by_health(row, override)
            written = connection.execute(
                sa.update(_devices)
                .where(_devices.c.uuid == uuid,
                       _same(_devices.c.health, row.health),
                       _same(_devices.c.quarantined, row.quarantined),
                       _same(_devices.c.health_override,
                             row.health_override))
                .values(health_override=override, quarantined=quarantined,
                        updated_at=models.utcnow())).rowcount
            if written:
                changed = (effectively_quarantined(row.health_override,
                                                   row.quarantined)
                           != effectively_quarantined(override,
                                                      quarantined))
                if changed:
                    host_sync_states.bump_desired(connection, row.hostname)
                return Outcome(row.hostname, row.status, changed)
    raise exception.Conflict(
        'Device %s kept changing while its health override was being set; '
        'try again.' % uuid, code='cyborg.device.busy')
