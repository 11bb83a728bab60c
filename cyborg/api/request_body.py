"""Reading JSON request bodies into checked values, with clear 4xx errors."""

import json

import wsme
from wsme.rest import json as wsme_json

from cyborg import exception


class UnsupportedMediaType(exception.CyborgError):
    status = 415
    code = 'cyborg.unsupported_media_type'


def load_json(request):
    """The JSON document in the request body."""
    content_type = (request.content_type or '').split(';')[0].strip()
    if content_type != 'application/json':
        raise UnsupportedMediaType(
            'The request body must be JSON sent as application/json, not %s.'
            % (content_type or 'a body without a content type'))
    try:
        return json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as e:
        raise exception.Invalid(
            'The request body is not valid JSON: %s.' % e,
            code='cyborg.body_not_json') from None


def from_wsme(wstype, data, what):
    """Check ``data`` against the WSME type ``wstype``; ``what`` names it."""
    if not isinstance(data, dict):
        raise exception.Invalid('Each %s must be a JSON object, not %s.'
                                % (what, json_type(data)))
    try:
        return wsme_json.fromjson(wstype, data)
    except wsme.exc.UnknownAttribute as e:
        raise exception.Invalid(
            'A %s has no field %s.' % (what, ', '.join(sorted(e.attributes))),
            code='cyborg.unknown_field') from None
    except wsme.exc.InvalidInput as e:
        if e.msg == 'Mandatory field missing.':
            message = 'A %s needs the field %s.' % (what, e.fieldname)
        else:
            message = 'The %s field %s is invalid: %s' % (
                what, e.fieldname, e.msg.rstrip('.') + '.')
        raise exception.Invalid(message, code='cyborg.invalid_field') \
            from None
    except ValueError as e:
        raise exception.Invalid('The %s is invalid: %s.' % (what, e)) \
            from None


def json_type(value):
    """The JSON name of the type of ``value``, for error messages."""
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, (int, float)):
        return 'a number'
    if isinstance(value, str):
        return 'a string'
    if isinstance(value, list):
        return 'an array'
    return 'an object'
