"""The request class of the app: pecan's, for less.

pecan's Request answers a UnicodeDecodeError raised while any of its
attributes is read with a 400, from ``__getattribute__``: a Python call on
every attribute read, over a hundred per request (webob reads
``environ`` through it for each of its own), a tenth of a small
request's time. Only the attributes that decode the request's bytes can
raise it; those alone are guarded here, the same way.
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
            'GET', 'POST', 'params', 'text', 'json', 'json_body')


def _guarded(found):
    def get(request):
        try:
            return found.__get__(request, type(request))
        except UnicodeDecodeError as e:
            LOG.exception(e)
            pecan.abort(400)

    return property(get, found.fset, found.fdel, found.__doc__)


class Request(webob.Request):
    pass


for _name in DECODING:
    setattr(Request, _name,
            _guarded(inspect.getattr_static(webob.Request, _name)))
