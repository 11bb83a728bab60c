"""/v2/device_config_policies: what operators want of the devices they
select, and where each selected device stands.

Admins only, from microversion 2.6; below it the path does not exist.
Every check that can be made at once is made before anything is stored:
the form of the body, the settings of the policy's kind, the settings
against what the selected devices report, and that no other policy of
the same priority selects one of them. Each write notifies the policy's
change and each status row's.

A policy deleted with ``restore_on_delete`` while some of its devices are
still to be put back as discovered answers 202: it is neither listed nor
read any more, its status shows those devices until they are done, and
deleting it again retries those whose restore failed.
"""

import uuid as uuidlib

import pecan

from cyborg import exception
from cyborg.api import expose
from cyborg.api import request_body
from cyborg.api import uuids
from cyborg.api import views
from cyborg.api.controllers import resource
from cyborg.db.api import device_config_policies as db
from cyborg.device_config import kinds
from cyborg.device_config import selection
from cyborg.notifications import emit

FROM_VERSION = (2, 6)
COLLECTION = 'device_config_policies'
RULE = 'cyborg:device_config_policy:'
NAME_LENGTH = 255
NAME_CHARACTERS = frozenset('abcdefghijklmnopqrstuvwxyz'
                            'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.')
MAX_PRIORITY = 1000
# Body field -> column; only these may be patched.
PATCHABLE = {'priority': 'priority', 'hosts': 'host_selector',
             'devices': 'device_selector', 'settings': 'settings'}
FIELDS = ('name', 'kind', 'priority', 'hosts', 'devices', 'settings',
          'restore_on_delete')


def _invalid(message, code='cyborg.device_config.invalid'):
    return exception.Invalid(message, code=code)


def _object(body, fields):
    if not isinstance(body, dict):
        raise _invalid('The request body must be a JSON object, not %s.'
                       % request_body.json_type(body))
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise _invalid('A device configuration policy has no field %s%s.'
                       % (', '.join(unknown), '' if set(unknown) - set(
                           FIELDS) else ' that can be changed'),
                       code='cyborg.unknown_field')
    return body


def _name(value):
    if (not isinstance(value, str) or not 0 < len(value) <= NAME_LENGTH
            or not set(value) <= NAME_CHARACTERS):
        raise _invalid('name must be 1 to %d letters, digits, _, - and ., '
                       'not %s.' % (NAME_LENGTH, _shown(value)))
    return value


def _priority(value):
    if (not isinstance(value, int) or isinstance(value, bool)
            or not 0 <= value <= MAX_PRIORITY):
        raise _invalid('priority must be a whole number from 0 to %d, not '
                       '%s.' % (MAX_PRIORITY, _shown(value)))
    return value


def _shown(value):
    if isinstance(value, str):
        return repr(value)[:80]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)[:80]
    return request_body.json_type(value)


def _settings(kind, settings):
    """``settings`` of ``kind`` as stored; a bitstream's uuid may come in
    any form the API reads a uuid in."""
    if kind == kinds.FPGA_BASE_IMAGE and isinstance(settings, dict):
        settings = dict(settings, **{
            name: uuids.canonical(settings[name])
            for name in ('bitstream_uuid', 'clear_bitstream_uuid')
            if uuids.canonical(settings.get(name))})
    return kinds.check(kind, settings)


def new_policy(body):
    """The stored values of the policy a POST body asks for."""
    body = _object(body, FIELDS)
    for field in ('name', 'kind', 'devices', 'settings'):
        if field not in body:
            raise _invalid('A device configuration policy needs the field '
                           '%s.' % field)
    restore = body.get('restore_on_delete', False)
    if not isinstance(restore, bool):
        raise _invalid('restore_on_delete must be true or false, not %s.'
                       % _shown(restore))
    return {
        'uuid': str(uuidlib.uuid4()),
        'name': _name(body['name']),
        'priority': _priority(body.get('priority', 0)),
        'host_selector': selection.check_hosts(body.get('hosts', ['*'])),
        'device_selector': selection.check_devices(body['devices']),
        'kind': kinds.check_kind(body['kind']),
        'settings': _settings(body['kind'], body['settings']),
        'restore_on_delete': restore,
    }


