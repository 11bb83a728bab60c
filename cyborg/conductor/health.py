"""Device health, from the agents' heartbeats to the database and Placement.

Every ``[agent] heartbeat_interval`` seconds each agent casts a heartbeat
with the health of its devices (``{address: {"state", "reason"}}``) and
their usage (``{address: {figure: value, ..., "observed_at"}}``).
``DeviceHealth.heartbeat`` makes one cost:

- one UPDATE, of the agent's services row (``last_seen_at``, ``usage``,
  ``usage_at``, versions), when no device's health changed: the conductor
  keeps, per host it owns, the health it last wrote or read (the digest)
  and compares the heartbeat with it in memory;
- on a miss (no digest: a restart, a host gained on the ring, devices
  added or removed by a report), one SELECT of the host's devices more;
- when health changed, one transaction that locks the host's device
  rows, writes the devices whose state or reason changed, quarantines
  those that turned unhealthy (unless the operator's override says
  ``ignore``) and, if a device's effective quarantine changed, bumps the
  host's desired Placement generation; then the host's providers are
  synced as for a disabled device (``HostSync.sync_host``, under the
  host's lock, each Placement call bounded by ``[placement] timeout``).

At most ``HEARTBEAT_CONCURRENCY`` heartbeats of one conductor are at the
database at once (the rest wait their turn), whatever the number of RPC
threads: each holds a connection while it is there.

A device is matched by its host and the PCI address of its control path;
health of an address with no device row yet (before the host's first
report) waits for the next heartbeat after the report.

The digest is kept only for hosts this conductor owns and is forgotten
when the ring changes: another conductor may have written the host's
health meanwhile. A heartbeat older than ``[DEFAULT] service_down_time``
(queued for a conductor that was down) is dropped: newer ones have been
handled elsewhere. So is one whose usage was observed before that of a
heartbeat of its host handled already (it waited behind it on the bus
or for the database): neither its usage nor its health is older news
written over newer.

``release_quarantines`` is the periodic pass that lifts the quarantine of
devices that have been healthy for ``[conductor] quarantine_hold_down``
seconds.
"""

import collections
import dataclasses
import datetime
import functools
import logging
import math
import threading
import time

from oslo_db import api as oslo_db_api

from cyborg.accelerator.drivers import health as device_states
from cyborg.conductor import membership as membership_module
from cyborg.db import models
from cyborg.db.api import device_health as health_db
from cyborg.db.api import devices as devices_db
from cyborg.db.api import host_sync_states as states_db
from cyborg.db.api import services as services_db
from cyborg.notifications import emit
from cyborg.notifications import notifier as notifier_module

LOG = logging.getLogger(__name__)

# Heartbeats one conductor handles at the database at once. Each holds a
# database connection while it runs, and a fleet sends hundreds a second:
# when the database slows down for a moment they would pile up, one
# connection per RPC thread, and a few conductors together pass the
# server's connection limit (MariaDB's default is 151), which fails
# reports and binds too. A few at a time still write thousands a second.
HEARTBEAT_CONCURRENCY = 4


@dataclasses.dataclass(frozen=True)
class HealthChange:
    """A device's state moved from ``old`` to ``new``."""

    device_uuid: str
    address: str
    old: str
    new: str
    reason: str


def announce_health_changes(notifier, context, hostname, changes):
    """The committed changes of a host's devices' health (a list of
    ``HealthChange``): a log line each and, when notifications are on, a
    ``device.health_change`` each."""
    for change in changes:
        log = LOG.warning if change.new in (
            device_states.DEGRADED, device_states.UNHEALTHY) else LOG.info
        log('Device %s (%s) on host %s: %s -> %s: %s', change.device_uuid,
            change.address, hostname, change.old, change.new, change.reason)
    emit.devices_health_changed(notifier, context, [
        emit.HealthChange(functools.partial(_device_row, context,
                                            change.device_uuid),
                          change.old, change.new, change.reason)
        for change in changes])


def _device_row(context, device_uuid):
    return devices_db.get_device(context, device_uuid)[0]


