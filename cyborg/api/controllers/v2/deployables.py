"""/v2/deployables: the units of a device that Placement sees; from 2.5
each shows its device's health, from 2.9 its scrub method and its attach
handles, each with its state and last scrub."""

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
from cyborg.db.api import deployables as db

PROGRAM = 'program'
# Deployables show their attach handles and how they are scrubbed.
HANDLES_FROM_VERSION = (2, 9)
SCRUB_ATTRIBUTE = 'scrub_method'
_PROGRAM_OP_FIELDS = {'path', 'op', 'value'}


def _handle_view(handle):
    last = None
    if handle.last_scrub_result is not None:
        last = {'result': handle.last_scrub_result,
                'step': handle.last_scrub_step,
                'message': handle.last_scrub_message,
                'finished_at': views.timestamp(handle.last_scrub_at),
                'seconds': handle.last_scrub_seconds}
    return {'uuid': handle.uuid, 'attach_type': handle.attach_type,
            'state': handle.state,
            'dirty_since': views.timestamp(handle.dirty_since),
            'last_scrub': last}


def _view(deployable, attributes, usage, base_url, version, handles=None):
    view = {
        'uuid': deployable.uuid,
        'parent_id': deployable.parent_uuid,
        'root_id': deployable.root_uuid,
        'name': deployable.name,
        'num_accelerators': deployable.num_accelerators,
        'device_id': deployable.device_uuid,
        'attributes_list': [{'key': k, 'value': v}
                            for k, v in attributes.get(deployable.id, ())],
        'rp_uuid': deployable.rp_uuid,
        'driver_name': deployable.driver_name,
        'bitstream_id': deployable.bitstream_id,
        'created_at': views.timestamp(deployable.created_at),
        'updated_at': views.timestamp(deployable.updated_at),
        'links': views.self_link(base_url, 'deployables', deployable.uuid),
    }
    if version >= device_health.FROM_VERSION:
        view.update(device_health.fields(
            deployable, usage.get(deployable.device_row_id)))
    if version >= HANDLES_FROM_VERSION:
        view['scrub_method'] = dict(attributes.get(deployable.id, ())).get(
            SCRUB_ATTRIBUTE)
        view['attach_handles'] = [
            _handle_view(h) for h in (handles or {}).get(deployable.id, ())]
    return view


def _same(key):
    """What tells two path keys apart: two forms of one uuid are one."""
    return uuids.canonical(key) or key


def _uuid_param(params, name):
    value = params.get(name)
    if value is None:
        return None
    checked = uuids.canonical(value)
    if checked is None:
        raise exception.Invalid('The %s filter must be a uuid, not %r.'
                                % (name, value), code='cyborg.invalid_filter')
    return checked


def _item_uuid(key):
    checked = uuids.canonical(key)
    if checked is None:
        raise exception.NotFound('No deployable with uuid %s exists.' % key,
                                 code='cyborg.deployable.not_found')
    return checked


def check_program_patch(body):
    """The image uuid of ``[{"path": "/program", "op": "replace",
    "value": [{"image_uuid": <uuid>}]}]``, checked field by field.
    """
    if not isinstance(body, list) or len(body) != 1:
        raise exception.Invalid(
            'The request body must be a JSON array of one patch operation '
            'replacing /program, not %s.' % (
                'an array of %d' % len(body) if isinstance(body, list)
                else request_body.json_type(body)))
    op = body[0]
    if not isinstance(op, dict):
        raise exception.Invalid('The patch operation must be a JSON object, '
                                'not %s.' % request_body.json_type(op))
    unknown = set(op) - _PROGRAM_OP_FIELDS
    if unknown:
        raise exception.Invalid('A patch operation has no field %s.'
                                % ', '.join(sorted(unknown)))
    missing = _PROGRAM_OP_FIELDS - set(op)
    if missing:
        raise exception.Invalid('The patch operation needs the field %s.'
                                % ', '.join(sorted(missing)))
    if op['path'] != '/program':
        raise exception.Invalid('Only the path /program can be patched, '
                                'not %r.' % (op['path'],))
    if op['op'] != 'replace':
        raise exception.Invalid('The op for /program must be replace, '
                                'not %r.' % (op['op'],))
    value = op['value']
    if (not isinstance(value, list) or len(value) != 1
            or not isinstance(value[0], dict)
            or set(value[0]) != {'image_uuid'}):
        raise exception.Invalid(
            'The value for /program must be an array of one object with '
            'just the field image_uuid.')
    image_uuid = uuids.canonical(value[0]['image_uuid'])
    if image_uuid is None:
        raise exception.Invalid('The image_uuid %r is not a uuid.'
                                % (value[0]['image_uuid'],))
    return image_uuid


class DeployablesController(resource.ResourceController):

    ACTIONS = {('PATCH', PROGRAM): 'program'}

    @pecan.expose()
    def _route(self, args, request=None):
        request = request if request is not None else pecan.request
        # openstacksdk (and so OSC >= 10.5) sends /<uuid>/program/<uuid>.
        if len(args) == 3 and args[1] == PROGRAM:
            if _same(args[2]) != _same(args[0]):
                raise exception.Invalid(
                    'The path names two deployables, %s and %s.'
                    % (args[0], args[2]))
            args = args[:2]
        return super()._route(args, request)

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:deployable:get_all')
        page = collection.page_params(request, params,
                                      {'name', 'created_at'})
        rows, attributes, usage, handles = db.list_deployables(
            request.context, name=collection.single(params, 'name'),
            device_uuid=_uuid_param(params, 'device_id'),
            rp_uuid=_uuid_param(params, 'rp_uuid'),
            usage=request.version >= device_health.FROM_VERSION
            and device_health.usage_shown(request),
            handles=request.version >= HANDLES_FROM_VERSION, **page)
        base = views.base_url(request)
        return collection.listing(
            request, 'deployables',
            [_view(d, attributes, usage, base, request.version, handles)
             for d in rows], page)

    @expose.json()
    def get_one(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:deployable:get_one')
        return _current_view(request, _item_uuid(key))

    @expose.json()
    def program(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:deployable:program')
        image_uuid = check_program_patch(request_body.load_json(request))
        row = db.get_deployable(request.context, _item_uuid(key))[0]
        conf = request.app_state.conf
        conductor_calls.call(
            request, 'program_deployable', row.uuid, image_uuid,
            server=request.app_state.membership.owner_of(row.hostname),
            # Programming waits for the agent, which may take minutes.
            timeout=conf.conductor.agent_program_timeout + 30,
            unavailable='The conductor did not answer in time; deployable '
                        '%s may still be being programmed.' % row.uuid)
        return _current_view(request, row.uuid)


def _current_view(request, uuid):
    with_health = request.version >= device_health.FROM_VERSION
    row, attributes, usage, handles = db.get_deployable(
        request.context, uuid,
        usage=with_health and device_health.usage_shown(request),
        handles=request.version >= HANDLES_FROM_VERSION)
    return _view(row, attributes, usage, views.base_url(request),
                 request.version, handles)
