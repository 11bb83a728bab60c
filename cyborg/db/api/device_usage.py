"""The latest usage figures of devices, from their hosts' agent rows.

An agent's service row holds the figures of all its host's devices
(``services.usage``: ``{PCI address: {figure: value, ...,
'observed_at': seconds since the epoch}}``); a device finds its own by
the PCI address of its control path. Reading them for any number of
devices takes two SELECTs: the control paths, then the agents' rows.
"""

import dataclasses
import datetime
import json

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import services
from cyborg.objects import inventory

_controlpaths = models.ControlPathID.__table__
_services = models.Service.__table__


@dataclasses.dataclass(frozen=True)
class Usage:
    # Naive UTC, as every time of the database; None if nobody said.
    observed_at: datetime.datetime | None
    values: dict


def pci_address(cpid_info):
    """``0000:3b:00.0`` of a PCI control path's JSON text; None when the
    text is not such an address."""
    try:
        return str(inventory.PCIAddress(**json.loads(cpid_info)))
    except (TypeError, ValueError):
        return None


def _observed_at(figures, row_time):
    """When the figures were taken: their own time, else the row's."""
    seconds = figures.get('observed_at')
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        try:
            return datetime.datetime.fromtimestamp(
                seconds, datetime.timezone.utc).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):
            pass
    return row_time


def latest(connection, devices):
    """``{device id: Usage}`` of ``devices``, ``(id, hostname)`` pairs,
    whose host's agent has figures for them."""
    if not devices:
        return {}
    addresses = {}
    device_ids = sorted({device_id for device_id, _ in devices})
    for device_id, cpid_info in connection.execute(
            sa.select(_controlpaths.c.device_id, _controlpaths.c.cpid_info)
            .where(_controlpaths.c.device_id.in_(device_ids),
                   _controlpaths.c.cpid_type == 'PCI')
            .order_by(_controlpaths.c.id)):
        # A device with several control paths goes by its first.
        addresses.setdefault(device_id, pci_address(cpid_info))
    reports = {row.host: row for row in connection.execute(
        sa.select(_services.c.host, _services.c.usage, _services.c.usage_at)
        .where(_services.c.binary == services.AGENT,
               _services.c.host.in_(sorted({h for _, h in devices}))))}
    found = {}
    for device_id, hostname in devices:
        report = reports.get(hostname)
        if report is None or not isinstance(report.usage, dict):
            continue
        figures = report.usage.get(addresses.get(device_id))
        if isinstance(figures, dict):
            found[device_id] = Usage(
                _observed_at(figures, report.usage_at),
                {k: v for k, v in figures.items() if k != 'observed_at'})
    return found
