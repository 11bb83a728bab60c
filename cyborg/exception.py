"""Errors that carry the HTTP status and stable code they are answered with.

Anything the API raises that is not one of these is a bug and answers 500.
"""


class CyborgError(Exception):
    status = 500
    code = 'cyborg.internal_error'

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class Invalid(CyborgError):
    status = 400
    code = 'cyborg.invalid'


class Forbidden(CyborgError):
    status = 403
    code = 'cyborg.forbidden'


class NotFound(CyborgError):
    status = 404
    code = 'cyborg.not_found'


class NotAcceptable(CyborgError):
    status = 406
    code = 'cyborg.microversion_unsupported'


class Conflict(CyborgError):
    status = 409
    code = 'cyborg.conflict'


class Locked(CyborgError):
    status = 423
    code = 'cyborg.locked'


class RequestTooLarge(CyborgError):
    status = 413
    code = 'cyborg.request_too_large'
