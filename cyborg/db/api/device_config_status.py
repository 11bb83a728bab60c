"""Each selected device's configuration status, kept in step with the
policies.

``reconcile`` gives each device of a set to the policy that wins it (the
highest priority of those that select it) and writes its status row: a
new winner, or new settings of the same winner, make the row pending
again; a device no policy selects loses its row. The facts that
selection and the checks read come from ``device_facts``. All functions
take a Core connection inside the caller's transaction.
"""

import dataclasses
import json

import sqlalchemy as sa

from cyborg.db import models
from cyborg.device_config import selection
from cyborg.device_config import status as config_status
from cyborg.objects import inventory

PENDING = config_status.PENDING

status = models.DeviceConfigStatus.__table__
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
    for device in devices:
        row, policy = rows.get(device.id), won.get(device.id)
        if policy is None:
            if row is not None:
                connection.execute(sa.delete(status).where(
                    status.c.id == row.id))
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
            changes.append(_change(device, policy, row.state, PENDING,
                                   policy.settings))
    return changes


def _change(device, policy, old_state, state, wanted):
    return Change(device_uuid=device.uuid, hostname=device.hostname,
                  policy_uuid=policy.uuid, policy_name=policy.name,
                  old_state=old_state, state=state, wanted_settings=wanted)


def remove(connection, policy):
    """Delete the status rows of ``policy`` (a row); their ``Change``s."""
    rows = connection.execute(
        sa.select(status.c.state, status.c.wanted_settings,
                  _devices.c.uuid, _devices.c.hostname)
        .join(_devices, _devices.c.id == status.c.device_id)
        .where(status.c.policy_id == policy.id)).all()
    connection.execute(sa.delete(status).where(
        status.c.policy_id == policy.id))
    return [Change(device_uuid=r.uuid, hostname=r.hostname,
                   policy_uuid=policy.uuid, policy_name=policy.name,
                   old_state=r.state, state=None,
                   wanted_settings=r.wanted_settings) for r in rows]


def list_status(connection, policy_id):
    """The status rows of the devices ``policy_id`` wins, with each
    device's uuid and host, by host and device."""
    return connection.execute(
        sa.select(status, _devices.c.uuid.label('device_uuid'),
                  _devices.c.hostname)
        .join(_devices, _devices.c.id == status.c.device_id)
        .where(status.c.policy_id == policy_id)
        .order_by(_devices.c.hostname, _devices.c.uuid)).all()
