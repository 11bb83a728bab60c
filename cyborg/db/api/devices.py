"""Device queries for the API.

The conductor writes devices from the agents' reports, and their health;
the API writes a device's status here (enable/disable, with the news for
Placement) and its operator's override in ``health_override``.
"""

import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db.api import device_usage
from cyborg.db.api import host_sync_states
from cyborg.db.api import inventory as inventory_db
from cyborg.db.api import pagination

Device = models.Device


# What the agents say of a device's health (``devices.health``).
HEALTH_STATES = ('healthy', 'degraded', 'unhealthy', 'unknown')


def list_devices(context, type=None, vendor=None, hostname=None,
                 health=None, usage=False, **page):
    """(rows, {device id: ``device_usage.Usage``}): devices as read-only
    rows, filtered and paged in SQL, and with ``usage`` their latest usage
    figures (two queries more for any page; else ``{}``).

    Devices whose host stopped reporting them (``missing_since`` set) are
    listed too: their rows exist until nothing uses them.
    """
    stmt = sa.select(Device.__table__)
    for column, value in ((Device.type, type), (Device.vendor, vendor),
                          (Device.hostname, hostname),
                          (Device.health, health)):
        if value is not None:
            stmt = stmt.where(column == value)
    with context.db.read_connection(context) as connection:
        stmt = pagination.paginate(connection, stmt, Device, **page)
        rows = connection.execute(stmt).all()
        return rows, _usage(connection, rows, usage)


def get_device(context, uuid, usage=False):
    """(row, usage) of the device with this uuid, as ``list_devices``
    answers them; NotFound if there is none."""
    with context.db.read_connection(context) as connection:
        row = connection.execute(
            sa.select(Device.__table__).where(Device.uuid == uuid)
        ).one_or_none()
        if row is None:
            raise exception.NotFound('No device with uuid %s exists.' % uuid,
                                     code='cyborg.device.not_found')
        return row, _usage(connection, [row], usage)


def _usage(connection, rows, wanted):
    return device_usage.latest(
        connection, [(r.id, r.hostname) for r in rows]) if wanted else {}


def set_status(context, uuid, status):
    """Compare-and-set the device's status; ``(hostname, changed)``.

    A change bumps the host's desired Placement generation in the same
    transaction: whoever syncs the host next reserves or releases the
    device's inventory, even if the caller never gets that far.
    """
    with context.db.writer(context) as session:
        connection = session.connection()
        found = inventory_db.find_device_host(connection, uuid)
        if found is None:
            raise exception.NotFound('No device with uuid %s exists.' % uuid,
                                     code='cyborg.device.not_found')
        changed = inventory_db.set_device_status(connection, uuid, status)
        if changed:
            host_sync_states.bump_desired(connection, found.hostname)
    return found.hostname, changed
