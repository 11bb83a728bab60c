"""/v2/device_profiles: named sets of accelerator request groups.

From microversion 2.7 admins update a profile (each change of its name,
description or groups a new revision, kept and shown under
``/revisions``), enable and disable it, and make it private to the
projects under ``/projects``; a profile shows its revision, whether it is
enabled and whether it is public. Callers other than admins see only the
enabled profiles that are public or shared with their project, at every
microversion.
"""

import re
import uuid as uuidlib

import pecan
import wsme
from wsme import types as wtypes

from cyborg import exception
from cyborg.api import collection
from cyborg.api import expose
from cyborg.api import rendered
from cyborg.api import request_body
from cyborg.api import uuids
from cyborg.api import views
from cyborg.api.controllers import resource
from cyborg.api.controllers.v2 import device_profile_groups
from cyborg.db.api import device_profile_access as access_db
from cyborg.db.api import device_profiles as db

# More than this many profiles in one request is surely a mistake.
MAX_PROFILES_PER_REQUEST = 100
# \Z: '$' would let a name ending in a newline through.
NAME_PATTERN = r'^[A-Za-z0-9_-]+\Z'
NAME_LENGTH = 255
DESCRIPTION_LENGTH = 1024
_MISSING = object()
# Updates, revisions, enabled and access.
REVISIONS_FROM = (2, 7)
# Who sees and uses every profile, disabled and private ones included.
ALL_PROFILES_RULE = 'cyborg:device_profile:all_profiles'
PROJECT_LENGTH = 255


class NewDeviceProfile(wtypes.Base):
    """One item of the array a client posts."""

    name = wsme.wsattr(wtypes.StringType(min_length=1,
                                         max_length=NAME_LENGTH,
                                         pattern=NAME_PATTERN),
                       mandatory=True)
    description = wtypes.StringType(max_length=DESCRIPTION_LENGTH)
    uuid = uuids.UuidType()
    # groups is checked by device_profile_groups, which knows the key rules.
    # From 2.7.
    is_public = wtypes.wsattr(bool)


def _new_profiles(body, version):
    if not isinstance(body, list):
        raise exception.Invalid(
            'The request body must be a JSON array of device profiles, not '
            '%s.' % request_body.json_type(body))
    if not body:
        raise exception.Invalid('The request body is an empty array; send '
                                'at least one device profile.')
    if len(body) > MAX_PROFILES_PER_REQUEST:
        raise exception.Invalid('A request may create at most %d device '
                                'profiles.' % MAX_PROFILES_PER_REQUEST)
    profiles = []
    for item in body:
        groups = _MISSING
        if isinstance(item, dict):
            item = dict(item)
            groups = item.pop('groups', _MISSING)
            if 'is_public' in item and version < REVISIONS_FROM:
                raise exception.Invalid(
                    'is_public needs microversion 2.7 or later.',
                    code='cyborg.microversion_too_low')
        new = request_body.from_wsme(NewDeviceProfile, item,
                                     'device profile')
        if groups is _MISSING:
            raise exception.Invalid('A device profile needs the field '
                                    'groups.')
        profiles.append({
            'name': new.name,
            'description': (None if new.description is wtypes.Unset
                            else new.description),
            'uuid': (str(uuidlib.uuid4()) if new.uuid in (wtypes.Unset, None)
                     else str(new.uuid)),
            'groups': device_profile_groups.check_groups(groups),
            'is_public': (True if new.is_public in (wtypes.Unset, None)
                          else new.is_public),
        })
    return profiles


