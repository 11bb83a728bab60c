"""Device queries for the API (reads only: the conductor writes devices)."""

import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db.api import pagination

Device = models.Device


def list_devices(context, type=None, vendor=None, hostname=None, **page):
    """Devices as read-only rows, filtered and paged in SQL.

    Devices whose host stopped reporting them (``missing_since`` set) are
    listed too: their rows exist until nothing uses them.
    """
    stmt = sa.select(Device.__table__)
    for column, value in ((Device.type, type), (Device.vendor, vendor),
                          (Device.hostname, hostname)):
        if value is not None:
            stmt = stmt.where(column == value)
    with context.db.read_connection(context) as connection:
        stmt = pagination.paginate(connection, stmt, Device, **page)
        return connection.execute(stmt).all()


def get_device(context, uuid):
    """The device with this uuid as a read-only row; NotFound if none."""
    with context.db.read_connection(context) as connection:
        row = connection.execute(
            sa.select(Device.__table__).where(Device.uuid == uuid)
        ).one_or_none()
    if row is None:
        raise exception.NotFound('No device with uuid %s exists.' % uuid,
                                 code='cyborg.device.not_found')
    return row
