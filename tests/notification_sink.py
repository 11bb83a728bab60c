"""Receiving Cyborg's versioned notifications as a consumer does: an
oslo.messaging notification listener on the versioned topic, and each
payload checked against its JSON Schema in ``cyborg/notifications/schemas``.
"""

# First: oslo.service's threading backend, before oslo.messaging loads.
from cyborg import service  # noqa: F401, I001

import contextlib
import json
import threading
import time

import jsonschema
import oslo_messaging as messaging

from cyborg.notifications import emit
from cyborg.notifications import payloads

TOPIC = 'versioned_notifications'


def schema_of(name):
    path = payloads.SCHEMA_DIR / ('%s.json' % name)
    return json.loads(path.read_text())


def check_payload(payload):
    """Raises ``jsonschema.ValidationError`` unless ``payload`` is valid
    by the schema its ``cyborg_object.name`` names."""
    schema = schema_of(payload[payloads.PREFIX + 'name'])
    jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(payload)


def check(message):
    """One received notification: its payload valid by its schema and
    of the kind its event type sends."""
    check_payload(message['payload'])
    kind, _ = emit.EVENTS[message['event_type']]
    assert message['payload'][payloads.PREFIX + 'name'] == kind.NAME, message


class Sink:
    """The listener's endpoint: keeps every notification, in order."""

    def __init__(self):
        self._lock = threading.Lock()
        self._messages = []

    def _keep(self, priority, publisher_id, event_type, payload, metadata):
        with self._lock:
            self._messages.append({
                'priority': priority, 'publisher_id': publisher_id,
                'event_type': event_type, 'payload': payload,
                'metadata': metadata})

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self._keep('INFO', publisher_id, event_type, payload, metadata)

    def warn(self, ctxt, publisher_id, event_type, payload, metadata):
        self._keep('WARN', publisher_id, event_type, payload, metadata)

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        self._keep('ERROR', publisher_id, event_type, payload, metadata)

    @property
    def messages(self):
        """In the order they were sent: each priority has a queue of its
        own, and the listener's threads take them in parallel."""
        with self._lock:
            return sorted(self._messages,
                          key=lambda m: m['metadata']['timestamp'])

    def wait_for(self, count, timeout=20):
        """The first ``count`` notifications, once received."""
        deadline = time.monotonic() + timeout
        while len(self.messages) < count:
            assert time.monotonic() < deadline, (
                'got %d notifications of %d: %s'
                % (len(self.messages), count,
                   [m['event_type'] for m in self.messages]))
            time.sleep(0.05)
        return self.messages[:count]

    def events_of(self, uuid, count, timeout=20):
        """The event types received about one ARQ (or device), in order,
        once there are ``count``."""
        deadline = time.monotonic() + timeout
        while len(self.of(uuid)) < count:
            assert time.monotonic() < deadline, (uuid, self.of(uuid))
            time.sleep(0.05)
        return self.of(uuid)

    def of(self, arq_uuid):
        """The event types received about one ARQ (or device), in order."""
        return [m['event_type'] for m in self.messages
                if m['payload'][payloads.PREFIX + 'data']['uuid'] == arq_uuid]


@contextlib.contextmanager
def listening(transport, topic=TOPIC):
    """A ``Sink`` receiving what is sent to ``topic`` on ``transport``
    from now on."""
    sink = Sink()
    listener = messaging.get_notification_listener(
        transport, [messaging.Target(topic=topic)], [sink],
        executor='threading')
    listener.start()
    try:
        yield sink
    finally:
        listener.stop()
        listener.wait()
