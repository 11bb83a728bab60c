"""oslo.messaging plumbing: transports, clients and threading servers.

RabbitMQ in production (``[DEFAULT] transport_url``); the single-machine
mode and some tests use oslo.messaging's in-process ``fake://`` driver.
Request contexts travel as dicts and come back as ``RequestContext``.
"""

# First: selects oslo.service's threading backend before oslo.messaging
# imports it (the API process loads this module only when it needs RPC).
from cyborg import service  # noqa: F401, I001

import oslo_messaging as messaging

from cyborg import context as cyborg_context

CONDUCTOR_TOPIC = 'cyborg-conductor'
AGENT_TOPIC = 'cyborg-agent'


class ContextSerializer(messaging.NoOpSerializer):
    """Carries the caller's context across RPC, without its DB handle."""

    def __init__(self, db=None):
        self._db = db

    def serialize_context(self, context):
        return context.to_dict()

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


def get_client(transport, topic, version, server=None, timeout=None):
    target = messaging.Target(topic=topic, version=version, server=server)
    return messaging.get_rpc_client(transport, target,
                                    serializer=ContextSerializer(),
                                    timeout=timeout)


def get_server(transport, topic, server, endpoints, db=None):
    """An RPC server on ``topic``/``server`` with the threading executor."""
    target = messaging.Target(topic=topic, server=server)
    return messaging.get_rpc_server(
        transport, target, endpoints, executor='threading',
        serializer=ContextSerializer(db))
