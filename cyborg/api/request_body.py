"""Reading JSON request bodies into checked values, with clear 4xx errors."""

import json

import wsme
from wsme.rest import json as wsme_json

from cyborg import exception

# Bytes asked of the server at a time for a body of no announced length.
_CHUNK = 65536


class UnsupportedMediaType(exception.CyborgError):
    status = 415
    code = 'cyborg.unsupported_media_type'


def is_json(request):
    return (request.content_type or '').split(';')[0].strip() == (
        'application/json')


def _parse(body):
    try:
        document = json.loads(body)
    except ValueError as e:
        raise exception.Invalid(
            'The request body is not valid JSON: %s.' % e,
            code='cyborg.body_not_json') from None
    except RecursionError:
        raise exception.Invalid(
            'The request body nests deeper than any request of the API.',
            code='cyborg.body_not_json') from None
    if _has_nul(document):
        # PostgreSQL refuses NUL in text, and no field means it.
        raise exception.Invalid(
            'The request body holds a NUL character (\\u0000), which no '
            'field accepts.', code='cyborg.invalid_characters')
    return document


def _has_nul(document):
    # Without recursion: the document may nest as deep as the parser
    # allows.
    pending = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if '\x00' in value:
                return True
        elif isinstance(value, dict):
            pending.extend(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def load_json(request):
    """The JSON document in the request body."""
    if not is_json(request):
        content_type = (request.content_type or '').split(';')[0].strip()
        raise UnsupportedMediaType(
            'The request body must be JSON sent as application/json, not %s.'
            % (content_type or 'a body without a content type'))
    # Read only now, once the caller is authorized (see ``request``).
    return _parse(_read(request))


def _read(request):
    """The body's bytes. One that announced its length is no larger than
    ``[oslo_middleware] max_request_body_size`` (``middleware.
    body_limit``); a chunked one is read here through the limit, which
    raises past it, rather than copied by webob to a temporary file that
    the error would leave open."""
    if request.content_length is not None:
        return request.body
    if not request.is_body_readable:
        return b''
    chunks = []
    while chunk := request.body_file_raw.read(_CHUNK):
        chunks.append(chunk)
    return b''.join(chunks)


def from_wsme(wstype, data, what):
    """Check ``data`` against the WSME type ``wstype``; ``what`` names it."""
    if not isinstance(data, dict):
        raise exception.Invalid('Each %s must be a JSON object, not %s.'
                                % (what, json_type(data)))
    try:
        value = wsme_json.fromjson(wstype, data)
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
    # WSME takes an explicit null as a value, even for mandatory fields.
    for attr in wsme.types.list_attributes(wstype):
        if attr.mandatory and getattr(value, attr.key) is None:
            raise exception.Invalid(
                'The %s field %s must not be null.' % (what, attr.name),
                code='cyborg.invalid_field')
    return value


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
