"""/v2/devices: the accelerators found on hosts; operators disable them."""

import uuid as uuidlib

import pecan

from cyborg import exception
from cyborg.api import collection
from cyborg.api import conductor_calls
from cyborg.api import expose
from cyborg.api import views
from cyborg.api.controllers import resource
from cyborg.db.api import devices as db

FILTERS = ('type', 'vendor', 'hostname')
STATUS_FROM_VERSION = (2, 3)


def _view(device, base_url, version):
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
    return view


def _checked_uuid(key):
    try:
        return str(uuidlib.UUID(key))
    except ValueError:
        raise exception.NotFound('No device with uuid %s exists.' % key,
                                 code='cyborg.device.not_found') from None


class PlacementPending(exception.CyborgError):
    """The status is stored; Placement follows when it can."""

    status = 503
    code = 'cyborg.device.placement_pending'


def _update_placement(request, device_uuid, status, hostname):
    """Have a conductor bring Placement to the device's new status.

    The status is in the database already; waiting at most ``[api]
    conductor_timeout`` keeps the API worker free when no conductor
    answers. The call goes to the conductor that owns the device's host
    on the ring, which syncs that host's other changes too. Answers 503
    unless Placement was updated.
    """
    timeout = request.app_state.conf.api.conductor_timeout
    done = 'disabled' if status == 'maintaining' else 'enabled'
    later = ('Device %s is %s in Cyborg, but %s; Placement will be updated '
             'when it is reachable again.')
    try:
        summary = conductor_calls.call(
            request, 'set_device_status', device_uuid, status,
            timeout=timeout,
            server=request.app_state.membership.owner_of(hostname))
    except conductor_calls.ConductorUnavailable:
        raise PlacementPending(later % (
            device_uuid, done, 'no conductor updated Placement within '
            '%g seconds' % timeout)) from None
    outcome = summary.get('placement') or {}
    # A conductor of the release before says placement_synced only.
    if not summary.get('placement_updated',
                       summary.get('placement_synced')):
        why = ('Placement is unreachable'
               if outcome.get('status') == 'unreachable'
               else 'Placement could not be updated (%s)'
               % (outcome.get('error') or outcome.get('failed')))
        raise PlacementPending(later % (device_uuid, done, why))


class DevicesController(resource.ResourceController):

    ACTIONS = {('POST', 'disable'): 'disable', ('POST', 'enable'): 'enable'}

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:device:get_all')
        page = collection.page_params(
            request, params, {'type', 'vendor', 'hostname', 'created_at'})
        filters = {name: params[name] for name in FILTERS if name in params}
        rows = db.list_devices(request.context, **filters, **page)
        base = views.base_url(request)
        return {'devices': [_view(d, base, request.version) for d in rows]}

    @expose.json()
    def get_one(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device:get_one')
        device = db.get_device(request.context, _checked_uuid(key))
        # Bare, as clients read it (tempest reads response['uuid']).
        return _view(device, views.base_url(request), request.version)

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
        hostname, _ = db.set_status(request.context, device_uuid, status)
        _update_placement(request, device_uuid, status, hostname)
        device = db.get_device(request.context, device_uuid)
        return _view(device, views.base_url(request), request.version)
