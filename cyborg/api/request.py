"""The request class of the app: pecan's, for less.

pecan's Request answers a UnicodeDecodeError raised while any of its
attributes is read with a 400, from ``__getattribute__``: a Python call on
every attribute read, over a hundred per request (webob reads
``environ`` through it for each of its own), a tenth of a small
request's time. Only the attributes that decode the request's bytes can
raise it; those alone are guarded here, the same way.

Pecan parses a JSON body into the controller's arguments before the
controller runs, and so before its policy check. The API's controllers
take no arguments from a JSON body: they parse it themselves, once the
caller is authorized (``request_body.load_json``). So pecan is given
none: a JSON body reads as absent here. (A form body, which webob
parses into ``POST``, carries a DELETE's filters from some clients; it
is bounded like any body by ``middleware.body_limit``.)
"""

import inspect
import logging

import pecan
import webob

# pecan's logger, which says it for pecan's Request.
LOG = logging.getLogger('pecan.core')

# webob's attributes that decode the path, the query string or the body.
DECODING = ('script_name', 'path_info', 'uscript_name', 'upath_info',
            'application_url', 'path_url', 'path', 'path_qs', 'url',
            'GET', 'POST', 'params', 'text')


def _guarded(found):
    def get(request):
        try:
            return found.__get__(request, type(request))
        except UnicodeDecodeError as e:
            LOG.exception(e)
            pecan.abort(400)

    return property(get, found.fset, found.fdel, found.__doc__)


def _not_read(request):
    # pecan takes a ValueError for a body that is not JSON and falls back
    # to ``params``, which holds no JSON body.
    raise ValueError('The API reads the request body after its policy '
                     'check (cyborg.api.request_body).')


class Request(webob.Request):

    json = json_body = property(_not_read)

for _name in DECODING:
    setattr(Request, _name,
            _guarded(inspect.getattr_static(webob.Request, _name)))
