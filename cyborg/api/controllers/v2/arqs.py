"""/v2/accelerator_requests: one accelerator for one instance (ARQs).

Nova creates ARQs from a device profile, binds them (PATCH, answered 202:
a conductor finishes the bind and tells Nova), reads the resolved ones and
deletes them. ARQs belong to the project that made them: a caller without
``cyborg:arq:all_projects`` sees and touches only its own project's.

Binding, unbinding, deleting by instance and deleting an ARQ bound to an
instance need a Keystone service token (Nova's service user): a user
alone must not move devices under a running instance. With
``auth_strategy = noauth`` every caller is trusted, service included.
"""

import pecan

from cyborg import exception
from cyborg import states
from cyborg.api import collection
from cyborg.api import conductor_calls
from cyborg.api import expose
from cyborg.api import request_body
from cyborg.api import uuids
from cyborg.api import views
from cyborg.api.controllers import resource
from cyborg.api.controllers.v2 import device_profiles
from cyborg.db.api import arqs as db
from cyborg.notifications import emit
from cyborg.quota import enforcement

BIND_PATHS = ('/hostname', '/device_rp_uuid', '/instance_uuid')
PROJECT_PATH = '/project_id'
PROJECT_FROM_VERSION = (2, 1)
RESOLVED = 'resolved'


def _view(arq, base_url, version):
    view = {
        'uuid': arq['uuid'],
        'state': arq['state'],
        'device_profile_name': arq['device_profile_name'],
        'device_profile_group_id': arq['device_profile_group_id'],
        'hostname': arq['hostname'],
        'device_rp_uuid': arq['device_rp_uuid'],
        'instance_uuid': arq['instance_uuid'],
        'project_id': arq['project_id'],
        'attach_handle_type': arq['attach_handle_type'] or '',
        'attach_handle_uuid': arq['attach_handle_uuid'],
        # A MIG instance made at bind adds its identity (MIG UUID, GPU
        # and compute instance ids) to its slot's.
        'attach_handle_info': dict(arq['attach_handle_info'] or {},
                                   **(arq.get('attach_details') or {})),
        'created_at': views.timestamp(arq['created_at']),
        'updated_at': views.timestamp(arq['updated_at']),
        'links': views.self_link(base_url, 'accelerator_requests',
                                 arq['uuid']),
    }
    if version >= device_profiles.REVISIONS_FROM:
        view['device_profile_revision'] = arq['device_profile_revision']
    return view


def _uuid(value, what):
    checked = uuids.canonical(value)
    if checked is not None:
        return checked
    raise exception.Invalid('%s must be a UUID, not %r.' % (what, value),
                            code='cyborg.arq.invalid_uuid')


def _project_scope(request):
    """None (every project) for callers allowed so, else the caller's."""
    if request.is_allowed('cyborg:arq:all_projects'):
        return None
    return _caller_project(request)


def _caller_project(request):
    # A caller without a project must never fall through to "every
    # project" (None) or stamp ARQs with none.
    project = request.context.project_id
    if not project:
        raise exception.Forbidden(
            'Accelerator requests belong to projects; use a '
            'project-scoped token.', code='cyborg.policy.scope')
    return project


def has_service_token(request):
    conf = request.app_state.conf
    if conf.auth_strategy != 'keystone':
        return True
    roles = set(request.context.service_roles or ())
    return bool(roles & set(conf.keystone_authtoken.service_token_roles))


def _require_service_token(request, what):
    if not has_service_token(request):
        raise db.ServiceTokenRequired('%s requires a service token.' % what)


def _owners(request, bindings):
    """``{conductor: [arq uuid, ...]}``: each ARQ goes to the owner of
    its host on the conductors' ring; to None (any conductor) when no
    conductor is alive. ``bindings`` maps each uuid to anything with
    its ``hostname``."""
    membership = request.app_state.membership
    owners = {}
    for uuid, binding in bindings.items():
        owner = membership.owner_of(binding['hostname'] or '')
        owners.setdefault(owner, []).append(uuid)
    return owners


# -- PATCH bodies -----------------------------------------------------------

