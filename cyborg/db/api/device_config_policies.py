"""Device configuration policies: made, read, changed and deleted, each
write with the status rows of its devices in the same transaction.

Writers of policies take turns (``locking``): whether two policies of
equal priority select one device is decided on what the others have
committed. The settings reach here in their stored form
(``device_config.kinds``); here they are held against the devices they
select (``device_config.device_checks``).

A policy deleted with ``restore_on_delete`` whose devices have something
to undo is kept, marked deleted, until the rollout has put them back
(``device_config_status.restore``): it selects nothing, is neither
listed nor read, and only its status and a DELETE (which retries the
failed restores) still find it.
"""

from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db.api import device_config_status as status_db
from cyborg.db.api import locking
from cyborg.device_config import device_checks
from cyborg.device_config import kinds
from cyborg.device_config import selection

policies = models.DeviceConfigPolicy.__table__
# What PATCH may change; the kind and the name stay.
MUTABLE = ('priority', 'host_selector', 'device_selector', 'settings')
_LOCK = 'device-config-policies'

# Two writers on MariaDB may lock the same empty index range; one is
# rolled back and runs again from its start.
_retry_on_deadlock = oslo_db_api.wrap_db_retry(
    max_retries=5, retry_on_deadlock=True, retry_interval=0.05,
    inc_retry_interval=True)


def _not_found(uuid):
    return exception.NotFound(
        'No device configuration policy with uuid %s exists.' % uuid,
        code='cyborg.device_config_policy.not_found')


def _all(connection):
    """Every policy not deleted."""
    return connection.execute(
        sa.select(policies).where(policies.c.deleted_at.is_(None))
        .order_by(policies.c.priority.desc(), policies.c.name)).all()


def _one(connection, uuid, deleted=False):
    """The policy ``uuid``; one deleted, whose devices are restored, only
    if ``deleted``."""
    where = [policies.c.uuid == uuid]
    if not deleted:
        where.append(policies.c.deleted_at.is_(None))
    row = connection.execute(sa.select(policies).where(*where)).one_or_none()
    if row is None:
        raise _not_found(uuid)
    return row


def list_policies(context):
    """Every policy, highest priority first."""
    with context.db.read_connection(context) as connection:
        return _all(connection)


def get_policy(context, uuid):
    with context.db.read_connection(context) as connection:
        return _one(connection, uuid)


def get_status(context, uuid):
    """(policy, its devices' status rows); NotFound if no such policy. A
    deleted policy's rows are those of the devices still restored."""
    with context.db.read_connection(context) as connection:
        policy = _one(connection, uuid, deleted=True)
        return policy, status_db.list_status(connection, policy.id)


def list_device_status(context, hostname=None, state=None, policy=None):
    """``device_config_status.DeviceStatus`` of every selected device,
    narrowed to a host, a state or a policy (its name or uuid) when
    given; NotFound if no such policy."""
    with context.db.read_connection(context) as connection:
        policy_id = None
        if policy is not None:
            policy_id = connection.execute(
                sa.select(policies.c.id).where(sa.or_(
                    policies.c.name == policy, policies.c.uuid == policy))
            ).scalar()
            if policy_id is None:
                raise exception.NotFound(
                    'No device configuration policy named %s exists.'
                    % policy, code='cyborg.device_config_policy.not_found')
        return status_db.list_devices(connection, hostname=hostname,
                                      state=state, policy_id=policy_id)


@_retry_on_deadlock
def create_policy(context, values):
    """Store a policy (``values``: uuid, name, priority, host_selector,
    device_selector, kind, settings, restore_on_delete) and make the
    devices it wins pending; (row, status changes)."""
    with context.db.writer(context) as session:
        connection = session.connection()
        locking.take_turns(connection, [_LOCK], policies, sa.true())
        taken = connection.execute(
            sa.select(policies.c.name, policies.c.uuid,
                      policies.c.deleted_at).where(sa.or_(
                policies.c.name == values['name'],
                policies.c.uuid == values['uuid']))).first()
        if taken is not None:
            field = 'name' if taken.name == values['name'] else 'uuid'
            raise _duplicate(field, values[field],
                             taken.deleted_at is not None)
        devices = _checked_selection(connection, values, values['kind'],
                                     _all(connection))
        try:
            connection.execute(sa.insert(policies).values(
                created_at=models.utcnow(), **values))
        except db_exc.DBDuplicateEntry as e:
            raise _duplicate('name', values['name']) from e
        changes = status_db.reconcile(connection, _all(connection), devices)
        return _one(connection, values['uuid']), changes


