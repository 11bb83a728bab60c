"""Refuse request bodies larger than ``[oslo_middleware]
max_request_body_size``, before anything reads them.

A body that declares its length is refused from ``Content-Length`` alone
(413), unread. A chunked body declares none: the server's input is
wrapped so that reading past the limit raises ``RequestTooLarge``, which
the API answers with the same 413; no more than the limit and one read
is ever held. The API reads a body only once the caller is authorized
(``request_body``), so an unauthorized caller's body is not read at all.
"""

from cyborg import exception
from cyborg.api.middleware import input_guard

CODE = 'cyborg.request_too_large'


def sentence(limit):
    return ('The request body is larger than the %d bytes the API accepts.'
            % limit)


class _LimitedInput:
    """The server's input, refusing to give more than ``limit`` bytes."""

    def __init__(self, stream, limit):
        self._stream = stream
        self._limit = limit
        self._read = 0

    def read(self, size=-1):
        # One byte past the limit tells a body at the limit from a larger.
        room = self._limit + 1 - self._read
        if size is None or size < 0 or size > room:
            size = room
        chunk = self._stream.read(size)
        self._read += len(chunk)
        if self._read > self._limit:
            raise exception.RequestTooLarge(sentence(self._limit), CODE)
        return chunk

    def readline(self, size=-1):
        room = self._limit + 1 - self._read
        if size is None or size < 0 or size > room:
            size = room
        line = self._stream.readline(size)
        self._read += len(line)
        if self._read > self._limit:
            raise exception.RequestTooLarge(sentence(self._limit), CODE)
        return line

    def __iter__(self):
        while True:
            line = self.readline()
            if not line:
                return
            yield line

    def close(self):
        # The server's stream is the server's to close.
        pass


class BodyLimit:

    def __init__(self, app, conf):
        self._app = app
        self._limit = conf.oslo_middleware.max_request_body_size

    def __call__(self, environ, start_response):
        length = environ.get('CONTENT_LENGTH')
        if length:
            try:
                too_large = int(length) > self._limit
            except ValueError:
                return input_guard.refusal(
                    environ, 400, 'The Content-Length header is not a '
                    'number of bytes.', 'cyborg.invalid')(
                        environ, start_response)
            if too_large:
                return input_guard.refusal(
                    environ, 413, sentence(self._limit), CODE)(
                        environ, start_response)
        elif environ.get('wsgi.input_terminated'):
            # A body of no declared length (chunked), read to its end.
            environ['wsgi.input'] = _LimitedInput(environ['wsgi.input'],
                                                  self._limit)
        return self._app(environ, start_response)
