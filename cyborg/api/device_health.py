"""A device's health as devices and deployables show it, from 2.5."""

from cyborg.api import views
from cyborg.db.api import health_override

FROM_VERSION = (2, 5)
# Who sees ``usage``: it describes the workloads of the projects using the
# devices, which the readers of the inventory need not see.
USAGE_RULE = 'cyborg:device:get_usage'


def usage_shown(request):
    """Whether the caller sees the devices' usage (else it is null)."""
    return request.is_allowed(USAGE_RULE)


def fields(row, usage):
    """The health fields of the device of ``row`` (a device, or a
    deployable with its device's columns), with ``usage`` (a
    ``device_usage.Usage`` or None)."""
    return {
        'health': row.health,
        'health_reason': row.health_reason,
        'health_updated_at': views.timestamp(row.health_updated_at),
        'health_override': row.health_override,
        'quarantined': health_override.effectively_quarantined(
            row.health_override, row.quarantined),
        'usage': None if usage is None else {
            'observed_at': views.timestamp(usage.observed_at),
            'values': usage.values},
    }