@_retry_on_deadlock
def update_policy(context, uuid, changes):
    """Change the ``MUTABLE`` fields given in ``changes``; the devices
    it no longer wins, and those it now wins, follow. (row, status
    changes), the changes None when the values were those stored."""
    with context.db.writer(context) as session:
        connection = session.connection()
        locking.take_turns(connection, [_LOCK], policies, sa.true())
        old = _one(connection, uuid)
        new = {name: changes.get(name, getattr(old, name))
               for name in MUTABLE}
        if all(new[name] == getattr(old, name) for name in MUTABLE):
            return old, None
        others = [p for p in _all(connection) if p.id != old.id]
        devices = _checked_selection(connection, dict(new, name=old.name),
                                     old.kind, others)
        connection.execute(sa.update(policies).where(
            policies.c.id == old.id).values(updated_at=models.utcnow(),
                                             **new))
        left = status_db.device_ids_of(connection, old.id) - {
            d.id for d in devices}
        affected = devices + status_db.device_facts(connection,
                                                    device_ids=left)
        written = status_db.reconcile(connection, _all(connection), affected)
        return _one(connection, uuid), written


@_retry_on_deadlock
def delete_policy(context, uuid):
    """Delete the policy and its status rows; the devices it won go to
    the next policy that selects them, if any. With ``restore_on_delete``
    those no other policy wins that have something to undo stay, pending
    to be put back as discovered, and the policy stays marked deleted
    until they are. A deleted policy's failed restores are made pending
    again. (row, status changes, whether restores are under way)."""
    with context.db.writer(context) as session:
        connection = session.connection()
        locking.take_turns(connection, [_LOCK], policies, sa.true())
        old = _one(connection, uuid, deleted=True)
        if old.deleted_at is not None:
            return old, status_db.retry_restores(connection, old), True
        others = [p for p in _all(connection) if p.id != old.id]
        won = status_db.device_facts(
            connection, device_ids=status_db.device_ids_of(connection,
                                                           old.id))
        kept, written = set(), []
        if old.restore_on_delete and old.kind not in kinds.NOTHING_TO_UNDO:
            taken = status_db.winners(others, won)
            kept, written = status_db.restore(
                connection, old, {d.id for d in won} - set(taken))
        written += status_db.remove(connection, old, keep=kept)
        if kept:
            connection.execute(sa.update(policies).where(
                policies.c.id == old.id).values(deleted_at=models.utcnow()))
        else:
            connection.execute(sa.delete(policies).where(
                policies.c.id == old.id))
        written += status_db.reconcile(
            connection, others, [d for d in won if d.id not in kept])
        return old, written, bool(kept)


@_retry_on_deadlock
def select_found_devices(context, hosts, skip=frozenset()):
    """Give each device found on ``hosts`` after the policies were
    written to the policy that wins it, as its creation would have: it
    becomes pending. A device whose winning policy's settings do not fit
    it gets no row (a policy is refused for such a device when it is
    written; here the device came later). ``skip``: device ids to leave
    out. (status changes, [(device facts, policy row, why unfit)])."""
    with context.db.read_connection(context) as connection:
        if not _wanted(connection, hosts, skip):
            return [], []
    with context.db.writer(context) as session:
        connection = session.connection()
        locking.take_turns(connection, [_LOCK], policies, sa.true())
        all_policies = _all(connection)
        found = {d.id: d for d in status_db.unheld_devices(connection, hosts)
                 if d.id not in skip}
        fitting, unfit = [], []
        for device_id, policy in status_db.winners(
                all_policies, found.values()).items():
            device = found[device_id]
            try:
                device_checks.check(policy.kind, policy.settings,
                                    policy.device_selector, [device])
            except exception.Invalid as e:
                unfit.append((device, policy, str(e)))
            else:
                fitting.append(device)
        return status_db.reconcile(connection, all_policies, fitting), unfit


def _wanted(connection, hosts, skip):
    """Whether a policy selects a device of ``hosts`` that has no row."""
    all_policies = _all(connection)
    if not all_policies or not hosts:
        return False
    found = [d for d in status_db.unheld_devices(connection, hosts)
             if d.id not in skip]
    return bool(status_db.winners(all_policies, found))


def _checked_selection(connection, values, kind, others):
    """The devices the policy of ``values`` selects, once its settings
    are held against them and no policy of ``others`` of its priority
    selects one of them too."""
    devices = status_db.selected(connection, values['host_selector'],
                                 values['device_selector'])
    device_checks.check(kind, values['settings'], values['device_selector'],
                        devices)
    for other in others:
        if other.priority != values['priority']:
            continue
        for device in devices:
            if selection.selects(other.host_selector, other.device_selector,
                                 device):
                raise exception.Conflict(
                    'The policy %s, of the same priority %d, selects '
                    'device %s on %s too; give one of them another '
                    'priority.' % (other.name, other.priority, device.uuid,
                                   device.hostname),
                    code='cyborg.device_config_policy.priority_conflict')
    return devices


def _duplicate(field, value, deleted=False):
    return exception.Conflict(
        'A device configuration policy with %s %s already exists%s.'
        % (field, value, ', deleted: its devices are being put back as '
           'discovered' if deleted else ''),
        code='cyborg.device_config_policy.duplicate')
