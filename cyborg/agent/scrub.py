"""The agent's side of scrubbing attach handles between tenants.

``mark`` puts each deployable's scrub method into its reported
attributes (``scrub_method``), as its driver names it, unless ``[scrub]
disabled_drivers`` names the driver: the conductor makes a released
handle dirty only where the attribute says it is scrubbed.

``scrub`` runs the driver's scrub of one released handle and times it.
"""

import time

from oslo_config import cfg

from cyborg.accelerator.drivers import base

ATTRIBUTE = 'scrub_method'


def disabled_drivers(conf):
    try:
        return frozenset(conf.scrub.disabled_drivers or ())
    except (AttributeError, cfg.NoSuchOptError):  # no [scrub] options
        return frozenset()


def mark(driver, devices, disabled):
    """Set or drop ``scrub_method`` on each deployable of ``devices``,
    found by ``driver``; ``disabled``: drivers whose handles are not
    scrubbed."""
    for device in devices:
        for deployable in device.deployables:
            method = (None if driver.name in disabled
                      else driver.scrub_method(deployable))
            if method:
                deployable.attributes[ATTRIBUTE] = method
            else:
                deployable.attributes.pop(ATTRIBUTE, None)
    return devices


def scrub(driver, device, handle, uuid, method):
    """``{'method', 'steps', 'seconds'}`` of the driver's scrub of
    ``handle``; ``base.ScrubFailed`` (its step named) if it failed."""
    started = time.monotonic()
    try:
        steps = list(driver.scrub_attach_handle(device, handle, uuid,
                                                method))
    except base.ScrubFailed:
        raise
    except base.DriverError as e:
        raise base.ScrubFailed('scrub', e.message) from e
    return {'method': method, 'steps': steps,
            'seconds': round(time.monotonic() - started, 3)}
