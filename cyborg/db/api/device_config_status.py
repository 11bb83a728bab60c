"""Each selected device's configuration status, kept in step with the
policies.

``reconcile`` gives each device of a set to the policy that wins it (the
highest priority of those that select it) and writes its status row: a
new winner, or new settings of the same winner, make the row pending
again; a device no policy selects loses its row. The facts that
selection and the checks read come from ``device_facts``. All functions
take a Core connection inside the caller's transaction.

A device whose row is draining, applying or failed (``HELD``) is out of
scheduling: its providers are fully reserved in Placement and no new
bind takes one of its handles. Every write that moves a row into or out
of ``HELD`` bumps its host's desired Placement generation in the same
transaction, so that a sync follows.

The rollout (``cyborg.conductor.device_config``) moves rows along with
``start_drain`` (pending to draining, at most ``limit`` hosts of a policy
at once) and ``move`` (a compare-and-set from one state to the next).

A policy deleted with ``restore_on_delete`` keeps, until they are done,
the rows of the devices it leaves with something to undo (``restore``):
they go through the same states with nothing wanted (shown as a null
``wanted_settings``), and a restored one loses its row
(``finish_restore``); the policy's row goes with its last one.
"""

import dataclasses
import json

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import host_sync_states
from cyborg.device_config import kinds
from cyborg.device_config import selection
from cyborg.device_config import status as config_status
from cyborg.objects import inventory

PENDING = config_status.PENDING
DRAINING = config_status.DRAINING
APPLYING = config_status.APPLYING
APPLIED = config_status.APPLIED
FAILED = config_status.FAILED
HELD = config_status.HELD
# Rows that count against a policy's limit of hosts draining at once.
_ROLLING = (DRAINING, APPLYING)

status = models.DeviceConfigStatus.__table__
_policies = models.DeviceConfigPolicy.__table__
_handles = models.AttachHandle.__table__
_devices = models.Device.__table__
_controlpaths = models.ControlPathID.__table__
_deployables = models.Deployable.__table__


@dataclasses.dataclass(frozen=True)
class Change:
    """A status row made, changed or removed, for its notification."""

    device_uuid: str
    hostname: str
    policy_uuid: str
    policy_name: str
    old_state: str | None  # None: the row is new
    state: str | None  # None: the row is gone
    wanted_settings: dict


def device_facts(connection, hosts=None, vendor_id=None, driver=None,
                 device_ids=None):
    """``selection.DeviceFacts`` of the devices present on their hosts,
    narrowed in SQL by what is given: exact host names, a vendor, a
    driver of one of their deployables, device ids."""
    where = [_devices.c.missing_since.is_(None)]
    if hosts is not None:
        where.append(_devices.c.hostname.in_(hosts))
    if vendor_id is not None:
        where.append(sa.func.lower(_devices.c.vendor) == vendor_id)
    if driver is not None:
        where.append(sa.exists().where(
            _deployables.c.device_id == _devices.c.id,
            _deployables.c.driver_name == driver))
    if device_ids is not None:
        where.append(_devices.c.id.in_(sorted(device_ids)))
    rows = connection.execute(
        sa.select(_devices.c.id, _devices.c.uuid, _devices.c.hostname,
                  _devices.c.vendor, _devices.c.std_board_info)
        .where(*where)).all()
    if not rows:
        return []
    chosen = sa.select(_devices.c.id).where(*where).scalar_subquery()
    addresses = {}
    for device_id, info in connection.execute(
            sa.select(_controlpaths.c.device_id, _controlpaths.c.cpid_info)
            .where(_controlpaths.c.cpid_type == 'PCI',
                   _controlpaths.c.device_id.in_(chosen))):
        addresses.setdefault(device_id, inventory.controlpath_address(
            'PCI', json.loads(info)))
    drivers = {}
    for device_id, name in connection.execute(
            sa.select(_deployables.c.device_id, _deployables.c.driver_name)
            .where(_deployables.c.device_id.in_(chosen),
                   _deployables.c.driver_name.is_not(None)).distinct()):
        drivers.setdefault(device_id, set()).add(name)
    return [_facts(row, addresses.get(row.id),
                   frozenset(drivers.get(row.id, ()))) for row in rows]