def _patches(body, item_uuid=None):
    """``{arq uuid: [json-patch op, ...]}`` checked: (bind?, {uuid: ops})."""
    if item_uuid is not None and isinstance(body, list):
        body = {item_uuid: body}
    if not isinstance(body, dict) or not body:
        raise exception.Invalid(
            'The request body must be a JSON object mapping accelerator '
            'request uuids to lists of patch operations.',
            code='cyborg.arq.invalid_patch')
    patches = {}
    for key, ops in body.items():
        uuid = _uuid(key, 'Each key of the request body')
        if item_uuid is not None and uuid != item_uuid:
            raise exception.Invalid(
                'The request body patches accelerator request %s, but the '
                'URL names %s.' % (uuid, item_uuid),
                code='cyborg.arq.invalid_patch')
        if not isinstance(ops, list) or not ops:
            raise exception.Invalid(
                'The patch of accelerator request %s must be a non-empty '
                'list of operations.' % uuid, code='cyborg.arq.invalid_patch')
        patches[uuid] = [_op(uuid, op) for op in ops]
    kinds = {op['op'] for ops in patches.values() for op in ops}
    if len(kinds) != 1:
        raise exception.Invalid(
            'A request either binds (only "add" operations) or unbinds '
            '(only "remove" operations), not both.',
            code='cyborg.arq.mixed_patch')
    return kinds == {'add'}, patches


def _op(uuid, op):
    if not isinstance(op, dict):
        raise exception.Invalid(
            'Each patch operation must be a JSON object, not %s.'
            % request_body.json_type(op), code='cyborg.arq.invalid_patch')
    kind, path = op.get('op'), op.get('path')
    if kind not in ('add', 'remove'):
        raise exception.Invalid(
            'Patch operation %r is not supported; use "add" to bind or '
            '"remove" to unbind.' % (kind,), code='cyborg.arq.invalid_patch')
    if path not in BIND_PATHS + (PROJECT_PATH,):
        raise exception.Invalid(
            'Patch path %r is not supported; the paths are %s.'
            % (path, ', '.join(BIND_PATHS + (PROJECT_PATH,))),
            code='cyborg.arq.invalid_patch')
    if kind == 'add' and 'value' not in op:
        raise exception.Invalid(
            'The "add" of %s to accelerator request %s has no value.'
            % (path, uuid), code='cyborg.arq.invalid_patch')
    return {'op': kind, 'path': path, 'value': op.get('value')}


def _binding(uuid, ops):
    values = {}
    for op in ops:
        if op['path'] in values:
            raise exception.Invalid(
                'The patch of accelerator request %s sets %s twice.'
                % (uuid, op['path']), code='cyborg.arq.invalid_patch')
        values[op['path']] = op['value']
    missing = [p for p in BIND_PATHS if p not in values]
    if missing:
        raise exception.Invalid(
            'Binding accelerator request %s needs %s.'
            % (uuid, ', '.join(missing)), code='cyborg.arq.invalid_patch')
    hostname = values['/hostname']
    if not isinstance(hostname, str) or not 0 < len(hostname) <= 255:
        raise exception.Invalid(
            'The hostname of accelerator request %s must be a non-empty '
            'string of at most 255 characters.' % uuid,
            code='cyborg.arq.invalid_patch')
    binding = {
        'hostname': hostname,
        'device_rp_uuid': _uuid(values['/device_rp_uuid'],
                                'device_rp_uuid'),
        'instance_uuid': _uuid(values['/instance_uuid'], 'instance_uuid'),
    }
    if PROJECT_PATH in values:
        project = values[PROJECT_PATH]
        if not isinstance(project, str) or not 0 < len(project) <= 255:
            raise exception.Invalid(
                'The project_id of accelerator request %s must be a '
                'non-empty string of at most 255 characters.' % uuid,
                code='cyborg.arq.invalid_patch')
        binding['project_id'] = project
    return binding


# -- the controller ---------------------------------------------------------

def _within_limits(request, project_id):
    """The check of ``project_id``'s limits for a creation, None when
    nothing is limited."""
    limits = request.app_state.limits
    if not limits.enforced:
        return None
    return enforcement.checker(limits.limits_of(project_id), project_id)


