"""Each request's id: oslo.middleware's RequestId, without webob.

The same ids, environ keys and response header as
``oslo_middleware.request_id.RequestId``, which wraps each request and
response in webob objects: a tenth of a small GET's time, for two
headers.
"""

import re

from oslo_context import context
from oslo_middleware import request_id as oslo_request_id
from webob import exc as webob_exc

HEADER = oslo_request_id.HTTP_RESP_HEADER_REQUEST_ID
_GLOBAL_ID = re.compile(oslo_request_id.ID_FORMAT)


class RequestId:

    def __init__(self, app):
        self._app = app

    def __call__(self, environ, start_response):
        # A caller's id for the whole operation (Nova's), if well formed.
        given = environ.get('HTTP_X_OPENSTACK_REQUEST_ID', '')
        if _GLOBAL_ID.match(given):
            environ[oslo_request_id.GLOBAL_REQ_ID] = given
        req_id = context.generate_request_id()
        environ[oslo_request_id.ENV_REQUEST_ID] = req_id

        def with_id(status, headers, exc_info=None):
            if not any(name.lower() == HEADER for name, _ in headers):
                headers = list(headers) + [(HEADER, req_id)]
            return start_response(status, headers, exc_info)

        try:
            return self._app(environ, with_id)
        except webob_exc.HTTPException as e:
            # As webob's wsgify around oslo's answers them.
            return e(environ, with_id)