def _facts(row, address, drivers):
    board = row.std_board_info or {}
    total = board.get('sriov_totalvfs')
    mdev_types = board.get('mdev_types')
    return selection.DeviceFacts(
        id=row.id, uuid=row.uuid, hostname=row.hostname,
        vendor_id=(row.vendor or '').lower(),
        product_id=(board.get('product_id') or '').lower() or None,
        drivers=drivers, pci_address=address,
        sriov_totalvfs=int(total) if str(total).isdigit() else None,
        mdev_types=(tuple(mdev_types) if isinstance(mdev_types, list)
                    else None))


def selected(connection, hosts, selector):
    """The facts of the devices a policy of ``hosts`` and ``selector``
    selects now."""
    candidates = device_facts(
        connection, hosts=selection.exact_hosts(hosts),
        vendor_id=selector.get('vendor_id'), driver=selector.get('driver'))
    return [d for d in candidates if selection.selects(hosts, selector, d)]


def device_ids_of(connection, policy_id):
    return set(connection.execute(
        sa.select(status.c.device_id).where(status.c.policy_id == policy_id)
    ).scalars())


def winners(all_policies, devices):
    """{device id: the policy row that wins it} of ``devices``; equal
    priorities (possible only for devices found after both policies were
    made) go to the older policy."""
    won = {}
    for device in devices:
        choice = [p for p in all_policies
                  if selection.selects(p.host_selector, p.device_selector,
                                       device)]
        if choice:
            won[device.id] = max(choice, key=lambda p: (p.priority, -p.id))
    return won


def reconcile(connection, all_policies, devices):
    """Bring the status rows of ``devices`` (facts) in step with
    ``all_policies`` (rows, as they are once the transaction commits);
    the ``Change`` of each row written."""
    if not devices:
        return []
    won = winners(all_policies, devices)
    by_id = {p.id: p for p in all_policies}
    ids = [d.id for d in devices]
    rows = {r.device_id: r for r in connection.execute(
        sa.select(status).where(status.c.device_id.in_(ids)))}
    now = models.utcnow()
    changes = []
    held_changed = set()
    for device in devices:
        row, policy = rows.get(device.id), won.get(device.id)
        if policy is None:
            if row is not None:
                connection.execute(sa.delete(status).where(
                    status.c.id == row.id))
                if row.state in HELD:
                    held_changed.add(device.hostname)
                changes.append(_change(device, by_id[row.policy_id],
                                       row.state, None, row.wanted_settings))
            continue
        if row is None:
            connection.execute(sa.insert(status).values(
                device_id=device.id, policy_id=policy.id,
                wanted_settings=policy.settings, state=PENDING,
                created_at=now))
            changes.append(_change(device, policy, None, PENDING,
                                   policy.settings))
        elif (row.policy_id, row.wanted_settings) != (policy.id,
                                                      policy.settings):
            connection.execute(sa.update(status).where(
                status.c.id == row.id).values(
                policy_id=policy.id, wanted_settings=policy.settings,
                state=PENDING, failed_task=None, message=None,
                updated_at=now))
            if row.state in HELD:
                held_changed.add(device.hostname)
            changes.append(_change(device, policy, row.state, PENDING,
                                   policy.settings))
    _bump(connection, held_changed)
    return changes


def _bump(connection, hostnames):
    for hostname in sorted(hostnames):
        host_sync_states.bump_desired(connection, hostname)


def _change(device, policy, old_state, state, wanted):
    return Change(device_uuid=device.uuid, hostname=device.hostname,
                  policy_uuid=policy.uuid, policy_name=policy.name,
                  old_state=old_state, state=state, wanted_settings=wanted)


def remove(connection, policy, keep=()):
    """Delete the status rows of ``policy`` (a row) but those of the
    device ids ``keep``; their ``Change``s."""
    mine = [status.c.policy_id == policy.id,
            status.c.device_id.not_in(sorted(keep))]
    rows = connection.execute(
        sa.select(status.c.state, status.c.wanted_settings,
                  _devices.c.uuid, _devices.c.hostname)
        .join(_devices, _devices.c.id == status.c.device_id)
        .where(*mine)).all()
    connection.execute(sa.delete(status).where(*mine))
    _bump(connection, {r.hostname for r in rows if r.state in HELD})
    return [Change(device_uuid=r.uuid, hostname=r.hostname,
                   policy_uuid=policy.uuid, policy_name=policy.name,
                   old_state=r.state, state=None,
                   wanted_settings=r.wanted_settings) for r in rows]


