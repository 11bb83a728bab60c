"""Per-host Placement sync state: what the database wants, what was synced.

Every transaction that changes what a host's resource providers should
hold (a report with changes, a device enabled or disabled) calls
``bump_desired`` in the same transaction, so that the change and the news
that Placement must follow commit together. A sync reads the desired
generation *before* the host's rows, makes Placement match them, then
records that generation as synced with a compare that never lowers it
(``record_synced``). A host needs a sync while synced < desired; whichever
conductor process looks, it reads the same answer.

All functions take a SQLAlchemy Core connection inside the caller's
transaction, as ``cyborg.db.api.inventory`` does.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from cyborg.db import models

states = models.HostSyncState.__table__
_devices = models.Device.__table__

# Keeps the error text of a row readable and bounded.
MAX_ERROR = 2000


def _insert_if_absent(connection, values):
    """INSERT the row unless the hostname has one; True if inserted.

    Concurrent first writers of one host race here; the loser's insert
    is a no-op rather than an error that would abort its transaction
    (PostgreSQL cannot go on after a failed statement).
    """
    values = dict(values, created_at=models.utcnow())
    dialect = connection.dialect.name
    if dialect == 'postgresql':
        stmt = postgresql.insert(states).values(**values) \
            .on_conflict_do_nothing(index_elements=['hostname'])
    elif dialect == 'mysql':
        stmt = mysql.insert(states).values(**values).prefix_with('IGNORE')
    else:
        stmt = sqlite.insert(states).values(**values) \
            .on_conflict_do_nothing(index_elements=['hostname'])
    return connection.execute(stmt).rowcount > 0


def bump_desired(connection, hostname):
    """Say that Placement must follow a change of ``hostname``: one
    UPDATE, and an INSERT the first time."""
    bump = (sa.update(states).where(states.c.hostname == hostname)
            .values(desired_generation=states.c.desired_generation + 1,
                    updated_at=models.utcnow()))
    if connection.execute(bump).rowcount:
        return
    if not _insert_if_absent(connection, {'hostname': hostname,
                                          'desired_generation': 1,
                                          'synced_generation': 0}):
        connection.execute(bump)  # inserted by someone else meanwhile


def ensure(connection, hostname):
    """The host's state row, made (out of sync) if the host has none
    (rows written before these states existed)."""
    row = read(connection, hostname)
    if row is None:
        _insert_if_absent(connection, {'hostname': hostname,
                                       'desired_generation': 1,
                                       'synced_generation': 0})
        row = read(connection, hostname)
    return row


def read(connection, hostname):
    """The host's state row, or None."""
    return connection.execute(
        sa.select(states).where(states.c.hostname == hostname)
    ).one_or_none()


def in_sync(row):
    return row is not None and row.synced_generation >= row.desired_generation


def record_synced(connection, hostname, generation, compute_node_uuid):
    """Placement held the rows of ``generation``: never lowers the synced
    generation (a slower sync of an older state does not undo a newer
    one). True if recorded."""
    result = connection.execute(
        sa.update(states)
        .where(states.c.hostname == hostname,
               states.c.synced_generation < generation)
        .values(synced_generation=generation,
                compute_node_uuid=compute_node_uuid,
                synced_at=models.utcnow(), last_error=None,
                updated_at=models.utcnow()))
    return result.rowcount > 0


def record_compute_node(connection, hostname, compute_node_uuid):
    connection.execute(
        sa.update(states)
        .where(states.c.hostname == hostname,
               sa.or_(states.c.compute_node_uuid.is_(None),
                      states.c.compute_node_uuid != compute_node_uuid))
        .values(compute_node_uuid=compute_node_uuid))


def record_error(connection, hostname, error):
    """Why the host's last sync did not finish (shown to operators)."""
    connection.execute(
        sa.update(states).where(states.c.hostname == hostname)
        .values(last_error=str(error)[:MAX_ERROR],
                updated_at=models.utcnow()))


def list_hosts(connection):
    """``{hostname: state row or None}`` of every host that has devices
    or a state row: two SELECTs."""
    found = {row.hostname: row
             for row in connection.execute(sa.select(states))}
    for (hostname,) in connection.execute(
            sa.select(_devices.c.hostname).distinct()):
        found.setdefault(hostname, None)
    return found


def pending_hosts(connection):
    """Hostnames whose Placement sync is behind the database."""
    return [row.hostname for row in connection.execute(
        sa.select(states.c.hostname).where(
            states.c.synced_generation < states.c.desired_generation)
        .order_by(states.c.hostname))]
