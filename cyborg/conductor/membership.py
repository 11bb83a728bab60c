"""The live conductors and the consistent hash ring that shares out hosts.

Each conductor heartbeats into the ``services`` table; the live ones (a
heartbeat younger than ``[DEFAULT] service_down_time``) form a hash ring
(tooz's ``HashRing``, as Ironic uses for its nodes). Every accelerator
host belongs to one conductor on the ring: its reports and Placement
sync, the binds and recovery of its deployables. When a conductor joins
or dies the ring moves and only the hosts of the changed part change
owner; every process that reads the same live set computes the same
owner, so no coordination service is needed beyond the database.

``Heartbeat`` is the conductor's periodic task: it writes the conductor's
own row, reads the live set again and, when it changed, logs who joined
and who left and runs the hooks registered for a moved ring (recovery of
the hosts taken over), so that a new owner takes over at once rather than
at its next periodic pass. Its ``watch`` reads the live set again at the
moment the oldest peer heartbeat expires: a conductor that died leaves
the ring ``service_down_time`` after its last heartbeat, not up to a
heartbeat interval later.
"""

# First: the warning filter for futurist's eventlet import (tooz imports
# futurist) and the threading backend.
from cyborg import service  # noqa: F401, I001

import datetime
import threading
import time

from oslo_log import log
from tooz import hashring

from cyborg.db.api import services as services_db

LOG = log.getLogger(__name__)

# Partitions of the ring: enough that 3 to 10 conductors share hosts
# evenly (Ironic uses 2**5 by default).
PARTITIONS = 2 ** 5


class Membership:
    """The conductors alive as seen from the database, and the ring.

    ``refresh`` reads the live set (one SELECT) and rebuilds the ring if
    it changed; ``current`` does so at most every ``max_age`` seconds,
    for callers on a request path (the API).
    """

    def __init__(self, context, host, down_after, max_age=0.0):
        self.context = context
        self.host = host
        self.down_after = down_after
        self.max_age = max_age
        self._lock = threading.Lock()
        self._live = ()
        self._ring = None
        self._read_at = None
        self._expires_at = None  # when the oldest peer heartbeat expires

    @property
    def live(self):
        """The live conductors' hosts, sorted, as last read."""
        return self._live

    def refresh(self):
        """Read the live conductors; returns (joined, left) sets."""
        heartbeats = services_db.live_heartbeats(
            self.context, services_db.CONDUCTOR, self.down_after)
        live = tuple(host for host, _ in heartbeats)
        peers = [seen for host, seen in heartbeats if host != self.host]
        with self._lock:
            before = set(self._live)
            self._read_at = time.monotonic()
            self._expires_at = (
                min(peers) + datetime.timedelta(seconds=self.down_after)
                if peers else None)
            if live != self._live or self._ring is None:
                self._live = live
                self._ring = hashring.HashRing(live, partitions=PARTITIONS)
        return set(live) - before, before - set(live)

    def seconds_to_expiry(self, now=None):
        """Seconds until the oldest live peer's heartbeat expires, as last
        read (a moment after, so that the read then finds it expired);
        None with no peer."""
        expires_at = self._expires_at
        if expires_at is None:
            return None
        now = now or services_db.precise_utcnow()
        return max(0.1, (expires_at - now).total_seconds() + 0.05)

    def current(self):
        """Refresh if the last read is older than ``max_age``."""
        read_at = self._read_at
        if read_at is None or time.monotonic() - read_at >= self.max_age:
            self.refresh()
        return self

    def owner_of(self, hostname):
        """The live conductor that owns ``hostname``; None if none is
        alive."""
        with self._lock:
            ring = self._ring
        if ring is None or not len(ring.nodes):
            return None
        (owner,) = ring.get_nodes(hostname.encode('utf-8'))
        return owner

    def owns(self, hostname):
        """Whether this conductor owns ``hostname``. With no live
        conductor known yet (the first heartbeat not written), every
        conductor acts for every host rather than none."""
        owner = self.owner_of(hostname)
        return owner is None or owner == self.host

    def is_alive(self, conductor):
        return conductor in self._live


class SoleMembership:
    """One conductor that owns every host and trusts every other to be
    alive: the single-machine mode and tests of one conductor."""

    def __init__(self, host):
        self.host = host
        self.live = (host,)

    def refresh(self):
        return set(), set()

    def seconds_to_expiry(self, now=None):
        return None

    def current(self):
        return self

    def owner_of(self, hostname):
        return self.host

    def owns(self, hostname):
        return True

    def is_alive(self, conductor):
        return True


class Heartbeat:
    """One conductor's heartbeat and its view of the ring.

    ``beat`` records this conductor alive (``binary`` on ``host`` with
    its package and RPC versions), refreshes ``membership`` and, when
    the live set changed, calls every ``hooks`` callable with the sets
    of conductors that joined and left. A hook that fails is logged and
    the others still run.
    """

    def __init__(self, context, membership, version, rpc_version,
                 hooks=()):
        self.context = context
        self.membership = membership
        self.version = version
        self.rpc_version = rpc_version
        self.hooks = hooks

    def beat(self):
        services_db.heartbeat(self.context, self.membership.host,
                              services_db.CONDUCTOR, self.version,
                              self.rpc_version)
        return self.watch()

    def watch(self):
        """Read the live set again; run the hooks if it changed."""
        joined, left = self.membership.refresh()
        if joined or left:
            self.ring_moved(joined, left)
        return joined, left

    def ring_moved(self, joined, left):
        live = self.membership.live
        LOG.info('Conductor ring changed: joined %s, left %s; %d live '
                 'conductors: %s', ', '.join(sorted(joined)) or 'none',
                 ', '.join(sorted(left)) or 'none', len(live),
                 ', '.join(live) or 'none')
        for hook in list(self.hooks):
            try:
                hook(joined, left)
            except Exception:
                LOG.exception('Ring change hook %s failed',
                              getattr(hook, '__qualname__', hook))