class DeviceHealth:
    """The conductor's side of the agents' heartbeats.

    ``sync`` is the conductor's ``HostSync``; ``membership`` says which
    hosts this conductor owns (all of them without one).
    """

    def __init__(self, sync, membership=None, hold_down=300,
                 down_after=None, notifier=None,
                 concurrency=HEARTBEAT_CONCURRENCY):
        self.sync = sync
        self.notifier = (notifier if notifier is not None
                         else notifier_module.DISABLED)
        self.membership = membership or membership_module.SoleMembership(
            None)
        self.hold_down = hold_down
        self.down_after = down_after
        self._digests = {}  # hostname -> {address: (state, reason)}
        self._locks = collections.defaultdict(threading.RLock)
        self._lock = threading.Lock()
        self._at_database = threading.BoundedSemaphore(concurrency)

    # -- heartbeats -------------------------------------------------------

    def heartbeat(self, context, host, version=None, rpc_version=None,
                  health=None, usage=None, sent_at=None):
        """Record the agent of ``host`` alive with its usage, then its
        devices' health if it changed. Returns the ``HealthChange``s.

        Only the host's owner writes: a conductor that does not own the
        host drops the heartbeat (``ConductorManager`` passes it to the
        owner first), so two conductors never write one host's health.
        """
        if not self.membership.owns(host):
            LOG.debug('A heartbeat of agent %s reached a conductor that '
                      'does not own the host: left to its owner', host)
            return []
        if self._stale(host, sent_at):
            return []
        figures = {}
        if isinstance(usage, dict):
            figures = {'usage': usage, 'usage_at': _usage_at(usage)}
        with self._at_database:
            written = services_db.heartbeat(context, host,
                                            services_db.AGENT, version,
                                            rpc_version, **figures)
        if not written:
            LOG.debug('A heartbeat of agent %s came after a newer one: '
                      'its usage and health are left', host)
            return []
        if health is None:  # an agent of an older release
            return []
        return self.record(context, host, _observed(host, health))

    def record(self, context, hostname, observed):
        """Write ``observed`` (``{address: (state, reason)}``) where it
        differs from the database; returns the ``HealthChange``s. Nothing
        for a host this conductor does not own."""
        if not self.membership.owns(hostname):
            return []
        with self._host_lock(hostname):
            digest = self._digests.get(hostname)
            if digest == observed:
                return []
            with self._at_database:
                if digest is None:
                    with context.db.read_connection(context) as connection:
                        stored = health_db.read_host(connection, hostname)
                    if not _updates(stored, observed)[0]:
                        self._remember(hostname, observed)
                        return []
                self._forget(hostname)  # until the write commits
                changes, quarantine_moved = _write(context, hostname,
                                                   observed)
            self._remember(hostname, observed)
            if quarantine_moved:
                # Under the host's lock: no sync of this conductor reads
                # the host between the write and this one.
                self.sync.sync_host(context, hostname)
        announce_health_changes(self.notifier, context, hostname, changes)
        return changes

    def forget(self, hostname):
        """The host's devices changed (a report added or removed some):
        read them again at its next heartbeat."""
        with self._host_lock(hostname):
            self._forget(hostname)

    def forget_all(self, *ring_change):
        """A ring hook: the hosts may have been handled elsewhere."""
        with self._lock:
            self._digests.clear()

    def _stale(self, host, sent_at):
        if sent_at is None or self.down_after is None:
            return False
        try:
            age = time.time() - float(sent_at)
        except (TypeError, ValueError):
            return False
        if age <= self.down_after:
            return False
        LOG.info('Dropping a heartbeat of agent %s sent %.0f s ago: newer '
                 'ones went to another conductor', host, age)
        return True

    def _host_lock(self, hostname):
        """The host's one lock in this conductor, shared with its
        ``HostSync`` (reports and syncs)."""
        host_lock = getattr(self.sync, 'host_lock', None)
        if host_lock is not None:
            return host_lock(hostname)
        with self._lock:
            return self._locks[hostname]

    def _remember(self, hostname, observed):
        with self._lock:
            self._digests[hostname] = dict(observed)

    def _forget(self, hostname):
        with self._lock:
            self._digests.pop(hostname, None)

    # -- the release of quarantines ---------------------------------------

    def release_quarantines(self, context, membership=None):
        """Release the devices of owned hosts that have been healthy for
        the hold-down, then sync their hosts: one SELECT when none has.
        Returns ``{hostname: number released}``."""
        membership = membership or self.membership
        cutoff = models.utcnow() - datetime.timedelta(seconds=self.hold_down)
        with context.db.read_connection(context) as connection:
            due = health_db.due_for_release(connection, cutoff)
        by_host = collections.defaultdict(list)
        for row in due:
            if membership.owns(row.hostname):
                by_host[row.hostname].append(row)
        released = {}
        for hostname, rows in by_host.items():
            with self._host_lock(hostname):
                with context.db.writer(context) as session:
                    connection = session.connection()
                    count = health_db.release(
                        connection, [r.id for r in rows], cutoff)
                    # A device the operator quarantines stays so in
                    # Placement.
                    if count and any(r.health_override is None
                                     for r in rows):
                        states_db.bump_desired(connection, hostname)
                if not count:
                    continue  # turned unhealthy again meanwhile
                released[hostname] = count
                LOG.info('Host %s: released %d devices from quarantine '
                         'after %d s healthy: %s', hostname, count,
                         self.hold_down, ', '.join(r.uuid for r in rows))
                self.sync.sync_host(context, hostname)
        return released


