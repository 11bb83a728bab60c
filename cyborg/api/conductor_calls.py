"""Calling the conductor from a request, with its errors as HTTP ones.

The conductor's exceptions arrive as oslo.messaging RemoteErrors named by
class; those that mean bad input or a conflict become the API's own, and
an unreachable conductor is a 503, never a 500.
"""

import time

from cyborg import exception
from cyborg.api.middleware import access_log

# Kept from ``[api] conductor_timeout`` for writing the answer after a wait.
REPLY_MARGIN = 0.2
SHORTEST_WAIT = 0.1


class ConductorUnavailable(exception.CyborgError):
    status = 503
    code = 'cyborg.conductor_unavailable'


# Remote class name -> what the caller gets. BindRefused and the
# programming refusals are conflicts with the state of a device.
_REMOTE_ERRORS = {
    'Invalid': exception.Invalid,
    'NotFound': exception.NotFound,
    'Conflict': exception.Conflict,
    'InvalidTransition': exception.Conflict,
    'BindRefused': exception.Conflict,
    'ProgramRefused': exception.Conflict,
    'ImageNotFound': exception.NotFound,
    'BitstreamNotFound': exception.NotFound,
    # The ring moved between the API's choice and the call: ask again.
    'NotOwner': ConductorUnavailable,
}


def call(request, method, *args, unavailable=None, **options):
    """``conductor.<method>(context, *args, **options)``; an option left
    None (``timeout``, ``server``) is not passed. ``unavailable`` is the
    sentence for a conductor that does not answer."""
    import oslo_messaging as messaging  # as late as the transport itself
    conductor = request.app_state.conductor
    options = {k: v for k, v in options.items() if v is not None}
    try:
        return getattr(conductor, method)(request.context, *args, **options)
    except messaging.MessagingTimeout:
        raise ConductorUnavailable(
            unavailable or 'The conductor did not answer in time.') from None
    except messaging.MessageDeliveryFailure:
        raise ConductorUnavailable(
            'The conductor cannot be reached; try again later.') from None
    except messaging.RemoteError as e:
        known = _REMOTE_ERRORS.get(e.exc_type)
        if known is None:
            raise
        raise known(e.value) from None


def time_left(request):
    """Seconds this request may still wait for a conductor: ``[api]
    conductor_timeout`` less what the request spent before (the token
    check, its database writes) and a margin for the answer."""
    bound = request.app_state.conf.api.conductor_timeout
    started = request.environ.get(access_log.STARTED)
    spent = 0.0 if started is None else time.monotonic() - started
    return max(SHORTEST_WAIT, bound - spent - REPLY_MARGIN)
