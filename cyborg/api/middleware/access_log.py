"""The outermost layer: one log line per request, and a clean thread after.

The line, at INFO on the ``cyborg.api.access`` logger, says who asked
(the client's address), what (method, path and query string), and what
came of it (status, body bytes, milliseconds from arrival to the last
byte). It is logged with the request's context, so that oslo.log's
prefix carries the request id and the caller's user and project once
they are known. Bodies and headers (tokens) are never logged. What the
client chose, method, path and query string, is logged percent-encoded
beyond printable ASCII, so that a newline it sent (``%0A``, which the
server decodes in the path) cannot end the line and start a forged one.

The request's context makes itself the serving thread's current one,
which oslo.log stamps on every line the thread writes; it is undone here
once the response is sent, so that the thread's next lines carry no
finished request's id. A body over 10 KiB that the API read was copied by
webob to a temporary file, closed here too (left to the garbage
collector, it warns).
"""

import re
import time

from oslo_context import context as oslo_context
from oslo_log import log
from oslo_middleware import request_id

from cyborg import context as cyborg_context

LOG = log.getLogger('cyborg.api.access')

# Where this layer notes when a request arrived (``[api]
# conductor_timeout`` bounds the whole request from then).
STARTED = 'cyborg.request_started'
# Where the API leaves the request's context for the line.
CONTEXT = 'cyborg.context'

# Anything but printable ASCII, and the quote that closes the field; in
# the percent-decoded path, the percent sign too, so that what is logged
# reads as the URL the client sent.
_UNSAFE = re.compile(r'[^\x21\x23-\x7e]')
_UNSAFE_IN_PATH = re.compile(r'[^\x21\x23\x24\x26-\x7e]')


class AccessLog:

    def __init__(self, app):
        self._app = app

    def __call__(self, environ, start_response):
        environ[STARTED] = time.monotonic()
        given = environ.get('wsgi.input')
        previous = cyborg_context.current()
        status = []

        def noting_status(line, headers, exc_info=None):
            status[:] = [line.split(' ', 1)[0]]
            return start_response(line, headers, exc_info)

        try:
            body = self._app(environ, noting_status)
        except BaseException:
            # The server answers 500 for an app that raised.
            self._done(environ, '500', 0, previous, given)
            raise
        return _CountedBody(body, lambda sent: self._done(
            environ, status[0] if status else '-', sent, previous, given))

    def _done(self, environ, status, sent, previous, given):
        try:
            LOG.info('%s "%s %s" status %s len %d time %.1f ms',
                     environ.get('REMOTE_ADDR', '-'),
                     _UNSAFE.sub(_escape, environ.get('REQUEST_METHOD', '-')),
                     _path(environ),
                     status, sent,
                     (time.monotonic() - environ[STARTED]) * 1000,
                     context=_context(environ))
        finally:
            cyborg_context.restore_current(previous)
            copied = environ.get('wsgi.input')
            if copied is not given and copied is not None:
                copied.close()


class _CountedBody:
    """The response body as the app gave it, counting the bytes sent;
    ``done(sent)`` once the server closes it."""

    def __init__(self, body, done):
        self._body = body
        self._done = done
        self._sent = 0

    def __iter__(self):
        for chunk in self._body:
            self._sent += len(chunk)
            yield chunk

    def close(self):
        try:
            close = getattr(self._body, 'close', None)
            if close is not None:
                close()
        finally:
            self._done(self._sent)


def _path(environ):
    path = _UNSAFE_IN_PATH.sub(_escape, environ.get('SCRIPT_NAME', '')
                               + environ.get('PATH_INFO', ''))
    query = environ.get('QUERY_STRING')
    return '%s?%s' % (path, _UNSAFE.sub(_escape, query)) if query else path


def _escape(match):
    code = ord(match.group())
    # WSGI gives bytes as latin-1 characters: one %XX each.
    return '%%%02X' % code if code < 256 else '\\u%04x' % code


def _context(environ):
    """The request's context once the API made it; before that (a token
    refused), one that carries the request id alone."""
    found = environ.get(CONTEXT)
    if found is not None:
        return found
    return oslo_context.RequestContext(
        request_id=environ.get(request_id.ENV_REQUEST_ID), overwrite=False)
