"""[oslo_middleware] max_request_body_size, registered up front.

The API enforces it itself (``cyborg.api.middleware.body_limit``), with
oslo.middleware's option so that it is set where OpenStack services set
it.
"""

from oslo_middleware import sizelimit


def register_opts(conf):
    conf.register_opts(sizelimit.OPTS, group='oslo_middleware')
