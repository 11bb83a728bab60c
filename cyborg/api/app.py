"""The WSGI application, assembled in one place from a configuration."""

from oslo_middleware import cors
from oslo_middleware import http_proxy_to_wsgi
import pecan

from cyborg import policy
from cyborg.api import argspec
from cyborg.api import expose
from cyborg.api import hooks
from cyborg.api import request
from cyborg.api.controllers import root
from cyborg.api.middleware import access_log
from cyborg.api.middleware import auth
from cyborg.api.middleware import body_limit
from cyborg.api.middleware import input_guard
from cyborg.api.middleware import request_id
from cyborg.db import session


def build_app(conf, db=None, transport=None, notifier=None, warm=False):
    """The API as a WSGI callable, configured by ``conf`` (a ConfigOpts).

    ``db`` lets a caller share one ``Database`` with the app (tests do);
    ``transport`` is the oslo.messaging transport to the conductor, made
    from ``conf`` here when not given (see ``AppState.prepare_conductor``);
    ``notifier`` sends the API's notifications (made from ``conf`` when
    not given; a caller that gives one closes it). ``warm`` opens the
    database and message bus connections at once (``AppState.warm_up``),
    as a serving process wants.
    """
    argspec.install()
    db = db if db is not None else session.Database(conf)
    state = hooks.AppState(conf, db, policy.DecisionCache(
        policy.make_enforcer(conf)), transport=transport, notifier=notifier)
    state.prepare_conductor()
    if warm:
        state.warm_up()
    app = pecan.Pecan(
        root.RootController(),
        hooks=[hooks.RequestHook(state)],
        custom_renderers={expose.RENDERER: expose.JSONRenderer},
        force_canonical=False,
        request_cls=request.Request,
        guess_content_type_from_ext=False,
    )
    # Inside authentication: an anonymous caller learns nothing here.
    app = input_guard.InputGuard(app)
    if conf.auth_strategy == 'keystone':
        app = auth.KeystoneAuth(app, conf)
    else:
        app = auth.NoAuth(app)
    # Each middleware costs time on every request: only those configured.
    if conf.cors.allowed_origin:
        app = cors.CORS(app, conf)
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    # Before authentication: a body too large is refused unread, and
    # without asking Keystone about its token.
    app = body_limit.BodyLimit(app, conf)
    # Outermost: every request, a CORS preflight too, has an id and a
    # line in the log.
    app = request_id.RequestId(app)
    return access_log.AccessLog(app)
