"""Attach handles between tenants: dirty until scrubbed and verified.

A handle is ``free``, ``in_use`` (an ARQ holds it), ``dirty`` (released
by its ARQ, its deployable's driver scrubs: the deployable has the
driver attribute ``scrub_method``) or ``scrubbing`` (a conductor asked
the host's agent to scrub it). ``in_use`` is True in every state but
``free``: allocation takes only a free handle, and Placement reserves one
unit for each handle taken by no ARQ (``ProviderDeployable.dirty``).

- ``release_handles``: in the transaction that releases the ARQs (unbind,
  delete), their handles become dirty, or free where nothing scrubs
  them, and the hosts of dirty ones must sync Placement again (their
  desired generation is bumped in that transaction). So a crash at any
  point leaves a handle either held, or dirty and scrubbed later: never
  dirty and free.
- ``start``: dirty → scrubbing, a compare-and-set that one conductor wins;
  a scrub left ``scrubbing`` past its time (its conductor or agent died)
  is taken over the same way.
- ``finish``: scrubbing → free (verified) or back to dirty (failed, with
  the step and why in ``last_scrub_*``; tried again after a while), by
  the conductor that started it only.
"""

import dataclasses
import datetime

import sqlalchemy as sa
from sqlalchemy import orm

from cyborg.db import models
from cyborg.db.api import host_sync_states

FREE = 'free'
IN_USE = 'in_use'
DIRTY = 'dirty'
SCRUBBING = 'scrubbing'
STATES = (FREE, IN_USE, DIRTY, SCRUBBING)
# Not free, and held by no ARQ.
WAITING = (DIRTY, SCRUBBING)

PASSED = 'passed'
FAILED = 'failed'

# The driver attribute of a deployable whose handles are scrubbed: the
# method's name (``flr``, ``mdev-destroy``, ...).
SCRUB_ATTRIBUTE = 'scrub_method'
DRIVER_ORIGIN = 'driver'

MAX_MESSAGE = 2000
MAX_STEP = 64

Handle = models.AttachHandle
Deployable = models.Deployable
Device = models.Device
Attribute = models.Attribute
ControlPath = models.ControlPathID


def _scrub_method():
    """The SELECT of the scrub method of a handle's deployable (its
    driver's ``scrub_method`` attribute), correlated to the handle."""
    return sa.select(Attribute.value).where(
        Attribute.deployable_id == Handle.deployable_id,
        Attribute.key == SCRUB_ATTRIBUTE,
        Attribute.origin == DRIVER_ORIGIN)


def _scrubbed():
    """The clause of handles whose deployable's driver scrubs them."""
    return _scrub_method().exists()


def release_handles(session, handle_ids):
    """Handles given back by their ARQs, in the caller's transaction:
    dirty where scrubbed, else free. Returns how many became dirty."""
    handle_ids = [h for h in handle_ids if h is not None]
    if not handle_ids:
        return 0
    connection = (session.connection() if isinstance(session, orm.Session)
                  else session)
    now = models.utcnow()
    dirty = connection.execute(
        sa.update(Handle).where(Handle.id.in_(handle_ids), _scrubbed())
        .values(state=DIRTY, in_use=True, dirty_since=now,
                updated_at=now)).rowcount
    connection.execute(
        sa.update(Handle).where(Handle.id.in_(handle_ids),
                                Handle.state != DIRTY)
        .values(state=FREE, in_use=False, updated_at=now))
    if dirty:
        for hostname in _hosts_of(connection, handle_ids):
            host_sync_states.bump_desired(connection, hostname)
    return dirty


def _hosts_of(connection, handle_ids):
    return connection.execute(
        sa.select(Device.hostname).distinct()
        .select_from(Handle)
        .join(Deployable, Deployable.id == Handle.deployable_id)
        .join(Device, Device.id == Deployable.device_id)
        .where(Handle.id.in_(handle_ids))).scalars().all()


@dataclasses.dataclass(frozen=True)
class Due:
    """A handle waiting for a scrub, with what asking its agent needs."""

    id: int
    uuid: str
    state: str
    attach_type: str
    attach_info: dict
    scrub_started_at: object
    scrub_conductor: str | None
    method: str
    driver_name: str
    hostname: str
    device_id: int
    device_uuid: str
    cpid_info: str  # the device's control path, JSON text


