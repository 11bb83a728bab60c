"""Tells Nova that accelerator requests (ARQs) are bound, or failed to bind.

Nova spawns an instance with accelerators only after an
``accelerator-request-bound`` external event for each of its ARQs (or
gives up after a timeout). ``NovaClient.notify_bound`` posts those events
to ``POST /os-server-external-events`` at compute microversion 2.82, the
first that knows the event: one call per instance, one event per ARQ.

Each instance is told independently. A failure to reach Nova for one
instance never raises and never stops the others from being told; the
answer says per instance whether Nova got the events, so that the caller
can keep what was not delivered and try again later.

Build the client from the ``[nova]`` options (``NovaClient.from_conf``,
None when nothing says where Nova is) or hand it a keystoneauth
``Adapter``.
"""

import dataclasses
import logging
import threading
import time

from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import loading as ks_loading

from cyborg.conf import nova as nova_conf

LOG = logging.getLogger(__name__)

SERVICE_TYPE = 'compute'
# The first compute microversion whose schema accepts the event name.
MICROVERSION = '2.82'
EVENT_NAME = 'accelerator-request-bound'
EVENTS_PATH = '/os-server-external-events'

# Requests that get no answer must not hold a conductor worker forever;
# this applies when [nova] timeout is unset.
DEFAULT_TIMEOUT = 30.0
# No single wait between retries is longer than this (seconds).
MAX_RETRY_DELAY = 30.0

# Per-event codes in Nova's answer (a 207 mixes them).
EVENT_ACCEPTED = 200
EVENT_UNKNOWN_INSTANCE = 404
EVENT_NO_HOST = 422


def is_transient_status(status):
    """Whether an HTTP status says "try again": busy, restarting, proxy."""
    return status in (408, 429) or status >= 500


