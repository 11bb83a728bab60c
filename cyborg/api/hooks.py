"""Pecan hooks: the request's context, microversion and error bodies."""

import json
import logging
import os
import threading
import weakref

from pecan import hooks
import webob
from webob import exc as webob_exc

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg import policy
from cyborg.api import microversion
from cyborg.api.middleware import access_log
from cyborg.notifications import notifier as notifier_module

LOG = logging.getLogger(__name__)


# Seconds the API trusts its last read of the live conductors: binds
# follow a changed ring within this, at one SELECT per interval at most.
MEMBERSHIP_MAX_AGE = 3


class AppState:
    """What every request of one app shares: configuration, policy, DB,
    the conductor's RPC client, the live conductors' ring and the
    notifier (off unless configured; it makes its transport when it
    first sends).
    """

    def __init__(self, conf, db, enforcer, transport=None, notifier=None):
        self.conf = conf
        self.db = db
        self.enforcer = enforcer
        self.notifier = (notifier if notifier is not None
                         else notifier_module.Notifier(conf,
                                                       notifier_module.API))
        self._transport = transport
        self._own_transport = False
        self._conductor = None
        self._conductor_options = None
        self._conductor_lock = threading.Lock()
        self._membership = None
        self.warming = None  # the thread of ``warm_up``, once started
        self._limits = None

    @property
    def membership(self):
        """The live conductors as a hash ring, read again at most every
        ``MEMBERSHIP_MAX_AGE`` seconds."""
        if self._membership is None:
            self._make_membership()
        return self._membership.current()

    def _make_membership(self):
        from cyborg.conductor import membership
        with self._conductor_lock:
            if self._membership is None:
                self._membership = membership.Membership(
                    cyborg_context.admin_context(self.db),
                    self.conf.host, self.conf.service_down_time,
                    max_age=MEMBERSHIP_MAX_AGE)

    @property
    def limits(self):
        """The projects' limits (``cyborg.quota.limits``) of ``[quota]
        driver``, made on first use: oslo.limit asks Keystone for the
        service's endpoint when it is made."""
        if self._limits is None:
            from cyborg.quota import limits
            self._limits = limits.from_conf(self.conf)
        return self._limits

    @property
    def conductor(self):
        """The conductor's RPC API (see ``prepare_conductor``); made again
        if the options it was made from changed since (tests change them
        after building the app)."""
        if self._conductor is None or (
                self._conductor_options != self._options_now()):
            self._make_conductor()
        return self._conductor

    def _options_now(self):
        return (getattr(self.conf, 'transport_url', None),
                self.conf.upgrade_levels.conductor)

    def prepare_conductor(self):
        """Make the conductor's RPC API now, when the app is built.

        Made on first use, it cost a worker's first bind a third of a
        second (importing oslo.messaging, loading the driver). A
        transport must not cross a fork: in a process that forks after
        building the app (a WSGI server that loads the app before forking
        its workers), each child makes its own, at once, and never uses
        its parent's.
        """
        self._make_conductor()
        # Binds read the ring too; it reads the database on first use.
        self._make_membership()
        state = weakref.ref(self)

        def remake_in_child():
            # weak: the hook stays registered for the process's life.
            app_state = state()
            if app_state is not None and app_state._own_transport:
                # Another thread of the parent may have held it.
                app_state._conductor_lock = threading.Lock()
                app_state._transport = app_state._conductor = None
                app_state._make_conductor()

        os.register_at_fork(after_in_child=remake_in_child)

    def warm_up(self):
        """Open, on a thread of its own, what a worker's first bind would
        otherwise open itself: the database's pool (``Database.warm_up``;
        it writes nothing), the first read of the ring and a connection to
        the message bus. A neighbour that is down delays nothing: the
        requests that need it find out."""
        def run():
            try:
                self.db.warm_up()
                self.membership  # noqa: B018  (its first read)
                from cyborg import rpc
                rpc.open_send_connection(self._transport)
            except Exception as e:  # only the first requests are slower
                LOG.info('Warming up the API worker: %s', e)
        self.warming = threading.Thread(target=run, name='api-warm-up',
                                        daemon=True)
        self.warming.start()

    def _make_conductor(self):
        from cyborg import rpc
        from cyborg.conductor import rpcapi as conductor_rpcapi
        with self._conductor_lock:
            options = self._options_now()
            if self._conductor is not None and (
                    self._conductor_options == options):
                return
            transport = self._transport
            if transport is None or (self._own_transport and (
                    self._conductor_options[0] != options[0])):
                transport = rpc.get_transport(self.conf)
                rpc.import_connection_modules(self.conf)
                self._own_transport = True
                # Registered by then, if it was not.
                options = self._options_now()
            self._transport = transport
            self._conductor_options = options
            self._conductor = conductor_rpcapi.ConductorAPI(
                transport, version_cap=options[1])


