"""Sending versioned notifications with oslo.messaging's Notifier.

Off unless ``[oslo_messaging_notifications] driver`` is set (for
RabbitMQ, ``messagingv2``); then sent to ``[notifications]
versioned_notifications_topics`` over ``[oslo_messaging_notifications]
transport_url``, or the RPC ``transport_url`` when that is unset.

Best effort: a notification is sent after the change it announces is
committed, on the thread that made the change, and one that cannot be
sent is logged and dropped, never failing the request or the bind.
Hence Cyborg's default of ``[oslo_messaging_notifications] retry`` is 0
(one attempt) where oslo.messaging's is -1, retrying forever while the
request waits.

While notifications are off, nothing here loads oslo.messaging or makes
a transport: the API serves requests without either.
"""

import logging
import os
import threading

LOG = logging.getLogger(__name__)

GROUP = 'oslo_messaging_notifications'
RETRY = 0

INFO = 'INFO'
WARN = 'WARN'
ERROR = 'ERROR'
PRIORITIES = (INFO, WARN, ERROR)

API = 'cyborg-api'
CONDUCTOR = 'cyborg-conductor'

# oslo.config reads options from the environment too.
_ENV_PREFIX = 'OS_%s__' % GROUP.upper()


def register_opts(conf):
    """oslo.messaging's ``[oslo_messaging_notifications]`` group, with
    Cyborg's default for ``retry``."""
    from cyborg import service  # noqa: F401, I001  (before oslo.messaging)
    from oslo_messaging import opts
    conf.register_opts(dict(opts.list_opts())[GROUP], group=GROUP)
    conf.set_default('retry', RETRY, group=GROUP)


def configured(conf):
    """Whether ``[oslo_messaging_notifications] driver`` is set; when no
    configuration source names the group, known without loading
    oslo.messaging."""
    if (GROUP not in conf and GROUP not in conf.list_all_sections()
            and not any(k.startswith(_ENV_PREFIX) for k in os.environ)):
        return False
    register_opts(conf)
    return bool(conf[GROUP].driver)


class Notifier:
    """The notifications of one service on one host (publisher id
    ``<service>:<host>``, as Nova's ``nova-compute:<host>``).

    ``enabled`` is read once, when it is made; the transport is made by
    the first notification sent, and released by ``close``, unless one
    is given (``transport``: a notification transport its caller keeps).
    """

    def __init__(self, conf, service, host=None, transport=None):
        self.conf = conf
        self.publisher_id = '%s:%s' % (service, host or conf.host)
        self.enabled = configured(conf)
        self._lock = threading.Lock()
        self._given_transport = transport
        self._transport = None
        self._notifier = None
        self._closed = False

    def _messaging_notifier(self):
        with self._lock:
            if self._closed:
                return None
            if self._notifier is None:
                import oslo_messaging as messaging

                from cyborg import rpc
                transport = self._given_transport
                if transport is None:
                    transport = self._transport = (
                        messaging.get_notification_transport(self.conf))
                self._notifier = messaging.Notifier(
                    transport, self.publisher_id,
                    serializer=rpc.ContextSerializer(),
                    topics=self.conf.notifications
                    .versioned_notifications_topics)
            return self._notifier

    def send(self, context, event_type, payload, priority=INFO):
        """Send ``payload`` (a ``payloads.Payload``) as ``event_type``.
        oslo.messaging logs a notification its driver failed to send;
        anything else that fails is logged here."""
        if not self.enabled:
            return
        try:
            notifier = self._messaging_notifier()
            if notifier is None:
                LOG.debug('Not sending %s: the service is stopping',
                          event_type)
                return
            send = {INFO: notifier.info, WARN: notifier.warn,
                    ERROR: notifier.error}[priority]
            send(context, event_type, payload.to_primitive())
        except Exception:
            LOG.exception('Could not send notification %s', event_type)

    def close(self):
        """Send no more; release the transport, if this made one."""
        with self._lock:
            self._closed = True
            transport, self._transport, self._notifier = (
                self._transport, None, None)
        if transport is not None:
            transport.cleanup()


class Disabled(Notifier):
    """A notifier that sends nothing, whatever the configuration: for
    code run without a service around it."""

    def __init__(self):
        self.publisher_id = None
        self.enabled = False

    def close(self):
        pass


DISABLED = Disabled()