def restore(connection, policy, device_ids):
    """Make pending again, to be put back as discovered, the rows of
    ``policy`` (a row, being deleted) of ``device_ids`` whose device has
    something to undo: settings applied, or a change under way or failed
    (its teardown then takes the settings that change wanted). The device
    ids kept, and their ``Change``s; the other rows are left as they
    are."""
    rows = connection.execute(
        sa.select(status.c.id, status.c.device_id, status.c.state,
                  status.c.wanted_settings, status.c.applied_settings,
                  _devices.c.uuid, _devices.c.hostname)
        .join(_devices, _devices.c.id == status.c.device_id)
        .where(status.c.policy_id == policy.id,
               status.c.device_id.in_(sorted(device_ids)))).all()
    now = models.utcnow()
    kept, changes, held_changed = set(), [], set()
    for row in rows:
        undo = row.applied_settings
        if row.state in (APPLYING, FAILED):
            undo = undo or row.wanted_settings
        if undo is None:
            continue
        connection.execute(sa.update(status).where(
            status.c.id == row.id).values(
            state=PENDING, applied_settings=undo, failed_task=None,
            message=None, updated_at=now))
        if row.state in HELD:
            held_changed.add(row.hostname)
        kept.add(row.device_id)
        changes.append(Change(
            device_uuid=row.uuid, hostname=row.hostname,
            policy_uuid=policy.uuid, policy_name=policy.name,
            old_state=row.state, state=PENDING, wanted_settings=None))
    _bump(connection, held_changed)
    return kept, changes


def retry_restores(connection, policy):
    """Make the failed restores of ``policy`` (a row, being deleted)
    pending again; their ``Change``s."""
    rows = connection.execute(
        sa.select(status.c.id, _devices.c.uuid, _devices.c.hostname)
        .join(_devices, _devices.c.id == status.c.device_id)
        .where(status.c.policy_id == policy.id,
               status.c.state == FAILED)).all()
    for row in rows:
        connection.execute(sa.update(status).where(
            status.c.id == row.id, status.c.state == FAILED).values(
            state=PENDING, failed_task=None, message=None,
            updated_at=models.utcnow()))
    _bump(connection, {r.hostname for r in rows})
    return [Change(device_uuid=r.uuid, hostname=r.hostname,
                   policy_uuid=policy.uuid, policy_name=policy.name,
                   old_state=FAILED, state=PENDING, wanted_settings=None)
            for r in rows]


def restored_policies(connection):
    """The ids of deleted policies none of whose devices is still to be
    restored."""
    return list(connection.execute(
        sa.select(_policies.c.id).where(
            _policies.c.deleted_at.is_not(None),
            ~sa.exists().where(status.c.policy_id == _policies.c.id))
    ).scalars())


def forget_restored(connection, policy_id):
    """Delete the row of policy ``policy_id`` if it is deleted and none
    of its devices is still to be restored; whether it was."""
    return connection.execute(sa.delete(_policies).where(
        _policies.c.id == policy_id, _policies.c.deleted_at.is_not(None),
        ~sa.exists().where(status.c.policy_id == policy_id))).rowcount == 1


def _wanted_column():
    """The wanted settings as shown: null while the device is restored."""
    return sa.case((_policies.c.deleted_at.is_(None),
                    status.c.wanted_settings),
                   else_=sa.null()).label('wanted_settings')


def list_status(connection, policy_id):
    """The status rows of the devices ``policy_id`` wins (or restores,
    with a null ``wanted_settings``), with each device's uuid and host,
    by host and device."""
    return connection.execute(
        sa.select(*[c for c in status.c if c.name != 'wanted_settings'],
                  _wanted_column(), _devices.c.uuid.label('device_uuid'),
                  _devices.c.hostname)
        .join(_devices, _devices.c.id == status.c.device_id)
        .join(_policies, _policies.c.id == status.c.policy_id)
        .where(status.c.policy_id == policy_id)
        .order_by(_devices.c.hostname, _devices.c.uuid)).all()