def is_versioned(path):
    return path == '/v2' or path.startswith('/v2/')


class RequestHook(hooks.PecanHook):
    """Gives each request ``context``, ``version``, ``authorize``."""

    def __init__(self, app_state):
        self.app_state = app_state

    def on_route(self, state):
        request = state.request
        request.app_state = self.app_state
        request.version = None
        if is_versioned(request.path_info):
            # Set first so that a 406 for a bad header still carries the
            # version headers.
            request.version = microversion.MIN_VERSION
            request.version = microversion.requested(
                request.headers.get(microversion.HEADER))
        request.context = cyborg_context.RequestContext.from_environ(
            request.environ, db=self.app_state.db)
        _scope_from_user_token(request)
        request.environ[access_log.CONTEXT] = request.context

        def authorize(rule, target=None):
            policy.authorize(self.app_state.enforcer, request.context,
                             rule, target)
        request.authorize = authorize

        def is_allowed(rule, target=None):
            return policy.is_allowed(self.app_state.enforcer,
                                     request.context, rule, target)
        request.is_allowed = is_allowed

    def after(self, state):
        _add_version_headers(state.request, state.response)

    def on_error(self, state, e):
        request = state.request
        if isinstance(e, exception.CyborgError):
            status, message, code = e.status, e.message, e.code
        elif isinstance(e, webob_exc.HTTPException):
            status = e.status_int
            message = _webob_message(e, request)
            code = 'cyborg.http_%d' % status
        else:
            LOG.exception('Unexpected error on %s %s', request.method,
                          request.path)
            status = 500
            message = 'The server hit an unexpected error; see its log.'
            code = 'cyborg.internal_error'
        response = error_response(status, message, code)
        allowed = getattr(e, 'allowed', None)
        if allowed:
            response.headers['Allow'] = ', '.join(allowed)
        _add_version_headers(request, response)
        return response


def _scope_from_user_token(request):
    """The scope of the caller's own token, whatever else came along.

    keystonemiddleware writes one ``OpenStack-System-Scope`` header for
    the user token and then again for a service token, so a system-scoped
    user token sent with Nova's project-scoped service token would look
    like a project token without a project. The validated token says.
    """
    plugin = request.environ.get('keystone.token_auth')
    user = getattr(plugin, 'user', None)
    if user is None:
        return
    if user.system_scoped:
        request.context.system_scope = 'all'
        request.context.project_id = None


def _webob_message(e, request):
    if e.status_int == 404:
        return 'The resource %s could not be found.' % request.path
    if e.status_int == 405:
        return 'The method %s is not allowed on %s.' % (request.method,
                                                         request.path)
    return e.explanation or e.title


def _add_version_headers(request, response):
    version = getattr(request, 'version', None)
    if version is None and not is_versioned(request.path_info):
        return
    for name, value in microversion.response_headers(
            version or microversion.MIN_VERSION):
        response.headers[name] = value


def error_response(status, message, code):
    """The contract's error body, ``{"error_message": ...}``, and more.

    ``message`` repeats the sentence because openstacksdk (and so the
    ``openstack`` CLI) shows only a ``message`` key; ``code`` is stable
    for programs.
    """
    body = json.dumps({'error_message': message, 'message': message,
                       'code': code})
    return webob.Response(status=status, body=body.encode(),
                          content_type='application/json', charset='UTF-8')
