"""/v2/devices: the accelerators found on hosts; operators disable them
and, from 2.5, see their health and override their quarantine."""

import pecan

from cyborg import exception
from cyborg.api import collection
from cyborg.api import conductor_calls
from cyborg.api import device_health
from cyborg.api import expose
from cyborg.api import request_body
from cyborg.api import uuids
from cyborg.api import views
from cyborg.api.controllers import resource
from cyborg.db.api import devices as db
from cyborg.db.api import health_override as override_db
from cyborg.notifications import emit

FILTERS = ('type', 'vendor', 'hostname')
STATUS_FROM_VERSION = (2, 3)
HEALTH_OVERRIDE = 'health_override'


def _view(device, usage, base_url, version):
    view = {
        'uuid': device.uuid,
        'type': device.type,
        'vendor': device.vendor,
        'model': device.model,
        'std_board_info': device.std_board_info,
        'vendor_board_info': device.vendor_board_info,
        'hostname': device.hostname,
        'created_at': views.timestamp(device.created_at),
        'updated_at': views.timestamp(device.updated_at),
        'links': views.self_link(base_url, 'devices', device.uuid),
    }
    if version >= STATUS_FROM_VERSION:
        view['status'] = device.status
    if version >= device_health.FROM_VERSION:
        view.update(device_health.fields(device, usage.get(device.id)))
    return view


def _health_filter(params):
    value = params.get('health')
    if value is not None and not isinstance(value, str):
        raise exception.Invalid('Give health= at most once.',
                                code='cyborg.invalid_filter')
    if value is not None and value not in db.HEALTH_STATES:
        raise exception.Invalid(
            'The health filter must be one of %s, not %r.'
            % (', '.join(db.HEALTH_STATES), value),
            code='cyborg.invalid_filter')
    return value


def check_override_body(body):
    """The override of ``{"health_override": "ignore" | "quarantine"}``."""
    if not isinstance(body, dict):
        raise exception.Invalid(
            'The request body must be a JSON object with the field '
            'health_override, not %s.' % request_body.json_type(body))
    unknown = set(body) - {HEALTH_OVERRIDE}
    if unknown:
        raise exception.Invalid(
            'The request body has no field %s; it holds health_override '
            'only.' % ', '.join(sorted(unknown)),
            code='cyborg.unknown_field')
    if HEALTH_OVERRIDE not in body:
        raise exception.Invalid('The request body needs the field '
                                'health_override.')
    value = body[HEALTH_OVERRIDE]
    if value is None:
        raise exception.Invalid(
            'health_override must be ignore or quarantine, not null; '
            'DELETE the health_override to clear it.')
    if value not in override_db.OVERRIDES:
        raise exception.Invalid(
            'health_override must be ignore or quarantine, not %s.'
            % (repr(value) if isinstance(value, str)
               else request_body.json_type(value)))
    return value


def _checked_uuid(key):
    checked = uuids.canonical(key)
    if checked is None:
        raise exception.NotFound('No device with uuid %s exists.' % key,
                                 code='cyborg.device.not_found')
    return checked


class PlacementPending(exception.CyborgError):
    """The status is stored; Placement follows when it can."""

    status = 503
    code = 'cyborg.device.placement_pending'