def changed_fields(body, kind):
    """The stored values of what a PATCH body changes, for a policy of
    ``kind``."""
    body = _object(body, PATCHABLE)
    if not body:
        raise _invalid('The request body changes nothing; give any of %s.'
                       % ', '.join(PATCHABLE))
    checks = {'priority': _priority, 'hosts': selection.check_hosts,
              'devices': selection.check_devices,
              'settings': lambda value: _settings(kind, value)}
    return {PATCHABLE[field]: checks[field](value)
            for field, value in body.items()}


def _view(policy, base_url):
    return {
        'uuid': policy.uuid,
        'name': policy.name,
        'priority': policy.priority,
        'hosts': policy.host_selector,
        'devices': policy.device_selector,
        'kind': policy.kind,
        'settings': policy.settings,
        'restore_on_delete': policy.restore_on_delete,
        'created_at': views.timestamp(policy.created_at),
        'updated_at': views.timestamp(policy.updated_at),
        'links': views.self_link(base_url, COLLECTION, policy.uuid),
    }


def _status_view(row):
    return {
        'device_uuid': row.device_uuid,
        'hostname': row.hostname,
        'state': row.state,
        'wanted_settings': row.wanted_settings,
        'applied_settings': row.applied_settings,
        'failed_task': row.failed_task,
        'message': row.message,
        'created_at': views.timestamp(row.created_at),
        'updated_at': views.timestamp(row.updated_at),
    }


def _checked_uuid(key):
    checked = uuids.canonical(key)
    if checked is None:
        raise exception.NotFound(
            'No device configuration policy with uuid %s exists.' % key,
            code='cyborg.device_config_policy.not_found')
    return checked


def _notify(request, event_type, policy, changes):
    notifier = request.app_state.notifier
    emit.config_policy_changed(notifier, request.context, event_type, policy)
    emit.config_status_changed(notifier, request.context, changes)


class DeviceConfigPoliciesController(resource.ResourceController):

    ACTIONS = {('GET', 'status'): 'get_status'}
    FROM_VERSION = FROM_VERSION

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        request.authorize(RULE + 'get_all')
        base = views.base_url(request)
        return {COLLECTION: [_view(p, base)
                             for p in db.list_policies(request.context)]}

    @expose.json()
    def get_one(self, key, **params):
        request = pecan.request
        request.authorize(RULE + 'get_one')
        return _view(db.get_policy(request.context, _checked_uuid(key)),
                     views.base_url(request))

    @expose.json()
    def get_status(self, key, **params):
        request = pecan.request
        request.authorize(RULE + 'get_one')
        policy, rows = db.get_status(request.context, _checked_uuid(key))
        return {'policy_uuid': policy.uuid,
                'status': [_status_view(r) for r in rows]}

    @expose.json()
    def post(self, **params):
        request = pecan.request
        request.authorize(RULE + 'create')
        values = new_policy(request_body.load_json(request))
        policy, changes = db.create_policy(request.context, values)
        _notify(request, emit.CONFIG_POLICY_CREATE, policy, changes)
        pecan.response.status = 201
        return _view(policy, views.base_url(request))

    @expose.json()
    def patch(self, key, **params):
        request = pecan.request
        request.authorize(RULE + 'update')
        uuid = _checked_uuid(key)
        body = request_body.load_json(request)
        # The kind never changes, so the settings are read by the kind
        # stored now.
        kind = db.get_policy(request.context, uuid).kind
        policy, changes = db.update_policy(request.context, uuid,
                                           changed_fields(body, kind))
        if changes is not None:  # None: the body changed nothing
            _notify(request, emit.CONFIG_POLICY_UPDATE, policy, changes)
        return _view(policy, views.base_url(request))

    @expose.json()
    def delete(self, key='', **params):
        request = pecan.request
        request.authorize(RULE + 'delete')
        policy, changes, restoring = db.delete_policy(request.context,
                                                      _checked_uuid(key))
        _notify(request, emit.CONFIG_POLICY_DELETE, policy, changes)
        # 202: gone once the devices it restores are put back.
        pecan.response.status = 202 if restoring else 204
