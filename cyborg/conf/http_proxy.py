"""[oslo_middleware] enable_proxy_headers_parsing, registered up front.

The app adds oslo.middleware's HTTPProxyToWSGI only when it is enabled.
"""

from oslo_middleware import http_proxy_to_wsgi


def register_opts(conf):
    conf.register_opts(http_proxy_to_wsgi.OPTS, group='oslo_middleware')
