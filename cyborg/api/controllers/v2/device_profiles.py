"""/v2/device_profiles: named sets of accelerator request groups."""

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
from cyborg.db.api import device_profiles as db

# More than this many profiles in one request is surely a mistake.
MAX_PROFILES_PER_REQUEST = 100
# \Z: '$' would let a name ending in a newline through.
NAME_PATTERN = r'^[A-Za-z0-9_-]+\Z'
_MISSING = object()


class NewDeviceProfile(wtypes.Base):
    """One item of the array a client posts."""

    name = wsme.wsattr(wtypes.StringType(min_length=1, max_length=255,
                                         pattern=NAME_PATTERN),
                       mandatory=True)
    description = wtypes.StringType(max_length=1024)
    uuid = uuids.UuidType()
    # groups is checked by device_profile_groups, which knows the key rules.


def _new_profiles(body):
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
        })
    return profiles


def _view(profile, base_url):
    return {
        'uuid': profile.uuid,
        'name': profile.name,
        'description': profile.description,
        'groups': profile.profile_json['groups'],
        'created_at': views.timestamp(profile.created_at),
        'updated_at': views.timestamp(profile.updated_at),
        'links': views.self_link(base_url, 'device_profiles', profile.uuid),
    }


def _listed(rows, base_url):
    """``_view`` of each row of ``db.listed_profiles``, in one loop:
    a list's time goes here."""
    timestamp = views.timestamp
    groups_of = db.groups_of
    link = views.self_link(base_url, 'device_profiles', '')[0]['href']
    return [{'uuid': uuid, 'name': name, 'description': description,
             'groups': groups_of(profile_json),
             'created_at': timestamp(created_at),
             'updated_at': timestamp(updated_at),
             'links': [{'href': link + uuid, 'rel': 'self'}]}
            for uuid, name, description, profile_json, created_at, updated_at
            in rows]


def _names(value, parameter):
    names = [n for n in value.split(',') if n] if value else []
    if not names:
        raise exception.Invalid('The %s parameter needs at least one device '
                                'profile name.' % parameter)
    return names


def _list_body(rows, url, page):
    """The list's body: of ``rows``, ``url`` (base URL, path, query
    string) and ``page`` (what the query asks, within ``[api]
    max_limit``) alone."""
    base, path, query_string = url
    return collection.listing_at(base, path, query_string,
                                 'device_profiles', _listed(rows, base),
                                 page)


class DeviceProfilesController(resource.ResourceController):

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
        rows = db.listed_profiles(request.context, names=names, **page)
        url = (views.base_url(request), request.path_info,
               request.query_string)
        return self._rendered.body(rows, url, page)

    @expose.json()
    def get_one(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:get_one')
        uuid = uuids.canonical(key)
        if uuid is not None:
            profile = db.get_profile(request.context, uuid=uuid)
        elif request.version >= (2, 2):
            profile = db.get_profile(request.context, name=key)
        else:
            raise exception.NotAcceptable(
                'Finding a device profile by name (%s) needs microversion '
                '2.2 or later; use its uuid.' % key,
                code='cyborg.microversion_too_low')
        return {'device_profile': _view(profile, views.base_url(request))}

    @expose.json()
    def post(self, **params):
        request = pecan.request
        request.authorize('cyborg:device_profile:create')
        profiles = _new_profiles(request_body.load_json(request))
        rows = db.create_profiles(request.context, profiles)
        pecan.response.status = 201
        base = views.base_url(request)
        created = [_view(p, base) for p in rows]
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
