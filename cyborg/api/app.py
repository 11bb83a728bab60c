"""The WSGI application, assembled in one place from a configuration."""

from oslo_middleware import cors
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import request_id
import pecan

from cyborg import policy
from cyborg.api import expose
from cyborg.api import hooks
from cyborg.api.controllers import root
from cyborg.api.middleware import auth
from cyborg.db import session

# Headers a browser may send and read across origins.
CORS_DEFAULTS = {
    'allow_headers': ['X-Auth-Token', 'X-Identity-Status', 'X-Roles',
                      'X-Service-Catalog', 'X-User-Id', 'X-Tenant-Id',
                      'X-OpenStack-Request-ID', 'OpenStack-API-Version'],
    'expose_headers': ['X-Auth-Token', 'X-Subject-Token', 'X-Service-Token',
                       'X-OpenStack-Request-ID', 'OpenStack-API-Version',
                       'OpenStack-API-Minimum-Version',
                       'OpenStack-API-Maximum-Version'],
    'allow_methods': ['GET', 'PUT', 'POST', 'DELETE', 'PATCH'],
}


def set_cors_defaults():
    cors.set_defaults(**CORS_DEFAULTS)


def build_app(conf, db=None):
    """The API as a WSGI callable, configured by ``conf`` (a ConfigOpts).

    ``db`` lets a caller share one ``Database`` with the app (tests do).
    """
    db = db if db is not None else session.Database(conf)
    state = hooks.AppState(conf, db, policy.make_enforcer(conf))
    app = pecan.Pecan(
        root.RootController(),
        hooks=[hooks.RequestHook(state)],
        custom_renderers={expose.RENDERER: expose.JSONRenderer},
        force_canonical=False,
        guess_content_type_from_ext=False,
    )
    if conf.auth_strategy == 'keystone':
        app = auth.KeystoneAuth(app, conf)
    else:
        app = auth.NoAuth(app)
    app = request_id.RequestId(app)
    set_cors_defaults()
    app = cors.CORS(app, conf)
    app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app
