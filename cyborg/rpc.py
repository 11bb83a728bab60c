"""oslo.messaging plumbing: transports, clients and threading servers.

RabbitMQ in production (``[DEFAULT] transport_url``); the single-machine
mode and some tests use oslo.messaging's in-process ``fake://`` driver.
Request contexts travel as dicts and come back as ``RequestContext``.

Rolling upgrades: each RPC API has a ``MAJOR.MINOR`` version. A client
may be capped (``[upgrade_levels]``) at the version of the oldest
service that may receive its messages; ``CappedClient.prepare`` refuses,
with ``VersionCapped``, a call that needs more, and a method that has an
older form asks ``can_send_version`` first. Endpoints take the keyword
arguments of a newer caller without failing (``ignores_unknown_args``).
"""

# First: selects oslo.service's threading backend before oslo.messaging
# imports it (the API process loads this module only when it needs RPC).
from cyborg import service  # noqa: F401, I001

import functools
import inspect
import logging
import threading

import oslo_messaging as messaging

from cyborg import context as cyborg_context
from cyborg import exception

LOG = logging.getLogger(__name__)

CONDUCTOR_TOPIC = 'cyborg-conductor'
AGENT_TOPIC = 'cyborg-agent'


class ContextSerializer(messaging.NoOpSerializer):
    """Carries the caller's context across RPC, without its DB handle."""

    def __init__(self, db=None):
        self._db = db

    def serialize_context(self, context):
        # The Notifier passes {} for a notification sent without one.
        return context if isinstance(context, dict) else context.to_dict()

    def deserialize_context(self, context):
        return cyborg_context.RequestContext.from_dict(context, db=self._db)


def register_opts(conf):
    """Options oslo.messaging reads on every call and every message a
    server receives, but registers only on the global ``cfg.CONF``.
    """
    from oslo_messaging._metrics import client as metrics
    from oslo_messaging._tracing import client as tracing
    conf.register_opts(tracing.oslo_messaging_tracing,
                       group='oslo_messaging_tracing')
    conf.register_opts(metrics.oslo_messaging_metrics,
                       group='oslo_messaging_metrics')


def get_transport(conf, url=None):
    """The RPC transport of ``[DEFAULT] transport_url``, or of ``url``
    (the single-machine mode passes ``fake://``).
    """
    register_opts(conf)
    return messaging.get_rpc_transport(conf, url=url)


def open_send_connection(transport, retry=1):
    """Connect one of ``transport``'s pooled send connections now and
    leave it in the pool, so that the first cast does not wait for the
    TCP and AMQP handshakes. False for a driver without such a pool
    (``fake://``). oslo.messaging has no public call for this: it is its
    drivers' own ``_get_connection``, looked up with care."""
    from oslo_messaging._drivers import common as driver_common
    opener = getattr(getattr(transport, '_driver', None), '_get_connection',
                     None)
    if opener is None:
        return False
    with opener(driver_common.PURPOSE_SEND, retry=retry):
        return True


def import_connection_modules(conf):
    """Import what the driver would import on its first connection:
    kombu loads its AMQP transport then, a few milliseconds of the first
    call to RabbitMQ."""
    url = messaging.TransportURL.parse(conf, conf.transport_url)
    if url.transport == 'rabbit':
        from kombu import transport as kombu_transport
        kombu_transport.get_transport_cls('pyamqp')


class VersionCapped(exception.CyborgError):
    """A call needs a newer RPC API than ``[upgrade_levels]`` allows."""

    status = 503
    code = 'cyborg.rpc_version_capped'


def get_client(transport, topic, version, server=None, timeout=None,
               version_cap=None):
    """An RPC client of ``topic``; ``version_cap`` (``[upgrade_levels]``)
    is the newest version it may send, None for ``version``."""
    target = messaging.Target(topic=topic, version=version, server=server)
    return messaging.get_rpc_client(transport, target,
                                    serializer=ContextSerializer(),
                                    timeout=timeout,
                                    version_cap=version_cap)


class CappedClient:
    """An RPC client that says plainly when its cap forbids a call.

    ``peer`` names the receiving side in messages (``conductor``,
    ``agent``), as its ``[upgrade_levels]`` option does.
    """

    def __init__(self, transport, topic, version, peer, version_cap=None,
                 server=None, timeout=None):
        self.peer = peer
        self.version_cap = version_cap
        self.client = get_client(transport, topic, version, server=server,
                                 timeout=timeout, version_cap=version_cap)

    def can_send_version(self, version):
        return self.client.can_send_version(version)

    def prepare(self, method, version, **kwargs):
        """The call context of ``method``, sent as ``version``."""
        if not self.can_send_version(version):
            raise VersionCapped(
                '%s needs %s RPC API %s, but [upgrade_levels] %s = %s '
                'pins it lower; raise or remove the pin once every %s runs '
                'a release that serves %s.'
                % (method, self.peer, version, self.peer,
                   self.version_cap, self.peer, version))
        return self.client.prepare(version=version, **kwargs)


_ignored_seen = set()
_ignored_seen_lock = threading.Lock()


def ignores_unknown_args(endpoint):
    """An RPC endpoint method that drops the keyword arguments it does
    not take (a newer caller's additions) instead of failing with
    TypeError, and says so once at debug level.

    Put it next to the ``def``: it reads the method's own signature.
    """
    parameters = inspect.signature(endpoint).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        raise TypeError('%s takes **kwargs already: decorate the method '
                        'itself' % endpoint.__qualname__)
    known = set(parameters)

    @functools.wraps(endpoint)
    def tolerant(self, context, *args, **kwargs):
        unknown = tuple(sorted(set(kwargs) - known))
        if unknown:
            for name in unknown:
                del kwargs[name]
            key = (endpoint.__qualname__, unknown)
            with _ignored_seen_lock:
                first = key not in _ignored_seen
                _ignored_seen.add(key)
            if first:
                LOG.debug('%s: ignoring arguments %s of a newer caller',
                          endpoint.__qualname__, ', '.join(unknown))
        return endpoint(self, context, *args, **kwargs)
    return tolerant


class _ContextScopedDispatcher(messaging.RPCDispatcher):
    """Undoes, once a message is handled, the context its deserializing
    made the executor thread's current one: the thread's later lines
    (the next message's arrival, its errors) must not carry this
    message's request id."""

    def dispatch(self, incoming):
        previous = cyborg_context.current()
        try:
            return super().dispatch(incoming)
        finally:
            cyborg_context.restore_current(previous)


def get_server(transport, topic, server, endpoints, db=None):
    """An RPC server on ``topic``/``server`` with the threading executor,
    which oslo.messaging chooses by itself in a process that eventlet did
    not patch (naming it is deprecated).

    Built as ``messaging.get_rpc_server`` builds it, with a dispatcher
    that scopes each message's context to its handling."""
    from oslo_messaging.rpc import server as rpc_server
    target = messaging.Target(topic=topic, server=server)
    dispatcher = _ContextScopedDispatcher(endpoints, ContextSerializer(db))
    return rpc_server.RPCServer(transport, target, dispatcher)
