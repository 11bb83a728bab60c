"""The conductor's recovery workers: each kind of work on a thread of its own.

- ``takeover``: finish this conductor's binds that no thread of the
  process runs (a crash or reload cut them short), and claim and finish
  those of dead conductors on the hosts this conductor owns on the ring;
- ``overdue-binds``: fail binds past their own deadline on the hosts
  this conductor owns;
- ``deletions``: finish deletions left half done on the hosts this
  conductor owns, host by host on a small pool, so that a host whose
  agent does not answer holds one thread and not the others;
- ``nova-events``: send Nova the events it has not acknowledged.

Every worker runs every ``[conductor] recovery_interval`` seconds and can
be asked to run at once (``run_now``: the ring changed). An item that
fails (a deletion, an event) waits before its next attempt, twice as
long after each failure, at most ``[conductor] recovery_max_backoff``
seconds; the others go on meanwhile. The waits live in memory: a
restarted conductor tries everything once more.
"""

import concurrent.futures
import threading
import time

from oslo_log import log

from cyborg import service
from cyborg.db.api import arqs as db

LOG = log.getLogger(__name__)

# Hosts whose deletions run at the same time, per conductor.
DELETION_THREADS = 4


class Backoff:
    """When each failing item may be tried again."""

    def __init__(self, first, cap, clock=time.monotonic):
        self.first = first
        self.cap = cap
        self.clock = clock
        self._lock = threading.Lock()
        self._items = {}  # key -> (failures, not before)

    def due(self, key):
        with self._lock:
            entry = self._items.get(key)
        return entry is None or self.clock() >= entry[1]

    def failed(self, key):
        """Record a failure; returns the seconds until the next try."""
        with self._lock:
            failures = self._items.get(key, (0, 0))[0] + 1
            wait = min(self.first * 2 ** (failures - 1), self.cap)
            self._items[key] = (failures, self.clock() + wait)
        return wait

    def succeeded(self, key):
        with self._lock:
            self._items.pop(key, None)

    def failures(self, key):
        with self._lock:
            return self._items.get(key, (0, 0))[0]


class Recovery:
    """The work of the recovery workers of one conductor."""

    def __init__(self, binder, context, database_down=()):
        self.binder = binder
        self.context = context
        # What a database outage raises: logged as one line.
        self.database_down = tuple(database_down)
        conductor = binder.conf.conductor
        self.interval = conductor.recovery_interval
        self.deletion_backoff = Backoff(conductor.recovery_interval,
                                        conductor.recovery_max_backoff)
        self.event_backoff = Backoff(conductor.recovery_interval,
                                     conductor.recovery_max_backoff)
        self._pool = None
        self._deleting = set()  # uuids a pool thread is on
        self._lock = threading.Lock()

    def workers(self):
        """``(name, func)`` of each worker, for ``Service.add_periodic``."""
        return [(name, self._guarded(name, func)) for name, func in (
            ('bind-takeover', self.take_over),
            ('overdue-binds', self.fail_overdue),
            ('deletions', self.finish_deletions),
            ('nova-events', self.resend_events))]

    def stop(self):
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _guarded(self, name, func):
        metrics = self.binder.metrics

        def run():
            outcome = 'error'
            try:
                func()
                outcome = 'ok'
            except self.database_down as exc:
                outcome = 'database_down'
                LOG.warning('cyborg-conductor: recovery (%s) waits for the '
                            'database: %s', func.__name__,
                            service.describe_error(exc))
            finally:
                metrics.recovery(name, outcome)
        run.__name__ = func.__name__
        return run

    def _took(self, worker, items):
        """``items`` taken up by ``worker`` this run, for the metrics."""
        self.binder.metrics.recovery_took(worker, items)

    # -- binds -----------------------------------------------------------

    def take_over(self):
        self.binder.resume(self.context)
        taken = self.binder.take_over(self.context)
        self._took('bind-takeover', taken)
        return taken

    def fail_overdue(self):
        failed = self.binder.fail_overdue(self.context)
        self._took('overdue-binds', len(failed))
        return failed

    # -- deletions -------------------------------------------------------

    def finish_deletions(self, wait=False):
        """Start the due stale deletions of the hosts this conductor owns,
        one pool task per host; with ``wait``, return once they are done
        (tests). An ARQ is marked taken only while a task holds it: an
        error before the tasks start leaves none marked, so the next run
        tries them again."""
        stale = [u for u in db.stale_deletions(
            self.context, self.binder.conf.conductor.bind_timeout)
                 if self.deletion_backoff.due(u)]
        with self._lock:
            stale = [u for u in stale if u not in self._deleting]
        if not stale:
            return []
        membership = self.binder.membership.current()
        by_host = {}
        for row in db.handles_of(self.context, uuids=stale):
            if membership.owns(row['hostname'] or ''):
                by_host.setdefault(row['hostname'], []).append(row['uuid'])
        futures = []
        for host, uuids in by_host.items():
            with self._lock:
                uuids = [u for u in uuids if u not in self._deleting]
                self._deleting.update(uuids)
            if not uuids:
                continue
            try:
                futures.append(self._submit(self._delete_on_host, host,
                                            uuids))
            except BaseException:
                with self._lock:
                    self._deleting.difference_update(uuids)
                raise
            self._took('deletions', len(uuids))
        if wait:
            concurrent.futures.wait(futures)
        return futures

    def _submit(self, func, *args):
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    DELETION_THREADS, thread_name_prefix='deletions')
            return self._pool.submit(func, *args)

    def _delete_on_host(self, host, uuids):
        try:
            failed = self.binder.try_deleting(self.context, uuids)
        except Exception as exc:
            LOG.warning('Deletions on host %s failed: %s', host,
                        service.describe_error(exc))
            failed = set(uuids)
        finally:
            with self._lock:
                self._deleting.difference_update(uuids)
        for uuid in uuids:
            if uuid in failed:
                wait = self.deletion_backoff.failed(uuid)
                LOG.warning('ARQ %s stays Deleting: the agent of %s could '
                            'not release its device; next try in %d s',
                            uuid, host, wait)
            else:
                self.deletion_backoff.succeeded(uuid)

    # -- Nova ------------------------------------------------------------

    def resend_events(self):
        conductor = self.binder.conf.conductor
        due = [row for row in db.stale_events(
            self.context, conductor.nova_event_retry_after)
            if self.event_backoff.due(row[1])]
        if not due:
            return set()
        LOG.info('Sending Nova %d events again', len(due))
        self._took('nova-events', len(due))
        # Each instance's events are claimed right before they are sent.
        pending = self.binder.notify(self.context, due)
        for _, arq, _, _ in due:
            if arq in pending:
                self.event_backoff.failed(arq)
            else:
                self.event_backoff.succeeded(arq)
        return pending

