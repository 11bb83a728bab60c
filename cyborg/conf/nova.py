"""[nova] options: how the conductor reaches Nova's compute API to tell it
that accelerator requests are bound (``os-server-external-events``)."""

from oslo_config import cfg

from cyborg.conf import service_client

GROUP = 'nova'

# Options of the Nova client itself; keystoneauth's own join them below.
opts = [
    cfg.IntOpt(
        'event_retries', default=3, min=0,
        help='How many more times to post the accelerator-request-bound '
             'events of one instance when Nova cannot be reached, does '
             'not answer within [nova] timeout seconds or '
             'answers 408, 429 or 5xx. 0 posts once. Other refusals (400, '
             '401, 403, ...) are not retried. Once the events of one '
             'instance have used up their retries, the other instances of '
             'the same batch get one try each, so that an unreachable Nova '
             'does not hold a conductor worker for long. Events that were '
             'not delivered stay pending; the conductor sends them again '
             'on a later recovery pass ([conductor] recovery_interval).'),
    cfg.FloatOpt(
        'event_retry_interval', default=1.0, min=0.0,
        help='Seconds to wait before the first retry of an events post. '
             'Each further retry waits twice as long as the one before, '
             'at most 30 seconds.'),
]

_GROUP = service_client.ServiceClientGroup(
    GROUP, 'Nova compute API client',
    'Where the compute API is and the credentials used to call it. The '
    'conductor posts an accelerator-request-bound event per accelerator '
    'request there once a bind has finished, well or badly. Without '
    'credentials or an endpoint_override no event is sent.',
    service_type='compute', extra_opts=opts, default_timeout=30)

register_opts = _GROUP.register_opts
list_opts = _GROUP.list_opts
