"""What a conductor counts as it works.

Outcomes are fixed sets, so that every series exists (at 0) from the
start and a rate over it is never "no data":

- reports: ``changed``, ``unchanged`` (handled here), ``forwarded`` (the
  host's owner on the ring answered), ``refused`` (unreadable report),
  ``database_down``, ``error``;
- binds, one ARQ each: ``bound``, ``failed``, ``lost`` (unbound, deleted
  or finished by someone else meanwhile), ``interrupted`` (the service
  stopped; the next start finishes it), ``overdue`` (failed by recovery
  past its deadline);
- recovery runs: ``ok``, ``database_down``, ``error``;
- MIG instances made on demand: ``created`` and ``destroyed`` by an
  agent for a bind and its release, ``refused`` by the card (no start
  free for the profile: the bind fails);
- scrubs of released attach handles: ``passed`` (verified clean) or
  ``failed`` (the device is quarantined), by scrub method.
"""

import time

import prometheus_client

REPORT_OUTCOMES = ('changed', 'unchanged', 'forwarded', 'refused',
                   'database_down', 'error')
BIND_OUTCOMES = ('bound', 'failed', 'lost', 'interrupted', 'overdue')
RECOVERY_WORKERS = ('bind-takeover', 'overdue-binds', 'deletions',
                    'nova-events')
RUN_OUTCOMES = ('ok', 'database_down', 'error')
PLACEMENT_METHODS = ('GET', 'POST', 'PUT', 'DELETE')
MIG_OUTCOMES = ('created', 'destroyed', 'moved', 'packed', 'refused')
SCRUB_RESULTS = ('passed', 'failed')

# A report is a diff and a Placement sync: milliseconds to a minute.
REPORT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A bind may program an FPGA: up to minutes.
BIND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# One HTTP call to Placement.
# A scrub: a reset in a second, an NVMe sanitize in an hour.
SCRUB_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
PLACEMENT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                     10, 30)


class ConductorMetrics:
    """The conductor's series, on ``registry`` (a new one if None)."""

    def __init__(self, registry=None):
        self.registry = (registry if registry is not None
                         else prometheus_client.CollectorRegistry())
        on = {'registry': self.registry}
        self.reports = prometheus_client.Counter(
            'cyborg_conductor_reports', 'Inventory reports of agents '
            'taken by this conductor, by outcome.', ['outcome'], **on)
        self.report_seconds = prometheus_client.Histogram(
            'cyborg_conductor_report_duration_seconds', 'Time to handle '
            'one report here: the database diff and the Placement sync.',
            buckets=REPORT_BUCKETS, **on)
        self.binds = prometheus_client.Counter(
            'cyborg_conductor_binds', 'Accelerator request binds this '
            'conductor ended, by outcome.', ['outcome'], **on)
        self.bind_seconds = prometheus_client.Histogram(
            'cyborg_conductor_bind_duration_seconds', 'Time to bind one '
            'accelerator request, from its claim to Bound or BindFailed.',
            ['outcome'], buckets=BIND_BUCKETS, **on)
        self.bind_queue_wait = prometheus_client.Histogram(
            'cyborg_conductor_bind_queue_wait_seconds', 'From the API '
            'accepting a bind (BindStarted) to this conductor claiming it: '
            'mostly the time its cast waited in the message queue.',
            buckets=BIND_BUCKETS, **on)
        self.recovery_runs = prometheus_client.Counter(
            'cyborg_conductor_recovery_runs', 'Runs of each recovery '
            'worker, by outcome.', ['worker', 'outcome'], **on)
        self.recovery_items = prometheus_client.Counter(
            'cyborg_conductor_recovery_items', 'Accelerator requests each '
            'recovery worker took up (binds taken over or failed, '
            'deletions started, Nova events sent again).', ['worker'], **on)
        self.placement_seconds = prometheus_client.Histogram(
            'cyborg_placement_request_duration_seconds', 'Time of one HTTP '
            'call to Placement, answered or not, by HTTP method.',
            ['method'], buckets=PLACEMENT_BUCKETS, **on)
        self.placement_requests = prometheus_client.Counter(
            'cyborg_placement_requests', 'HTTP calls to Placement, by '
            'method and answer status ("error": no answer).',
            ['method', 'status'], **on)
        self.mig_instances = prometheus_client.Counter(
            'cyborg_conductor_mig_instances', 'MIG instances made on '
            'demand that this conductor asked agents for, by outcome: '
            'created, destroyed, moved (its GPU refused it, another GPU '
            'of the host took it), packed (moved to the fullest GPU that '
            'offers it: [conductor] mig_gpu_choice) or refused (the bind '
            'failed).', ['outcome'],
            **on)
        for outcome in MIG_OUTCOMES:
            self.mig_instances.labels(outcome)
        self.scrubs = prometheus_client.Counter(
            'cyborg_conductor_scrubs', 'Scrubs of released attach handles '
            'this conductor asked agents for, by method and result.',
            ['method', 'result'], **on)
        self.scrub_seconds = prometheus_client.Histogram(
            'cyborg_conductor_scrub_duration_seconds', 'Time of one scrub '
            'of a released attach handle, verification included, by '
            'method.', ['method'], buckets=SCRUB_BUCKETS, **on)
        for outcome in REPORT_OUTCOMES:
            self.reports.labels(outcome)
        for outcome in BIND_OUTCOMES:
            self.binds.labels(outcome)
        for outcome in ('bound', 'failed'):
            self.bind_seconds.labels(outcome)
        for worker in RECOVERY_WORKERS:
            self.recovery_items.labels(worker)
            for outcome in RUN_OUTCOMES:
                self.recovery_runs.labels(worker, outcome)
        for method in PLACEMENT_METHODS:
            self.placement_seconds.labels(method)

    def report(self, outcome, started=None):
        """A report ended with ``outcome``; timed from ``started``
        (``time.monotonic()``) when it was handled here."""
        self.reports.labels(outcome).inc()
        if started is not None:
            self.report_seconds.observe(time.monotonic() - started)

    def bind(self, outcome, started=None):
        self.binds.labels(outcome).inc()
        if started is not None:
            self.bind_seconds.labels(outcome).observe(
                time.monotonic() - started)

    def recovery(self, worker, outcome):
        self.recovery_runs.labels(worker, outcome).inc()

    def recovery_took(self, worker, items):
        if items:
            self.recovery_items.labels(worker).inc(items)

    def scrubbed(self, method, result, seconds):
        self.scrubs.labels(method, result).inc()
        self.scrub_seconds.labels(method).observe(seconds)

    def placement_request(self, method, status, seconds):
        """For ``PlacementClient.on_request``: ``status`` None when no
        answer came."""
        self.placement_seconds.labels(method).observe(seconds)
        self.placement_requests.labels(
            method, 'error' if status is None else str(status)).inc()
