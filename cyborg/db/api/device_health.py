"""Device health in the database: each device's state, its quarantine and
the operator's override.

A device's ``health`` and ``health_reason`` are what its agent last
observed; they are written only when they change, and
``health_updated_at`` moves only when the state does, so it says since
when the device is in its state. ``quarantined`` is the automatic
quarantine (set when the device turned unhealthy, cleared once it has
been healthy long enough); ``health_override`` is the operator's word
over it. What Placement sees is ``effective_quarantine``: a quarantined
device has its whole inventory reserved, as a disabled one.

Every change of a device's effective quarantine bumps its host's desired
Placement generation in the same transaction
(``cyborg.db.api.host_sync_states``), so whichever conductor syncs the
host next reserves or releases the inventory.

Functions that take a connection run inside the caller's transaction,
as ``cyborg.db.api.inventory`` does.
"""

import dataclasses
import json

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import health_override
from cyborg.db.api import scrubs

# The states of cyborg.accelerator.drivers.health that decide quarantine.
HEALTHY = 'healthy'
UNHEALTHY = 'unhealthy'

# health_override: None lets health decide.
IGNORE = health_override.IGNORE
QUARANTINE = health_override.QUARANTINE

# Keeps a device's reason readable and bounded.
MAX_REASON = 2000

_devices = models.Device.__table__
_controlpaths = models.ControlPathID.__table__


def effective_quarantine(row):
    """Whether Placement must reserve the device's whole inventory.

    ``row`` is anything with ``quarantined`` and ``health_override``: a
    device row, a ``DeviceHealth`` or a stored device of the inventory.
    """
    return quarantine_in_effect(getattr(row, 'quarantined', False),
                                getattr(row, 'health_override', None))


def quarantine_in_effect(quarantined, override):
    return health_override.effectively_quarantined(override, quarantined)


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceHealth:
    id: int
    uuid: str
    address: str  # the PCI address of its control path, 0000:0c:00.0
    health: str
    health_reason: str | None
    health_updated_at: object
    quarantined: bool
    health_override: str | None


def pci_address(cpid_info):
    """'0000:0c:00.0' from a PCI control path's JSON text; None if the
    text is not a PCI address."""
    try:
        info = json.loads(cpid_info)
        return ('%(domain)s:%(bus)s:%(device)s.%(function)s'
                % info).lower()
    except (TypeError, ValueError, KeyError):
        return None


def read_host(connection, hostname, for_update=False):
    """``{PCI address: DeviceHealth}`` of the host's devices: one SELECT.

    ``for_update`` locks the rows until the transaction ends (MySQL and
    PostgreSQL; a SQLite writer holds the database's lock already).
    """
    stmt = (sa.select(_devices.c.id, _devices.c.uuid,
                      _controlpaths.c.cpid_info, _devices.c.health,
                      _devices.c.health_reason,
                      _devices.c.health_updated_at,
                      _devices.c.quarantined, _devices.c.health_override)
            .select_from(_devices.join(
                _controlpaths, _controlpaths.c.device_id == _devices.c.id))
            .where(_devices.c.hostname == hostname,
                   _controlpaths.c.cpid_type == 'PCI')
            .order_by(_devices.c.id, _controlpaths.c.id))
    if for_update:
        stmt = stmt.with_for_update()
    found = {}
    seen = set()
    for row in connection.execute(stmt):
        address = pci_address(row.cpid_info)
        # A device is known by its first control path (as reports key it).
        if address is None or row.id in seen:
            continue
        seen.add(row.id)
        found[address] = DeviceHealth(
            row.id, row.uuid, address, row.health, row.health_reason,
            row.health_updated_at, bool(row.quarantined),
            row.health_override)
    return found


def write_health(connection, updates):
    """Write ``[(DeviceHealth, state, reason, quarantined)]``: one UPDATE
    statement. The time moves only for a device whose state changed."""
    if not updates:
        return
    now = models.utcnow()
    connection.execute(
        sa.update(_devices).where(_devices.c.id == sa.bindparam('device_id'))
        .values(health=sa.bindparam('new_health'),
                health_reason=sa.bindparam('new_reason'),
                health_updated_at=sa.bindparam('new_since'),
                quarantined=sa.bindparam('new_quarantined'),
                updated_at=now),
        [{'device_id': row.id, 'new_health': state,
          'new_reason': (reason or '')[:MAX_REASON],
          'new_since': (row.health_updated_at
                        if state == row.health and row.health_updated_at
                        else now),
          'new_quarantined': quarantined}
         for row, state, reason, quarantined in updates])


def due_for_release(connection, cutoff):
    """``[(hostname, device id, uuid, health_override)]`` of quarantined
    devices healthy since ``cutoff`` or earlier, but for those with a
    handle whose scrub failed (``scrubs.failed_on``): one SELECT."""
    return connection.execute(
        sa.select(_devices.c.hostname, _devices.c.id, _devices.c.uuid,
                  _devices.c.health_override)
        .where(_devices.c.quarantined.is_(True),
               _devices.c.health == HEALTHY,
               _devices.c.health_updated_at <= cutoff,
               ~scrubs.failed_on(_devices.c.id))
        .order_by(_devices.c.hostname, _devices.c.id)).all()


def release(connection, device_ids, cutoff):
    """Clear the quarantine of those of ``device_ids`` still healthy since
    ``cutoff`` (a compare-and-set on what ``due_for_release`` read).
    Returns how many were released."""
    if not device_ids:
        return 0
    return connection.execute(
        sa.update(_devices)
        .where(_devices.c.id.in_(device_ids),
               _devices.c.quarantined.is_(True),
               _devices.c.health == HEALTHY,
               _devices.c.health_updated_at <= cutoff,
               ~scrubs.failed_on(_devices.c.id))
        .values(quarantined=False, updated_at=models.utcnow())).rowcount