# A deadlock means another conductor wrote the host's devices at the
# same moment (a report): read them again and decide again.
@oslo_db_api.wrap_db_retry(max_retries=5, retry_on_deadlock=True)
def _write(context, hostname, observed):
    """``(changes, quarantine moved)`` after writing what differs."""
    with context.db.writer(context) as session:
        connection = session.connection()
        stored = health_db.read_host(connection, hostname, for_update=True)
        updates, changes, moved = _updates(stored, observed)
        health_db.write_health(connection, updates)
        if moved:
            # Committed with the quarantine: Placement must follow it.
            states_db.bump_desired(connection, hostname)
    return changes, moved


def _updates(stored, observed):
    """``(updates for write_health, HealthChanges, whether an effective
    quarantine moved)`` that make ``stored`` hold ``observed``."""
    updates, changes, moved = [], [], False
    for address, (state, reason) in observed.items():
        row = stored.get(address)
        if row is None or (row.health, row.health_reason) == (state, reason):
            continue
        quarantined = row.quarantined
        if state != row.health:
            changes.append(HealthChange(row.uuid, address, row.health,
                                        state, reason))
            if (state == health_db.UNHEALTHY
                    and row.health_override != health_db.IGNORE):
                quarantined = True
        updates.append((row, state, reason, quarantined))
        moved = moved or (health_db.effective_quarantine(row)
                          != health_db.quarantine_in_effect(
                              quarantined, row.health_override))
    return updates, changes, moved


def _observed(hostname, health):
    """``{address: (state, reason)}`` of a heartbeat's health; what is
    not a known state of an address is dropped, with a warning."""
    observed, dropped = {}, []
    for address, value in (health.items() if isinstance(health, dict)
                           else ()):
        state = value.get('state') if isinstance(value, dict) else None
        if state not in device_states.STATES or not isinstance(address,
                                                                str):
            dropped.append(address)
            continue
        reason = str(value.get('reason') or '')[:health_db.MAX_REASON]
        observed[address.lower()] = (state, reason)
    if dropped or not isinstance(health, dict):
        LOG.warning('The heartbeat of agent %s has health that is not '
                    '{address: {"state": one of %s, "reason"}}; ignored: '
                    '%r', hostname, ', '.join(device_states.STATES),
                    dropped or health)
    return observed


def _usage_at(usage):
    """When the newest usage figures were observed (UTC, whole seconds),
    at the latest now: the agent's clock orders its heartbeats, but one
    that runs ahead (an RTC in local time at boot) must not stamp a
    moment that every later heartbeat is older than. Now if no device
    says."""
    now = models.utcnow()
    times = [value.get('observed_at') for value in usage.values()
             if isinstance(value, dict)]
    times = [t for t in times if isinstance(t, (int, float))
             and not isinstance(t, bool) and math.isfinite(t)]
    if not times:
        return now
    try:
        observed = datetime.datetime.fromtimestamp(
            max(times), datetime.timezone.utc).replace(tzinfo=None,
                                                       microsecond=0)
    except (OverflowError, OSError, ValueError):
        return now
    return min(observed, now)