def _update_placement(request, device_uuid, status, hostname, stored):
    """Have a conductor bring Placement to the device as stored.

    The change (its status, its health override) is in the database
    already, and the host's desired generation with it; waiting at most
    ``[api] conductor_timeout`` keeps the API worker free when no
    conductor answers. The call goes to the conductor that owns the
    device's host on the ring, with the device's ``status``; it syncs the
    host if it is behind. Answers 503, starting with the sentence
    ``stored``, unless Placement was updated.
    """
    bound = request.app_state.conf.api.conductor_timeout
    later = stored + (', but %s; Placement will be updated when it is '
                      'reachable again.')
    try:
        summary = conductor_calls.call(
            request, 'set_device_status', device_uuid, status,
            timeout=conductor_calls.time_left(request),
            server=request.app_state.membership.owner_of(hostname))
    except conductor_calls.ConductorUnavailable:
        raise PlacementPending(later % (
            'no conductor updated Placement within %g seconds'
            % bound)) from None
    outcome = summary.get('placement') or {}
    # A conductor of the release before says placement_synced only.
    if not summary.get('placement_updated',
                       summary.get('placement_synced')):
        why = ('Placement is unreachable'
               if outcome.get('status') == 'unreachable'
               else 'Placement could not be updated (%s)'
               % (outcome.get('error') or outcome.get('failed')))
        raise PlacementPending(later % why)


class DevicesController(resource.ResourceController):

    ACTIONS = {('POST', 'disable'): 'disable', ('POST', 'enable'): 'enable',
               ('PUT', HEALTH_OVERRIDE): 'put_health_override',
               ('DELETE', HEALTH_OVERRIDE): 'delete_health_override'}
    ACTIONS_FROM = {HEALTH_OVERRIDE: device_health.FROM_VERSION}

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:device:get_all')
        page = collection.page_params(
            request, params, {'type', 'vendor', 'hostname', 'created_at'})
        filters = {name: collection.single(params, name)
                   for name in FILTERS if name in params}
        with_health = request.version >= device_health.FROM_VERSION
        if with_health:
            filters['health'] = _health_filter(params)
        rows, usage = db.list_devices(
            request.context, usage=with_health and device_health.usage_shown(
                request), **filters, **page)
        base = views.base_url(request)
        return collection.listing(
            request, 'devices',
            [_view(d, usage, base, request.version) for d in rows], page)

    @expose.json()
    def get_one(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device:get_one')
        # Bare, as clients read it (tempest reads response['uuid']).
        return _current_view(request, _checked_uuid(key))

    @expose.json()
    def disable(self, key, **params):
        return self._change_status(key, 'disable', 'maintaining')

    @expose.json()
    def enable(self, key, **params):
        return self._change_status(key, 'enable', 'enabled')

    @staticmethod
    def _change_status(key, action, status):
        request = pecan.request
        request.authorize('cyborg:device:' + action)
        device_uuid = _checked_uuid(key)
        # Stored first: whatever happens to the call below, the next
        # conductor pass makes Placement follow (see host_sync).
        hostname, changed = db.set_status(request.context, device_uuid,
                                          status)
        if changed:
            emit.device_status_changed(
                request.app_state.notifier, request.context,
                lambda: db.get_device(request.context, device_uuid)[0])
        done = 'disabled' if status == 'maintaining' else 'enabled'
        _update_placement(request, device_uuid, status, hostname,
                          'Device %s is %s in Cyborg' % (device_uuid, done))
        return _current_view(request, device_uuid)

    @expose.json()
    def put_health_override(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device:health_override')
        override = check_override_body(request_body.load_json(request))
        return _current_view(request,
                             self._set_override(request, key, override))

    @expose.json()
    def delete_health_override(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device:health_override')
        self._set_override(request, key, None)
        pecan.response.status = 204

    @staticmethod
    def _set_override(request, key, override):
        """Store the override (None clears it), then have Placement follow
        as after a status change; the device's uuid."""
        device_uuid = _checked_uuid(key)
        outcome = override_db.set_override(request.context, device_uuid,
                                           override)
        _update_placement(
            request, device_uuid, outcome.status, outcome.hostname,
            'The health override of device %s is %s in Cyborg' % (
                device_uuid, 'set to ' + override if override else 'cleared'))
        return device_uuid


def _current_view(request, device_uuid):
    with_health = request.version >= device_health.FROM_VERSION
    device, usage = db.get_device(
        request.context, device_uuid,
        usage=with_health and device_health.usage_shown(request))
    return _view(device, usage, views.base_url(request), request.version)
