"""The events Cyborg announces: one function per event, called once the
change it announces is committed.

Each takes the service's ``notifier.Notifier`` first and does nothing
when it is off. ARQs and devices are given as the mappings (or rows) the
database layer returns, or as a function that reads them: called only
when notifications are on, so that a request pays for no read then. A
failure to read, build or send a notification is logged and goes no
further: the change it announces has happened.
"""

import collections
import functools
import logging

from cyborg import states
from cyborg.accelerator.drivers import health
from cyborg.notifications import notifier as notifier_module
from cyborg.notifications import payloads

LOG = logging.getLogger(__name__)

ARQ_CREATE = 'accelerator_request.create'
ARQ_BIND_START = 'accelerator_request.bind.start'
ARQ_BIND_END = 'accelerator_request.bind.end'
ARQ_BIND_ERROR = 'accelerator_request.bind.error'
ARQ_UNBIND = 'accelerator_request.unbind'
ARQ_DELETE = 'accelerator_request.delete'
DEVICE_ENABLE = 'device.enable'
DEVICE_DISABLE = 'device.disable'
DEVICE_HEALTH_CHANGE = 'device.health_change'
CONFIG_POLICY_CREATE = 'device_config_policy.create'
CONFIG_POLICY_UPDATE = 'device_config_policy.update'
CONFIG_POLICY_DELETE = 'device_config_policy.delete'
CONFIG_STATUS_CHANGE = 'device_config_status.change'
SCRUB_ERROR = 'attach_handle.scrub.error'

# Every event type: its payload kind and priority (the health change's
# is WARN when the device got worse).
EVENTS = {
    ARQ_CREATE: (payloads.AcceleratorRequestPayload, notifier_module.INFO),
    ARQ_BIND_START: (payloads.AcceleratorRequestPayload,
                     notifier_module.INFO),
    ARQ_BIND_END: (payloads.AcceleratorRequestPayload, notifier_module.INFO),
    ARQ_BIND_ERROR: (payloads.AcceleratorRequestErrorPayload,
                     notifier_module.ERROR),
    ARQ_UNBIND: (payloads.AcceleratorRequestPayload, notifier_module.INFO),
    ARQ_DELETE: (payloads.AcceleratorRequestPayload, notifier_module.INFO),
    DEVICE_ENABLE: (payloads.DevicePayload, notifier_module.INFO),
    DEVICE_DISABLE: (payloads.DevicePayload, notifier_module.INFO),
    DEVICE_HEALTH_CHANGE: (payloads.DeviceHealthChangePayload,
                           notifier_module.INFO),
    CONFIG_POLICY_CREATE: (payloads.DeviceConfigPolicyPayload,
                           notifier_module.INFO),
    CONFIG_POLICY_UPDATE: (payloads.DeviceConfigPolicyPayload,
                           notifier_module.INFO),
    CONFIG_POLICY_DELETE: (payloads.DeviceConfigPolicyPayload,
                           notifier_module.INFO),
    CONFIG_STATUS_CHANGE: (payloads.DeviceConfigStatusPayload,
                           notifier_module.INFO),
    SCRUB_ERROR: (payloads.AttachHandleScrubPayload, notifier_module.ERROR),
}

HealthChange = collections.namedtuple(
    'HealthChange', 'device old_health new_health reason', defaults=(None,))
HealthChange.__doc__ = ('One device whose health went from ``old_health`` '
                        'to ``new_health``, with the reason for the new '
                        'one (optional).')


def _best_effort(func):
    @functools.wraps(func)
    def emit(notifier, *args, **kwargs):
        if not notifier.enabled:
            return
        try:
            func(notifier, *[a() if callable(a) else a for a in args],
                 **kwargs)
        except Exception:
            LOG.exception('Could not notify %s', func.__name__)
    return emit


def _send(notifier, context, event_type, source, **values):
    kind, priority = EVENTS[event_type]
    notifier.send(context, event_type, kind.from_fields(source, **values),
                  priority)