def due(context, retry_after, now=None):
    """The handles that may need a scrub now: dirty ones never tried, or
    whose last try failed ``retry_after`` seconds ago or more, and every
    scrubbing one, with its start (whether its time is up, whoever ran
    it having died, depends on its method: the caller judges). Oldest
    first."""
    now = now or models.utcnow()
    retry_cutoff = now - datetime.timedelta(seconds=retry_after)
    method = _scrub_method().limit(1).scalar_subquery()
    # A device is known by its first control path.
    cpid_info = (sa.select(ControlPath.cpid_info).where(
        ControlPath.device_id == Device.id).order_by(ControlPath.id)
        .limit(1).scalar_subquery())
    stmt = (sa.select(Handle.id, Handle.uuid, Handle.state,
                      Handle.attach_type, Handle.attach_info,
                      Handle.scrub_started_at, Handle.scrub_conductor,
                      method.label('method'),
                      Deployable.driver_name, Device.hostname, Device.id,
                      Device.uuid, cpid_info.label('cpid_info'))
            .select_from(Handle)
            .join(Deployable, Deployable.id == Handle.deployable_id)
            .join(Device, Device.id == Deployable.device_id)
            .where(sa.or_(
                sa.and_(Handle.state == DIRTY, sa.or_(
                    Handle.last_scrub_result.is_(None),
                    Handle.last_scrub_result == PASSED,
                    Handle.last_scrub_at <= retry_cutoff)),
                Handle.state == SCRUBBING))
            .order_by(Handle.dirty_since, Handle.id))
    with context.db.read_connection(context) as connection:
        return [Due(*row) for row in connection.execute(stmt)]


def start(context, due_handle, conductor):
    """Take ``due_handle`` (a ``Due``) for a scrub by ``conductor``: True
    if this call won it (it was still as read)."""
    where = [Handle.id == due_handle.id, Handle.state == due_handle.state]
    if due_handle.state == SCRUBBING:
        where.append(Handle.scrub_started_at == due_handle.scrub_started_at)
    with context.db.write_connection(context) as connection:
        return connection.execute(
            sa.update(Handle).where(*where).values(
                state=SCRUBBING, scrub_conductor=conductor,
                scrub_started_at=models.utcnow())).rowcount == 1


def finish(context, handle_id, conductor, passed, seconds, step=None,
           message=None):
    """Record the scrub ``conductor`` ran: the handle free if it
    ``passed``, else dirty again with the ``step`` that failed and
    ``message``. False if another conductor took the scrub over
    meanwhile (its result is the one kept)."""
    now = models.utcnow()
    values = {'scrub_conductor': None, 'scrub_started_at': None,
              'last_scrub_result': PASSED if passed else FAILED,
              'last_scrub_step': (step or '')[:MAX_STEP] or None,
              'last_scrub_message': (message or '')[:MAX_MESSAGE] or None,
              'last_scrub_at': now, 'last_scrub_seconds': seconds,
              'updated_at': now}
    if passed:
        values.update(state=FREE, in_use=False, dirty_since=None)
    else:
        values.update(state=DIRTY)
    with context.db.write_connection(context) as connection:
        done = connection.execute(
            sa.update(Handle).where(
                Handle.id == handle_id, Handle.state == SCRUBBING,
                Handle.scrub_conductor == conductor).values(**values)
        ).rowcount == 1
        if done and passed:
            # Its unit is offered again.
            for hostname in _hosts_of(connection, [handle_id]):
                host_sync_states.bump_desired(connection, hostname)
    return done


def failed_on(device_id):
    """The clause: the device (a column or value of its id) has a handle
    whose last scrub failed and that is not free yet. Its quarantine
    stays until a scrub passes."""
    return sa.exists().where(
        Deployable.device_id == device_id,
        Handle.deployable_id == Deployable.id,
        Handle.state.in_(WAITING),
        Handle.last_scrub_result == FAILED)