@dataclasses.dataclass(frozen=True)
class DeviceStatus:
    """A status row with what an operator needs to find its device."""

    hostname: str
    device_uuid: str
    address: str | None  # the PCI address, else another control path
    policy_uuid: str
    policy_name: str
    state: str
    wanted_settings: dict | None  # None: being put back as discovered
    applied_settings: dict | None
    failed_task: str | None
    message: str | None
    created_at: object
    updated_at: object


def list_devices(connection, hostname=None, state=None, policy_id=None):
    """``DeviceStatus`` of every status row, narrowed to a host, a state
    or a policy when given, by host and address."""
    where = []
    if hostname is not None:
        where.append(_devices.c.hostname == hostname)
    if state is not None:
        where.append(status.c.state == state)
    if policy_id is not None:
        where.append(status.c.policy_id == policy_id)
    rows = connection.execute(
        sa.select(status.c.device_id, _devices.c.hostname, _devices.c.uuid,
                  _policies.c.uuid, _policies.c.name, status.c.state,
                  _wanted_column(), status.c.applied_settings,
                  status.c.failed_task, status.c.message,
                  status.c.created_at, status.c.updated_at)
        .join(_devices, _devices.c.id == status.c.device_id)
        .join(_policies, _policies.c.id == status.c.policy_id)
        .where(*where)).all()
    addresses = _addresses(connection, [row[0] for row in rows])
    return sorted(
        (DeviceStatus(row[1], row[2], addresses.get(row[0]), *row[3:])
         for row in rows),
        key=lambda d: (d.hostname, d.address or '', d.device_uuid))


def _addresses(connection, device_ids):
    """{device id: its address}, a PCI control path's first."""
    pci, other = {}, {}
    for start in range(0, len(device_ids), 500):  # bounded IN lists
        for device_id, kind, info in connection.execute(
                sa.select(_controlpaths.c.device_id, _controlpaths.c.cpid_type,
                          _controlpaths.c.cpid_info)
                .where(_controlpaths.c.device_id.in_(
                    device_ids[start:start + 500]))
                .order_by(_controlpaths.c.id)):
            chosen = pci if kind == 'PCI' else other
            chosen.setdefault(device_id, inventory.controlpath_address(
                kind, json.loads(info)))
    return {**other, **pci}


# -- the rollout ---------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Work:
    """A status row as the rollout needs it."""

    id: int
    state: str
    device_id: int
    device_uuid: str
    hostname: str
    controlpath_info: dict | None
    policy_id: int
    policy_uuid: str
    policy_name: str
    kind: str
    wanted_settings: dict  # as stored, which ``move`` compares
    applied_settings: dict | None
    restoring: bool = False  # the policy is deleted: put back as found


def work_of_hosts(connection, hostnames, states):
    """The rows in ``states`` of devices on ``hostnames`` (present ones),
    oldest first."""
    if not hostnames:
        return []
    rows = connection.execute(
        sa.select(status.c.id, status.c.state, status.c.device_id,
                  _devices.c.uuid, _devices.c.hostname,
                  _controlpaths.c.cpid_info, status.c.policy_id,
                  _policies.c.uuid, _policies.c.name, _policies.c.kind,
                  status.c.wanted_settings, status.c.applied_settings,
                  _policies.c.deleted_at.is_not(None))
        .join(_devices, _devices.c.id == status.c.device_id)
        .join(_policies, _policies.c.id == status.c.policy_id)
        .outerjoin(_controlpaths, sa.and_(
            _controlpaths.c.device_id == _devices.c.id,
            _controlpaths.c.cpid_type == 'PCI'))
        .where(_devices.c.hostname.in_(sorted(hostnames)),
               _devices.c.missing_since.is_(None),
               status.c.state.in_(states))
        .order_by(status.c.id)).all()
    seen = set()
    work = []
    for row in rows:
        if row[0] in seen:  # a device with several PCI control paths
            continue
        seen.add(row[0])
        info = json.loads(row[5]) if row[5] else None
        work.append(Work(*row[:5], info, *row[6:]))
    return work