def _changes(body):
    """What a PATCH body changes, checked as a creation checks it."""
    if not isinstance(body, dict):
        raise exception.Invalid(
            'The request body must be a JSON object of the fields to '
            'change, not %s.' % request_body.json_type(body))
    unknown = sorted(set(body) - set(db.UPDATABLE))
    if unknown:
        raise exception.Invalid(
            'A device profile has no field %s that can be changed; give '
            'any of %s.' % (', '.join(unknown), ', '.join(db.UPDATABLE)),
            code='cyborg.unknown_field')
    if not body:
        raise exception.Invalid('The request body changes nothing; give '
                                'any of %s.' % ', '.join(db.UPDATABLE))
    changes = {}
    for field in ('enabled', 'is_public'):
        if field in body:
            if not isinstance(body[field], bool):
                raise exception.Invalid('%s must be true or false, not %s.'
                                        % (field, request_body.json_type(
                                            body[field])))
            changes[field] = body[field]
    if 'groups' in body:
        changes['groups'] = device_profile_groups.check_groups(
            body['groups'])
    if 'name' in body:
        name = body['name']
        if not isinstance(name, str) or not re.match(NAME_PATTERN, name) \
                or len(name) > NAME_LENGTH:
            raise exception.Invalid(
                'name must be 1 to %d letters, digits, _ and -, not %s.'
                % (NAME_LENGTH, repr(name)[:80] if isinstance(name, str)
                   else request_body.json_type(name)))
        changes['name'] = name
    if 'description' in body:
        description = body['description']
        if description is not None and (
                not isinstance(description, str)
                or len(description) > DESCRIPTION_LENGTH):
            raise exception.Invalid(
                'description must be null or text of at most %d '
                'characters, not %s.' % (DESCRIPTION_LENGTH,
                                         request_body.json_type(
                                             description)))
        changes['description'] = description
    return changes


def _view(profile, base_url, version):
    view = {
        'uuid': profile.uuid,
        'name': profile.name,
        'description': profile.description,
        'groups': profile.profile_json['groups'],
        'created_at': views.timestamp(profile.created_at),
        'updated_at': views.timestamp(profile.updated_at),
        'links': views.self_link(base_url, 'device_profiles', profile.uuid),
    }
    if version >= REVISIONS_FROM:
        view.update(revision=profile.revision, enabled=profile.enabled,
                    is_public=profile.is_public)
    return view


def _revision_view(revision):
    return {'revision': revision.revision, 'name': revision.name,
            'description': revision.description,
            'groups': revision.profile_json['groups'],
            'reason': revision.reason,
            'created_at': views.timestamp(revision.created_at)}


def _listed(rows, base_url, version):
    """``_view`` of each row of ``db.listed_profiles``, in one loop:
    a list's time goes here."""
    timestamp = views.timestamp
    groups_of = db.groups_of
    link = views.self_link(base_url, 'device_profiles', '')[0]['href']
    listed = [{'uuid': uuid, 'name': name, 'description': description,
               'groups': groups_of(profile_json),
               'created_at': timestamp(created_at),
               'updated_at': timestamp(updated_at),
               'links': [{'href': link + uuid, 'rel': 'self'}]}
              for (uuid, name, description, profile_json, created_at,
                   updated_at, _revision, _enabled, _public) in rows]
    if version >= REVISIONS_FROM:
        for view, row in zip(listed, rows, strict=True):
            view.update(revision=row[6], enabled=bool(row[7]),
                        is_public=bool(row[8]))
    return listed


def _names(value, parameter):
    names = [n for n in value.split(',') if n] if value else []
    if not names:
        raise exception.Invalid('The %s parameter needs at least one device '
                                'profile name.' % parameter)
    return names


def _list_body(rows, url, page):
    """The list's body: of ``rows``, ``url`` (base URL, path, query
    string and microversion) and ``page`` (what the query asks, within
    ``[api] max_limit``) alone."""
    base, path, query_string, version = url
    return collection.listing_at(base, path, query_string,
                                 'device_profiles',
                                 _listed(rows, base, version), page)


def _visible_to(request):
    """None if the caller sees every profile, else its project."""
    if request.is_allowed(ALL_PROFILES_RULE):
        return None
    project = request.context.project_id
    if not project:
        raise exception.Forbidden('A caller without a project sees no '
                                  'device profile.')
    return project


def _found(request, key):
    """``{'uuid': ...}`` or ``{'name': ...}``: how ``key`` names a
    profile (by name from microversion 2.2)."""
    uuid = uuids.canonical(key)
    if uuid is not None:
        return {'uuid': uuid}
    if request.version >= (2, 2):
        return {'name': key}
    raise exception.NotAcceptable(
        'Finding a device profile by name (%s) needs microversion 2.2 or '
        'later; use its uuid.' % key, code='cyborg.microversion_too_low')


