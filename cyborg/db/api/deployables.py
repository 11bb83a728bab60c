"""Deployable queries for the API: rows with their relatives' uuids.

A deployable names its device, parent and root by uuid (the row ids stay
inside the database), carries its attributes, read for a whole page in
one more query, and its device's health; its device's usage figures take
two queries more when asked for, its attach handles (their state and
last scrub) one more.
"""

import collections

import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db.api import device_usage
from cyborg.db.api import pagination

Deployable = models.Deployable
_deployables = Deployable.__table__
_devices = models.Device.__table__
_attributes = models.Attribute.__table__
_handles = models.AttachHandle.__table__
_parents = _deployables.alias('parents')
_roots = _deployables.alias('roots')

_SELECT = sa.select(
    _deployables.c.id, _deployables.c.uuid, _deployables.c.name,
    _deployables.c.num_accelerators, _deployables.c.driver_name,
    _deployables.c.rp_uuid, _deployables.c.bitstream_id,
    _deployables.c.created_at, _deployables.c.updated_at,
    _devices.c.uuid.label('device_uuid'),
    _parents.c.uuid.label('parent_uuid'),
    _roots.c.uuid.label('root_uuid'),
    _devices.c.id.label('device_row_id'), _devices.c.hostname,
    _devices.c.health, _devices.c.health_reason,
    _devices.c.health_updated_at, _devices.c.quarantined,
    _devices.c.health_override,
).select_from(
    _deployables.join(_devices, _devices.c.id == _deployables.c.device_id)
    .outerjoin(_parents, _parents.c.id == _deployables.c.parent_id)
    .outerjoin(_roots, _roots.c.id == _deployables.c.root_id))


def list_deployables(context, name=None, device_uuid=None, rp_uuid=None,
                     usage=False, handles=False, **page):
    """(rows, attributes by deployable id, usage by device id, attach
    handles by deployable id): two queries for any page, two more with
    ``usage``, one more with ``handles``."""
    stmt = _SELECT
    for column, value in ((_deployables.c.name, name),
                          (_devices.c.uuid, device_uuid),
                          (_deployables.c.rp_uuid, rp_uuid)):
        if value is not None:
            stmt = stmt.where(column == value)
    with context.db.read_connection(context) as connection:
        stmt = pagination.paginate(connection, stmt, Deployable, **page)
        rows = connection.execute(stmt).all()
        return (rows, _attributes_of(connection, [r.id for r in rows]),
                _usage(connection, rows, usage),
                _handles_of(connection, [r.id for r in rows], handles))


def get_deployable(context, uuid, usage=False, handles=False):
    """(row, attributes, usage, handles) as ``list_deployables`` answers
    them; NotFound if there is none."""
    with context.db.read_connection(context) as connection:
        row = connection.execute(
            _SELECT.where(_deployables.c.uuid == uuid)).one_or_none()
        if row is None:
            raise exception.NotFound(
                'No deployable with uuid %s exists.' % uuid,
                code='cyborg.deployable.not_found')
        return (row, _attributes_of(connection, [row.id]),
                _usage(connection, [row], usage),
                _handles_of(connection, [row.id], handles))


def _handles_of(connection, deployable_ids, wanted):
    """{deployable id: [attach handle row, ...] by id}."""
    found = collections.defaultdict(list)
    if wanted and deployable_ids:
        for row in connection.execute(
                sa.select(_handles.c.deployable_id, _handles.c.uuid,
                          _handles.c.attach_type, _handles.c.state,
                          _handles.c.dirty_since,
                          _handles.c.last_scrub_result,
                          _handles.c.last_scrub_step,
                          _handles.c.last_scrub_message,
                          _handles.c.last_scrub_at,
                          _handles.c.last_scrub_seconds)
                .where(_handles.c.deployable_id.in_(deployable_ids))
                .order_by(_handles.c.deployable_id, _handles.c.id)):
            found[row.deployable_id].append(row)
    return found


def _usage(connection, rows, wanted):
    return device_usage.latest(
        connection, [(r.device_row_id, r.hostname) for r in rows]) \
        if wanted else {}


def _attributes_of(connection, deployable_ids):
    """{deployable id: [(key, value), ...] sorted by key}."""
    found = collections.defaultdict(list)
    if deployable_ids:
        rows = connection.execute(
            sa.select(_attributes.c.deployable_id, _attributes.c.key,
                      _attributes.c.value)
            .where(_attributes.c.deployable_id.in_(deployable_ids))
            .order_by(_attributes.c.deployable_id, _attributes.c.key))
        for deployable_id, key, value in rows:
            found[deployable_id].append((key, value))
    return found
