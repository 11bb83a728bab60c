"""Pecan's signature inspection, done once per controller function.

Pecan calls ``pecan.util.getargspec`` on every request, twice (routing
asks it of ``_route``, the dispatch of the controller it found), and each
call runs ``inspect.getfullargspec`` and builds a new namedtuple class:
a tenth of a small GET's time. A function's signature never changes, so
the answer is kept per function. Pecan's callers only read it (they copy
the argument list before changing it).
"""

import functools

import pecan.core
import pecan.rest
import pecan.routing
import pecan.util

_ORIGINAL = pecan.util.getargspec
# The modules that imported the function by name, each with its own copy.
_USERS = (pecan.core, pecan.rest, pecan.routing)


@functools.lru_cache(maxsize=1024)
def _of_function(function):
    return _ORIGINAL(function)


def getargspec(method):
    """``pecan.util.getargspec(method)``, from a cache.

    A bound method is a new object at each attribute access; its
    signature is its function's (``self`` included), so the function is
    the key.
    """
    function = getattr(method, '__func__', method)
    try:
        return _of_function(function)
    except TypeError:  # an unhashable callable: not worth keeping
        return _ORIGINAL(method)


def install():
    """Make pecan use the cached lookup; calling it again changes
    nothing."""
    for module in _USERS:
        module.getargspec = getargspec