def _project_id(value):
    if (not isinstance(value, str) or not value.strip()
            or len(value) > PROJECT_LENGTH):
        raise exception.Invalid(
            'project_id must be a project id of 1 to %d characters, not '
            '%s.' % (PROJECT_LENGTH, request_body.json_type(value)
                     if not isinstance(value, str) else repr(value)[:80]))
    return value


class DeviceProfilesController(resource.ResourceController):

    ACTIONS = {('GET', 'revisions'): 'get_revisions',
               ('GET', 'projects'): 'get_projects',
               ('POST', 'projects'): 'add_project'}
    ITEM_ACTIONS = {('DELETE', 'projects'): 'remove_project'}
    ACTIONS_FROM = {'revisions': REVISIONS_FROM, 'projects': REVISIONS_FROM}

    def __init__(self):
        super().__init__()
        self._rendered = rendered.RenderedLists(_list_body)

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:get_all')
        page = collection.page_params(request, params,
                                      {'name', 'created_at'})
        name = collection.single(params, 'name')
        names = _names(name, 'name') if name is not None else None
        rows = db.listed_profiles(request.context, names=names,
                                  project_id=_visible_to(request), **page)
        url = (views.base_url(request), request.path_info,
               request.query_string, request.version)
        return self._rendered.body(rows, url, page)

    @expose.json()
    def get_one(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:get_one')
        profile = db.get_profile(request.context,
                                 project_id=_visible_to(request),
                                 **_found(request, key))
        return {'device_profile': _view(profile, views.base_url(request),
                                        request.version)}

    @expose.json()
    def get_revisions(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:get_one')
        profile, rows = db.revisions(request.context,
                                     project_id=_visible_to(request),
                                     **_found(request, key))
        return {'device_profile_uuid': profile.uuid,
                'revision': profile.revision,
                'revisions': [_revision_view(r) for r in rows]}

    @expose.json()
    def patch(self, key, **params):
        request = pecan.request
        if request.version < REVISIONS_FROM:
            # As the methods a microversion does not have yet.
            self._refuse(request, ())
        request.authorize('cyborg:device_profile:update')
        changes = _changes(request_body.load_json(request))
        profile = db.update_profile(request.context, changes,
                                    **_found(request, key))
        return {'device_profile': _view(profile, views.base_url(request),
                                        request.version)}

    @expose.json()
    def get_projects(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:get_projects')
        profile, projects = access_db.projects(request.context,
                                               **_found(request, key))
        return {'device_profile_uuid': profile.uuid, 'projects': projects}

    @expose.json()
    def add_project(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:add_project')
        body = request_body.load_json(request)
        if not isinstance(body, dict) or set(body) != {'project_id'}:
            raise exception.Invalid(
                'The request body must be {"project_id": <project>}.')
        profile = access_db.add_project(
            request.context, _project_id(body['project_id']),
            **_found(request, key))
        _, projects = access_db.projects(request.context, uuid=profile.uuid)
        pecan.response.status = 201
        return {'device_profile_uuid': profile.uuid, 'projects': projects}

    @expose.json()
    def remove_project(self, key, project_id, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:remove_project')
        access_db.remove_project(request.context, _project_id(project_id),
                                 **_found(request, key))
        pecan.response.status = 204

    @expose.json()
    def post(self, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:create')
        profiles = _new_profiles(request_body.load_json(request),
                                 request.version)
        rows = db.create_profiles(request.context, profiles)
        pecan.response.status = 201
        base = views.base_url(request)
        created = [_view(p, base, request.version) for p in rows]
        # Clients read back the bare object; several come as an array.
        return created[0] if len(created) == 1 else created

    @expose.json()
    def delete(self, key='', **params):
        # Pecan drops an empty path part: DELETE on 'collection/' comes here
        # with no key.
        request = pecan.request
        request.authorize('cyborg:device_profile:delete')
        if not key:
            raise exception.Invalid('The device profile to delete has an '
                                    'empty name.')
        uuid = uuids.canonical(key)
        if uuid is not None:
            db.delete_profiles(request.context, uuids=[uuid])
        else:
            db.delete_profiles(request.context, names=[key])
        pecan.response.status = 204

    @expose.json()
    def delete_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:delete')
        db.delete_profiles(request.context,
                           names=_names(collection.single(params, 'value'),
                                        'value'))
        pecan.response.status = 204