# -- accelerator requests ------------------------------------------------

def _per_arq(event_type, name, doc, **values):
    """An emit function sending ``event_type`` for each of its ARQs,
    ``values`` set over what the ARQ says."""
    def emit(notifier, context, arqs):
        for arq in arqs:
            _send(notifier, context, event_type, arq, **values)
    emit.__name__ = emit.__qualname__ = name
    emit.__doc__ = doc
    return _best_effort(emit)


arqs_created = _per_arq(ARQ_CREATE, 'arqs_created', 'New ARQs.')
arqs_bind_started = _per_arq(ARQ_BIND_START, 'arqs_bind_started',
                             'ARQs the API moved to BindStarted.')
arqs_bound = _per_arq(ARQ_BIND_END, 'arqs_bound', 'ARQs now Bound.',
                      state=states.BOUND)
arqs_unbound = _per_arq(ARQ_UNBIND, 'arqs_unbound',
                        'ARQs as they were bound: the payload names what '
                        'they left.', state=states.UNBOUND)
arqs_deleted = _per_arq(ARQ_DELETE, 'arqs_deleted',
                        'ARQs as they were when deleted.')


@_best_effort
def arqs_bind_failed(notifier, context, arqs, reason):
    """``reason``: why, the same for all of ``arqs``."""
    for arq in arqs:
        # The handle it may have taken is free again.
        _send(notifier, context, ARQ_BIND_ERROR, arq,
              state=states.BIND_FAILED, attach_handle_type=None,
              attach_handle_uuid=None, reason=reason)


# -- devices ---------------------------------------------------------------

@_best_effort
def device_status_changed(notifier, context, device):
    """``device`` was enabled or disabled (its new ``status`` says)."""
    enabled = payloads.value_of(device, 'status') == 'enabled'
    _send(notifier, context, DEVICE_ENABLE if enabled else DEVICE_DISABLE,
          device)


@_best_effort
def device_health_changed(notifier, context, device, old_health, new_health,
                          reason=None):
    """``device`` (a mapping or a row of ``devices``) went from
    ``old_health`` to ``new_health`` (``health.STATES``)."""
    payload = payloads.DeviceHealthChangePayload.from_fields(
        device, old_health=old_health, new_health=new_health, reason=reason)
    worse = (health.STATES.index(new_health)
             > health.STATES.index(old_health))
    notifier.send(context, DEVICE_HEALTH_CHANGE, payload,
                  notifier_module.WARN if worse else notifier_module.INFO)


def devices_health_changed(notifier, context, changes):
    """One ``device.health_change`` per ``HealthChange`` (or 4-tuple) of
    ``changes``; a change that cannot be sent does not stop the others."""
    for change in changes:
        device_health_changed(notifier, context, *change)


# -- device configuration ----------------------------------------------

@_best_effort
def config_policy_changed(notifier, context, event_type, policy):
    """``policy`` (a row of ``device_config_policies``) was created,
    updated or deleted (``event_type``: one of CONFIG_POLICY_*)."""
    _send(notifier, context, event_type, policy,
          hosts=payloads.value_of(policy, 'host_selector'),
          devices=payloads.value_of(policy, 'device_selector'))


def config_status_changed(notifier, context, changes):
    """One ``device_config_status.change`` per status row made, changed or
    removed (``device_config_status.Change``); a change that cannot be
    sent does not stop the others."""
    for change in changes:
        _config_status_changed(notifier, context, change)


@_best_effort
def _config_status_changed(notifier, context, change):
    _send(notifier, context, CONFIG_STATUS_CHANGE, change)


# -- scrubs between tenants ---------------------------------------------

@_best_effort
def scrub_failed(notifier, context, handle, step, reason, seconds):
    """The scrub of ``handle`` (``scrubs.Due``) failed at ``step``."""
    _send(notifier, context, SCRUB_ERROR, handle, result='failed',
          step=step, reason=reason, seconds=float(seconds))
