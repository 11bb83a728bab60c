"""Attribute queries: key/value facts about deployables.

A deployable is named by its uuid, or by its row id for the clients that
send one (python-cyborgclient posts ``"deployable_id": "1"``).
"""

import uuid as uuidlib

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db.api import pagination

Attribute = models.Attribute
_attributes = Attribute.__table__
_deployables = models.Deployable.__table__

_SELECT = sa.select(
    _attributes.c.uuid, _attributes.c.key, _attributes.c.value,
    _attributes.c.created_at, _attributes.c.updated_at,
    _deployables.c.uuid.label('deployable_uuid'),
).select_from(_attributes.join(
    _deployables, _deployables.c.id == _attributes.c.deployable_id))


def _deployable_is(deployable):
    """The condition on deployables for a uuid (str) or a row id (int)."""
    if isinstance(deployable, int):
        return _deployables.c.id == deployable
    return _deployables.c.uuid == deployable


def list_attributes(context, deployable=None, key=None, **page):
    """Attributes as read-only rows, filtered and paged in SQL."""
    stmt = _SELECT
    if deployable is not None:
        stmt = stmt.where(_deployable_is(deployable))
    if key is not None:
        stmt = stmt.where(_attributes.c.key == key)
    with context.db.read_connection(context) as connection:
        stmt = pagination.paginate(connection, stmt, Attribute, **page)
        return connection.execute(stmt).all()


def get_attribute(context, uuid):
    with context.db.read_connection(context) as connection:
        row = connection.execute(
            _SELECT.where(_attributes.c.uuid == uuid)).one_or_none()
    if row is None:
        raise exception.NotFound('No attribute with uuid %s exists.' % uuid,
                                 code='cyborg.attribute.not_found')
    return row


def create_attribute(context, deployable, key, value):
    """Add ``key`` = ``value`` to a deployable; Conflict if it has ``key``.

    Returns the new attribute's uuid.
    """
    uuid = str(uuidlib.uuid4())
    try:
        with context.db.writer(context) as session:
            deployable_id = session.execute(
                sa.select(_deployables.c.id).where(
                    _deployable_is(deployable))).scalar_one_or_none()
            if deployable_id is None:
                raise exception.Invalid(
                    'No deployable with %s %s exists.'
                    % ('id' if isinstance(deployable, int) else 'uuid',
                       deployable), code='cyborg.deployable.not_found')
            taken = session.execute(sa.select(Attribute.id).where(
                Attribute.deployable_id == deployable_id,
                Attribute.key == key)).first()
            if taken is not None:
                raise _duplicate(deployable, key)
            session.add(Attribute(uuid=uuid, deployable_id=deployable_id,
                                  key=key, value=value))
    except db_exc.DBDuplicateEntry as e:
        # Lost a race with another request adding the same key.
        raise _duplicate(deployable, key) from e
    except db_exc.DBReferenceError as e:
        # The deployable went away meanwhile.
        raise exception.Invalid(
            'No deployable %s exists.' % deployable,
            code='cyborg.deployable.not_found') from e
    return uuid


def delete_attribute(context, uuid):
    with context.db.writer(context) as session:
        deleted = session.execute(
            sa.delete(Attribute).where(Attribute.uuid == uuid)).rowcount
    if not deleted:
        raise exception.NotFound('No attribute with uuid %s exists.' % uuid,
                                 code='cyborg.attribute.not_found')


def _duplicate(deployable, key):
    return exception.Conflict(
        'Deployable %s already has an attribute %s.' % (deployable, key),
        code='cyborg.attribute.duplicate')
