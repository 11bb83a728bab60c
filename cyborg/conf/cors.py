"""[cors]: oslo.middleware's options with the service's defaults.

The defaults name the headers a browser may send and read across
origins; set before the middleware or the sample generator reads them.
"""

from oslo_middleware import cors

DEFAULTS = {
    'allow_headers': ['X-Auth-Token', 'X-Identity-Status', 'X-Roles',
                      'X-Service-Catalog', 'X-User-Id', 'X-Tenant-Id',
                      'X-OpenStack-Request-ID', 'OpenStack-API-Version'],
    'expose_headers': ['X-Auth-Token', 'X-Subject-Token', 'X-Service-Token',
                       'X-OpenStack-Request-ID', 'OpenStack-API-Version',
                       'OpenStack-API-Minimum-Version',
                       'OpenStack-API-Maximum-Version'],
    'allow_methods': ['GET', 'PUT', 'POST', 'DELETE', 'PATCH'],
}


def set_defaults():
    cors.set_defaults(**DEFAULTS)


def register_opts(conf):
    """Registered up front so the app can see whether CORS is wanted."""
    set_defaults()
    conf.register_opts(cors.CORS_OPTS, group='cors')
