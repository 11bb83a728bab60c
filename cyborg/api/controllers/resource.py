"""Routing of a REST collection: ``/<collection>[/<key>[/<action>]]``.

A table from (method, path shape) to handler, in the spirit of
Placement's route table. Pecan's RestController inspects every handler's
signature several times per request; this looks up one name.
"""

import pecan
from webob import exc as webob_exc

from cyborg import exception

# (method, number of path parts below the collection) -> handler name.
ROUTES = {
    ('GET', 0): 'get_all',
    ('POST', 0): 'post',
    ('PATCH', 0): 'patch_all',
    ('DELETE', 0): 'delete_all',
    ('GET', 1): 'get_one',
    ('PATCH', 1): 'patch',
    ('DELETE', 1): 'delete',
}


class MethodNotAllowed(exception.CyborgError):
    status = 405
    code = 'cyborg.method_not_allowed'

    def __init__(self, message, allowed):
        super().__init__(message)
        self.allowed = allowed


class ResourceController:
    """Base of the /v2 collections; subclasses define the handlers.

    ``ACTIONS`` maps (method, action) to a handler for
    ``/<collection>/<key>/<action>`` (e.g. a device's ``disable``);
    ``ITEM_ACTIONS`` for ``/<collection>/<key>/<action>/<item>`` (one
    project of a profile's), its handler given key and item;
    ``ACTIONS_FROM`` maps an action to the microversion that brought it,
    below which its path does not exist; ``FROM_VERSION``, when set, is
    that of the whole collection.
    """

    ACTIONS = {}
    ITEM_ACTIONS = {}
    ACTIONS_FROM = {}
    FROM_VERSION = None

    @pecan.expose()
    def _route(self, args, request=None):
        request = request if request is not None else pecan.request
        if self.FROM_VERSION and (request.version
                                  or (0, 0)) < self.FROM_VERSION:
            # As any path this version does not know.
            raise webob_exc.HTTPNotFound()
        # A trailing slash on the collection is the collection, except
        # for DELETE, where it names an empty key (a 400 from the handler).
        if args == [''] and request.method != 'DELETE':
            args = []
        if len(args) in (2, 3):
            if (request.version or (0, 0)) < self.ACTIONS_FROM.get(
                    args[1], (0, 0)):
                self._refuse(request, ())
            if len(args) == 3 and not args[2]:
                self._refuse(request, ())
            table = self.ACTIONS if len(args) == 2 else self.ITEM_ACTIONS
            name = table.get((request.method, args[1]))
            if name is None:
                self._refuse(request, {m for m, a in table
                                       if a == args[1]})
            return getattr(self, name), [args[0], *args[2:]]
        name = ROUTES.get((request.method, len(args)))
        if name is None or not hasattr(self, name):
            self._refuse(request, {m for (m, n), h in ROUTES.items()
                                   if n == len(args) and hasattr(self, h)})
        return getattr(self, name), args

    @staticmethod
    def _refuse(request, allowed):
        if not allowed:
            raise exception.NotFound('The resource %s could not be found.'
                                     % request.path)
        raise MethodNotAllowed(
            'The method %s is not allowed on %s.' % (request.method,
                                                      request.path),
            sorted(allowed))