class AcceleratorRequestsController(resource.ResourceController):

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:arq:get_all')
        instance = params.get('instance')
        if instance is not None:
            instance = _uuid(instance, 'instance')
        bind_state = params.get('bind_state')
        if bind_state is not None and bind_state != RESOLVED:
            raise exception.Invalid(
                'bind_state must be %r, not %r.' % (RESOLVED, bind_state),
                code='cyborg.arq.invalid_bind_state')
        page = {}
        if {'limit', 'marker', 'sort_key', 'sort_dir'} & set(params):
            page = collection.page_params(
                request, params, {'created_at', 'state', 'instance_uuid'})
        arqs = db.list_arqs(request.context, _project_scope(request),
                            instance_uuid=instance, **page)
        if bind_state == RESOLVED:
            waiting = [a['uuid'] for a in arqs
                       if not states.is_resolved(a['state'])]
            if waiting:
                raise exception.Locked(
                    'Accelerator requests %s are still being bound; try '
                    'again once they are resolved.' % ', '.join(waiting),
                    code='cyborg.arq.unresolved')
        base = views.base_url(request)
        return collection.listing(request, 'arqs',
                                  [_view(a, base, request.version)
                                   for a in arqs], page)

    @expose.json()
    def get_one(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:arq:get_one')
        try:
            uuid = _uuid(key, 'uuid')
        except exception.Invalid:
            raise db.not_found(key) from None
        arq = db.get_arq(request.context, uuid, _project_scope(request))
        return _view(arq, views.base_url(request), request.version)

    @expose.json()
    def post(self, **params):
        request = pecan.request
        request.authorize('cyborg:arq:create')
        body = request_body.load_json(request)
        if not isinstance(body, dict):
            raise exception.Invalid(
                'The request body must be a JSON object with '
                'device_profile_name, not %s.' % request_body.json_type(body),
                code='cyborg.arq.invalid_body')
        name = body.get('device_profile_name')
        if name is not None and not isinstance(name, str):
            raise exception.Invalid(
                'device_profile_name must be a string, not %s.'
                % request_body.json_type(name), code='cyborg.arq.invalid_body')
        group = body.get('device_profile_group_id')
        # Clients send null or the group index as a string; the ARQs cover
        # every group of the profile either way.
        if group is not None and not (
                isinstance(group, int) and not isinstance(group, bool)
                or isinstance(group, str) and group.isdigit()):
            raise exception.Invalid(
                'device_profile_group_id must be a group index, not %r.'
                % (group,), code='cyborg.arq.invalid_body')
        if not name:
            raise exception.NotFound(
                'No device profile is named: device_profile_name is '
                'missing or empty.', code='cyborg.device_profile.not_found')
        project_id = _caller_project(request)
        created = db.create_arqs(
            request.context, name, project_id,
            any_profile=request.is_allowed(
                device_profiles.ALL_PROFILES_RULE),
            within_limits=_within_limits(request, project_id))
        emit.arqs_created(request.app_state.notifier, request.context,
                          created)
        pecan.response.status = 201
        base = views.base_url(request)
        return {'arqs': [_view(a, base, request.version)
                         for a in created]}

    @expose.json()
    def patch_all(self, **params):
        self._patch(None)

    @expose.json()
    def patch(self, key, **params):
        self._patch(_uuid(key, 'The accelerator request in the URL'))

    def _patch(self, item_uuid):
        request = pecan.request
        request.authorize('cyborg:arq:update')
        bind, patches = _patches(request_body.load_json(request), item_uuid)
        scope = _project_scope(request)
        if bind:
            bindings = {uuid: _binding(uuid, ops)
                        for uuid, ops in patches.items()}
            if any('project_id' in b for b in bindings.values()):
                if request.version < PROJECT_FROM_VERSION:
                    raise exception.NotAcceptable(
                        'Giving an accelerator request to a project '
                        '(/project_id) needs microversion 2.1 or later.',
                        code='cyborg.microversion_too_low')
                if scope is not None:
                    raise exception.Forbidden(
                        'Only an administrator may give an accelerator '
                        'request to another project (/project_id).',
                        code='cyborg.arq.project_forbidden')
            _require_service_token(request, 'Binding accelerator requests')
            owners = _owners(request, bindings)
            db.start_binding(request.context, bindings, scope,
                             conductor=(next(iter(owners))
                                        if len(owners) == 1 else None))
            # Before the casts: the conductor's bind.end comes after.
            emit.arqs_bind_started(
                request.app_state.notifier, request.context,
                lambda: db.list_arqs(request.context, uuids=list(bindings)))
            for owner, uuids in owners.items():
                self._cast_bind(request, uuids, owner)
        else:
            _require_service_token(request, 'Unbinding accelerator requests')
            uuids = list(patches)
            rows = db.handles_of(request.context, uuids=uuids,
                                 project_id=scope)
            missing = set(uuids) - {r['uuid'] for r in rows}
            if missing:
                raise db.not_found(', '.join(sorted(missing)))
            if any(r['attach_type'] in db.PREPARED_ON_HOST for r in rows):
                # Bounded: an API worker never waits long on a conductor
                # that is away. An unbind that goes on after the answer
                # finishes by itself; asking again is harmless.
                bound = request.app_state.conf.api.conductor_timeout
                for owner, owned in _owners(
                        request, {r['uuid']: r for r in rows}).items():
                    conductor_calls.call(
                        request, 'unbind_arqs', owned, server=owner,
                        timeout=conductor_calls.time_left(request),
                        unavailable='No conductor released the devices of '
                        'accelerator requests %s within %g seconds; ask '
                        'again to see them unbound.' % (', '.join(owned),
                                                         bound))
            else:
                notifier = request.app_state.notifier
                released = db.unbind(request.context, uuids, scope,
                                     describe=notifier.enabled)
                emit.arqs_unbound(notifier, request.context, released)
        pecan.response.status = 202

    @staticmethod
    def _cast_bind(request, uuids, owner):
        try:
            request.app_state.conductor.bind_arqs(request.context, uuids,
                                                  server=owner)
        except Exception:
            # Nothing will bind them: fail them now rather than let Nova
            # wait for events that recovery would send much later.
            failed = db.fail_started_binds(request.context, uuids)
            reason = ('The conductor cannot be reached, so accelerator '
                      'requests %s were not bound; try again later.'
                      % ', '.join(uuids))
            emit.arqs_bind_failed(
                request.app_state.notifier, request.context,
                lambda: db.list_arqs(request.context, uuids=failed), reason)
            raise conductor_calls.ConductorUnavailable(reason) from None

    @expose.json()
    def delete_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:arq:delete')
        arqs = collection.single(params, 'arqs')
        instance = params.get('instance')
        if (arqs is None) == (instance is None):
            raise exception.Invalid(
                'Name the accelerator requests to delete with either arqs='
                '<uuid>,... or instance=<uuid>.',
                code='cyborg.arq.delete_what')
        if instance is not None:
            instance = _uuid(instance, 'instance')
            _require_service_token(
                request, 'Deleting accelerator requests by instance')
            self._delete(request, instance_uuid=instance)
        else:
            uuids = [_uuid(u, 'Each uuid of arqs') for u in arqs.split(',')
                     if u]
            if not uuids:
                raise exception.Invalid('arqs= names no accelerator request.',
                                        code='cyborg.arq.delete_what')
            self._delete(request, uuids=uuids)

    @expose.json()
    def delete(self, key='', **params):
        request = pecan.request
        request.authorize('cyborg:arq:delete')
        try:
            uuid = _uuid(key, 'uuid')
        except exception.Invalid:
            raise db.not_found(key) from None
        self._delete(request, uuids=[uuid])

    @staticmethod
    def _delete(request, uuids=None, instance_uuid=None):
        notifier = request.app_state.notifier
        deleted, deferred = db.delete_arqs(
            request.context, uuids=uuids, instance_uuid=instance_uuid,
            project_id=_project_scope(request),
            allow_bound=has_service_token(request),
            describe=notifier.enabled)
        # Those deferred are announced by the conductor that removes them.
        emit.arqs_deleted(notifier, request.context, deleted)
        if deferred:
            # Left Deleting if the conductor cannot finish now: its
            # recovery pass will.
            hosts = {r['uuid']: r for r in db.handles_of(request.context,
                                                         uuids=deferred)}
            for owner, owned in _owners(request, hosts).items():
                try:
                    conductor_calls.call(
                        request, 'finish_deleting_arqs', owned, server=owner,
                        timeout=conductor_calls.time_left(request))
                except (conductor_calls.ConductorUnavailable,
                        exception.Conflict):
                    pass
        pecan.response.status = 204