def hosts_of(connection):
    """Every host with a status row."""
    return set(connection.execute(
        sa.select(_devices.c.hostname).distinct()
        .join(status, status.c.device_id == _devices.c.id)).scalars())


def hosts_with_devices(connection):
    """Every host with a present device."""
    return set(connection.execute(
        sa.select(_devices.c.hostname).distinct()
        .where(_devices.c.missing_since.is_(None))).scalars())


def unheld_devices(connection, hosts):
    """The facts of the present devices of ``hosts`` that no status row
    holds: found after the policies that select them were written."""
    held = set(connection.execute(
        sa.select(status.c.device_id).join(
            _devices, status.c.device_id == _devices.c.id)
        .where(_devices.c.hostname.in_(sorted(hosts)))).scalars())
    return [d for d in device_facts(connection, hosts=sorted(hosts))
            if d.id not in held]


def start_drain(connection, work, limit):
    """Move ``work`` from pending to draining unless ``limit`` other
    hosts of its policy are draining or applying already; whether it
    moved. The policy's row is locked first, so that the rollouts of one
    policy on several hosts (several conductors) take turns here."""
    connection.execute(sa.select(_policies.c.id).where(
        _policies.c.id == work.policy_id).with_for_update())
    busy = connection.execute(
        sa.select(sa.func.count(sa.distinct(_devices.c.hostname)))
        .select_from(status.join(_devices,
                                 _devices.c.id == status.c.device_id))
        .where(status.c.policy_id == work.policy_id,
               status.c.state.in_(_ROLLING),
               _devices.c.hostname != work.hostname)).scalar_one()
    if busy >= limit:
        return False
    return move(connection, work, PENDING, DRAINING)


def move(connection, work, from_state, to_state, **values):
    """Compare-and-set the row of ``work`` from ``from_state`` to
    ``to_state`` (with ``values``) if it still wants the same settings;
    whether it moved."""
    moved = connection.execute(
        sa.update(status).where(
            status.c.id == work.id, status.c.state == from_state,
            status.c.policy_id == work.policy_id,
            # The text as written: a reread document dumps the same.
            status.c.wanted_settings == work.wanted_settings)
        .values(state=to_state, updated_at=models.utcnow(), **values))
    if moved.rowcount != 1:
        return False
    if (from_state in HELD) != (to_state in HELD):
        host_sync_states.bump_desired(connection, work.hostname)
    return True


def finish_restore(connection, work):
    """Delete the row of ``work``, restored, if it is still applying the
    restore (compare-and-set), and its policy's row with its last one;
    whether it was deleted."""
    gone = connection.execute(
        sa.delete(status).where(
            status.c.id == work.id, status.c.state == APPLYING,
            status.c.policy_id == work.policy_id,
            status.c.wanted_settings == work.wanted_settings))
    if gone.rowcount != 1:
        return False
    host_sync_states.bump_desired(connection, work.hostname)
    forget_restored(connection, work.policy_id)
    return True


def handles_in_use(connection, device_id):
    """How many attach handles of the device are in use."""
    return connection.execute(
        sa.select(sa.func.count()).select_from(_handles.join(
            _deployables, _deployables.c.id == _handles.c.deployable_id))
        .where(_deployables.c.device_id == device_id,
               _handles.c.in_use == sa.true())).scalar_one()


def state_of_deployable(connection, deployable_id):
    """The configuration state of the deployable's device; None if no
    policy selects it."""
    return connection.execute(
        sa.select(status.c.state)
        .join(_deployables, _deployables.c.device_id == status.c.device_id)
        .where(_deployables.c.id == deployable_id)).scalar_one_or_none()


def applied_base_image(context, device_id):
    """The settings of the FPGA base image that the device's
    configuration applied (``bitstream_uuid``, and
    ``clear_bitstream_uuid`` where it has one), or None."""
    stmt = (sa.select(status.c.applied_settings).select_from(status)
            .join(_policies, _policies.c.id == status.c.policy_id)
            .where(status.c.device_id == device_id,
                   _policies.c.kind == kinds.FPGA_BASE_IMAGE))
    with context.db.read_connection(context) as connection:
        applied = connection.execute(stmt).scalar_one_or_none()
    return applied if (applied or {}).get('bitstream_uuid') else None