@dataclasses.dataclass(frozen=True)
class BoundEvent:
    """The bind result of one ARQ, for the instance that waits for it."""

    instance_uuid: str
    arq_uuid: str
    ok: bool

    def as_nova_event(self):
        """The event as Nova's ``os-server-external-events`` takes it."""
        return {'name': EVENT_NAME,
                'server_uuid': self.instance_uuid,
                'tag': self.arq_uuid,
                'status': 'completed' if self.ok else 'failed'}


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What became of the events of one instance.

    ``delivered``: Nova answered 200 or 207, so posting the same events
    again cannot help; ``event_codes`` then holds Nova's code for each
    ARQ (``EVENT_NO_HOST`` and ``EVENT_UNKNOWN_INSTANCE`` are normal
    when the instance was deleted or rescheduled meanwhile). Otherwise
    ``transient`` says whether a later try may succeed (Nova unreachable
    or busy) or not (refused: credentials, policy, a bad request).
    """

    instance_uuid: str
    delivered: bool
    attempts: int
    status: int | None = None
    reason: str = ''
    transient: bool = False
    event_codes: dict = dataclasses.field(default_factory=dict)


class NovaClient:
    """Posts accelerator-request-bound events to Nova's compute API."""

    def __init__(self, adapter, retries=3, retry_interval=1.0):
        self._adapter = adapter
        self.retries = retries
        self.retry_interval = retry_interval
        self._lock = threading.Lock()
        self._posts = 0

    @classmethod
    def from_conf(cls, conf, group=nova_conf.GROUP):
        """From the ``[nova]`` keystoneauth and retry options.

        None when the group has neither ``auth_type`` nor
        ``endpoint_override``: there is no Nova to tell (the
        single-machine mode).
        """
        options = conf[group]
        if not options.auth_type and not options.endpoint_override:
            return None
        auth = ks_loading.load_auth_from_conf_options(conf, group)
        session = ks_loading.load_session_from_conf_options(
            conf, group, auth=auth, app_name='cyborg')
        if session.timeout is None:
            session.timeout = DEFAULT_TIMEOUT
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, group, session=session, auth=auth)
        return cls(adapter, retries=options.event_retries,
                   retry_interval=options.event_retry_interval)

    @property
    def posts(self):
        """How many POSTs this client has attempted, retries included."""
        with self._lock:
            return self._posts

    def notify_bound(self, events, claim=None, window=None):
        """Tell Nova about bind results; ``{instance uuid: Delivery}``.

        One POST per instance, in the order the instances first appear.
        Once an instance's events used up their retries on a transient
        failure, the next instances get a single try each until one of
        them gets through: Nova is most likely down for all of them.

        ``claim(instance_uuid, events)``, when given, runs right before an
        instance's first POST and returns the events this sender may
        send (an instance with none is skipped, and absent from the
        answer); ``window`` is how many seconds a claim holds: the POSTs
        of one instance, retries included, end within it, so that no
        other sender can take the same events while they are in flight.
        """
        by_instance = {}
        for event in events:
            by_instance.setdefault(event.instance_uuid, []).append(event)

        deliveries = {}
        retries = self.retries
        for instance_uuid, instance_events in by_instance.items():
            if claim is not None:
                instance_events = claim(instance_uuid, instance_events)
                if not instance_events:
                    continue
            deadline = (None if window is None
                        else time.monotonic() + window)
            delivery = self._deliver(instance_uuid, instance_events, retries,
                                     deadline)
            deliveries[instance_uuid] = delivery
            if delivery.delivered:
                retries = self.retries
            elif delivery.transient:
                retries = 0
        return deliveries

    def _deliver(self, instance_uuid, events, retries, deadline=None):
        body = {'events': [event.as_nova_event() for event in events]}
        attempt = 0
        delay = 0.0
        while True:
            attempt += 1
            timeout = None
            if deadline is not None:
                timeout = deadline - time.monotonic()
                if attempt > 1 and timeout < delay + 1.0:
                    # Another try would outlast the claim: the events
                    # stay pending for a later sender.
                    attempt -= 1
                    break
                time.sleep(delay)
                timeout -= delay
            elif delay:
                time.sleep(delay)
            delivery = self._post(instance_uuid, body, attempt, timeout)
            if (delivery.delivered or not delivery.transient
                    or attempt > retries):
                break
            delay = min(self.retry_interval * 2 ** (attempt - 1),
                        MAX_RETRY_DELAY)
            LOG.info('Retrying the accelerator-request-bound events of '
                     'instance %s in %.1f s: %s',
                     instance_uuid, delay, delivery.reason)
        if not delivery.delivered:
            LOG.warning('Nova was not told that the accelerator requests '
                        '%s of instance %s are bound (%d attempts): %s',
                        ', '.join(e.arq_uuid for e in events), instance_uuid,
                        attempt, delivery.reason)
        return delivery

    def _post(self, instance_uuid, body, attempt, timeout=None):
        """One POST of the events of one instance, as a Delivery; within
        ``timeout`` seconds when given (else the session's)."""
        with self._lock:
            self._posts += 1
        options = {}
        if timeout is not None:
            session_timeout = self._adapter.session.timeout
            options['timeout'] = max(0.5, min(
                timeout, session_timeout or timeout))
        try:
            response = self._adapter.post(
                EVENTS_PATH, json=body, raise_exc=False, **options,
                microversion=MICROVERSION,
                microversion_service_type=SERVICE_TYPE,
                headers={'Accept': 'application/json'})
        except ks_exceptions.HttpError as exc:
            # Raised by the auth plugin: Keystone refused or failed.
            return Delivery(
                instance_uuid, False, attempt, reason=str(exc),
                transient=is_transient_status(exc.http_status or 0))
        except ks_exceptions.ClientException as exc:
            # Connection refused or reset, timeouts (of Nova or Keystone)
            # pass; a TLS, catalog or plugin problem needs the operator.
            transient = isinstance(exc, ks_exceptions.ConnectionError) and (
                not isinstance(exc, ks_exceptions.SSLError))
            return Delivery(instance_uuid, False, attempt, reason=str(exc),
                            transient=transient)

        status = response.status_code
        if status not in (200, 207):
            return Delivery(
                instance_uuid, False, attempt, status=status,
                reason='Nova answered %d: %s' % (status, response.text[:200]),
                transient=is_transient_status(status))
        codes = self._event_codes(instance_uuid, response)
        return Delivery(instance_uuid, True, attempt, status=status,
                        event_codes=codes)

    @staticmethod
    def _event_codes(instance_uuid, response):
        """Nova's code per ARQ, logging those that Nova dropped."""
        try:
            answered = response.json()['events']
            codes = {e['tag']: e['code'] for e in answered if 'tag' in e}
        except (ValueError, KeyError, TypeError):
            LOG.warning('Nova answered %d to the events of instance %s '
                        'with a body that is not a list of events',
                        response.status_code, instance_uuid)
            return {}
        for arq_uuid, code in codes.items():
            if code == EVENT_ACCEPTED:
                continue
            if code == EVENT_NO_HOST:
                LOG.info('Nova dropped the bind event of accelerator '
                         'request %s: instance %s is not on a host yet',
                         arq_uuid, instance_uuid)
            elif code == EVENT_UNKNOWN_INSTANCE:
                LOG.warning('Nova dropped the bind event of accelerator '
                            'request %s: it does not know instance %s',
                            arq_uuid, instance_uuid)
            else:
                LOG.error('Nova refused the bind event of accelerator '
                          'request %s of instance %s with code %s',
                          arq_uuid, instance_uuid, code)
        return codes
