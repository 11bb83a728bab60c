"""/v2/attributes: key/value facts about deployables."""

import pecan
import wsme
from wsme import types as wtypes

from cyborg import exception
from cyborg.api import collection
from cyborg.api import expose
from cyborg.api import request_body
from cyborg.api import uuids
from cyborg.api import views
from cyborg.api.controllers import resource
from cyborg.db.api import attributes as db

_MISSING = object()
# The largest row id of any engine: a larger number names no row (and
# SQLite cannot even compare one with its ids).
MAX_ROW_ID = 2 ** 63 - 1


class NewAttribute(wtypes.Base):
    # deployable_id is checked by deployable_ref: a uuid or a row id.
    key = wsme.wsattr(wtypes.StringType(min_length=1, max_length=255),
                      mandatory=True)
    value = wsme.wsattr(wtypes.StringType(max_length=255), mandatory=True)


def deployable_ref(value, where):
    """A deployable's uuid (str) or row id (int) from a client's value.

    python-cyborgclient sends the row id as a string, e.g. ``"1"``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 < value <= MAX_ROW_ID:
            return value
    elif isinstance(value, str):
        digits = value.lstrip('0')
        # Compared as text first: no huge number is ever built.
        if (value.isascii() and value.isdigit() and digits
                and len(digits) <= len(str(MAX_ROW_ID))
                and int(digits) <= MAX_ROW_ID):
            return int(digits)
        checked = uuids.canonical(value)
        if checked is not None:
            return checked
    raise exception.Invalid(
        'The %s deployable_id must be the uuid or the id of a deployable, '
        'not %s.' % (where, value if isinstance(value, str)
                     else request_body.json_type(value)),
        code='cyborg.attribute.deployable_invalid')


def _new_attribute(body):
    # python-cyborgclient wraps the attribute as {"attribute": {...}}.
    if (isinstance(body, dict) and set(body) == {'attribute'}
            and isinstance(body['attribute'], dict)):
        body = body['attribute']
    deployable = _MISSING
    if isinstance(body, dict):
        body = dict(body)
        deployable = body.pop('deployable_id', _MISSING)
    new = request_body.from_wsme(NewAttribute, body, 'attribute')
    if deployable is _MISSING:
        raise exception.Invalid('An attribute needs the field deployable_id.')
    return deployable_ref(deployable, 'attribute field'), new.key, new.value


def _view(attribute, base_url):
    return {
        'uuid': attribute.uuid,
        'deployable_id': attribute.deployable_uuid,
        'key': attribute.key,
        'value': attribute.value,
        'created_at': views.timestamp(attribute.created_at),
        'updated_at': views.timestamp(attribute.updated_at),
        'links': views.self_link(base_url, 'attributes', attribute.uuid),
    }


def _item_uuid(key):
    checked = uuids.canonical(key)
    if checked is None:
        raise exception.NotFound('No attribute with uuid %s exists.' % key,
                                 code='cyborg.attribute.not_found')
    return checked


class AttributesController(resource.ResourceController):

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:attribute:get_all')
        page = collection.page_params(request, params, {'key', 'created_at'})
        deployable = params.get('deployable_id')
        if deployable is not None:
            deployable = deployable_ref(deployable, 'filter')
        key = collection.single(params, 'key')
        if key is not None and not key:
            raise exception.Invalid('The key filter needs a key.',
                                    code='cyborg.invalid_filter')
        rows = db.list_attributes(request.context, deployable=deployable,
                                  key=key, **page)
        base = views.base_url(request)
        return collection.listing(request, 'attributes',
                                  [_view(a, base) for a in rows], page)

    @expose.json()
    def get_one(self, key, **params):
        request = pecan.request
        request.authorize('cyborg:attribute:get_one')
        row = db.get_attribute(request.context, _item_uuid(key))
        return _view(row, views.base_url(request))

    @expose.json()
    def post(self, **params):
        request = pecan.request
        request.authorize('cyborg:attribute:create')
        deployable, key, value = _new_attribute(
            request_body.load_json(request))
        uuid = db.create_attribute(request.context, deployable, key, value)
        pecan.response.status = 201
        return _view(db.get_attribute(request.context, uuid),
                     views.base_url(request))

    @expose.json()
    def delete(self, key='', **params):
        request = pecan.request
        request.authorize('cyborg:attribute:delete')
        if not key:
            raise exception.Invalid('The attribute to delete has an empty '
                                    'uuid.')
        db.delete_attribute(request.context, _item_uuid(key))
        pecan.response.status = 204
