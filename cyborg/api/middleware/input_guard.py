"""Refuse request lines that no resource can mean, before pecan sees them.

A path or query string that is not UTF-8 once percent-decoded makes
pecan answer its own HTML page; a NUL character reaches the database,
where PostgreSQL refuses it in any text value. Neither is a name, uuid
or filter value of the API, so both are answered here with the API's
400 (``cyborg.invalid_characters``). A JSON body is checked the same way
where it is parsed (``request_body``).
"""

import urllib.parse

from cyborg import exception
from cyborg.api import hooks
from cyborg.api import microversion

CODE = 'cyborg.invalid_characters'


def problem(text, where):
    """The sentence that refuses ``text`` (found in ``where``), or None."""
    if '\x00' in text:
        return ('The %s holds a NUL character (%%00), which no part of '
                'the API accepts.' % where)
    return None


def _path_problem(environ):
    raw = environ.get('PATH_INFO', '')
    try:
        # PEP 3333: the percent-decoded bytes, as latin-1.
        path = raw.encode('latin-1').decode('utf-8')
    except (UnicodeEncodeError, UnicodeDecodeError):
        return 'The path is not UTF-8 once percent-decoded.'
    return problem(path, 'path')


def _query_problem(environ):
    query = environ.get('QUERY_STRING', '')
    if not query:
        return None
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True,
                                       encoding='utf-8', errors='strict')
    except UnicodeDecodeError:
        return 'The query string is not UTF-8 once percent-decoded.'
    for name, value in pairs:
        found = problem(name + value, 'query string')
        if found:
            return found
    return None


class InputGuard:

    def __init__(self, app):
        self._app = app

    def __call__(self, environ, start_response):
        sentence = _path_problem(environ) or _query_problem(environ)
        if sentence is None:
            return self._app(environ, start_response)
        return refusal(environ, 400, sentence, CODE)(environ, start_response)


def refusal(environ, status, sentence, code):
    """The API's error response, for a request refused before pecan: with
    the microversion headers a versioned path answers with."""
    response = hooks.error_response(status, sentence, code)
    if hooks.is_versioned(environ.get('PATH_INFO', '')):
        try:
            version = microversion.requested(
                environ.get('HTTP_OPENSTACK_API_VERSION'))
        except exception.CyborgError:
            version = microversion.MIN_VERSION
        response.headers.update(microversion.response_headers(version))
    return response
