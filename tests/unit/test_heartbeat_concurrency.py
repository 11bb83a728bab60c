"""Heartbeats of one conductor go to the database a few at a time, however
many RPC threads deliver them (``cyborg.conductor.health``)."""

import contextlib
import threading
import time

import pytest

from cyborg.conductor import health as health_module

ADDRESS = '0000:10:00.0'
HEALTHY = {ADDRESS: {'state': 'healthy', 'reason': 'no problem seen'}}


class Gauge:
    """How many callers are inside at once, at most."""

    def __init__(self):
        self._lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.calls = 0

    @contextlib.contextmanager
    def entered(self):
        with self._lock:
            self.inside += 1
            self.calls += 1
            self.most = max(self.most, self.inside)
        try:
            time.sleep(0.05)  # a slow database
            yield
        finally:
            with self._lock:
                self.inside -= 1


class Database:
    def __init__(self, gauge):
        self.gauge = gauge

    def read_connection(self, context):
        return self.gauge.entered()


class Context:
    def __init__(self, gauge):
        self.db = Database(gauge)


@pytest.fixture
def gauge(monkeypatch):
    gauge = Gauge()

    def heartbeat(context, host, binary, version, rpc_version, **figures):
        with gauge.entered():
            return True  # written

    monkeypatch.setattr(health_module.services_db, 'heartbeat', heartbeat)
    # Every stored device is as the heartbeat says: nothing to write.
    monkeypatch.setattr(health_module.health_db, 'read_host',
                        lambda connection, hostname: {})
    return gauge


def in_threads(count, call):
    threads = [threading.Thread(target=call, args=(i,))
               for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_at_most_the_bound_write_at_once(gauge):
    health = health_module.DeviceHealth(None, concurrency=2)
    context = Context(gauge)

    in_threads(8, lambda i: health.heartbeat(context, 'host-%d' % i, '1.0',
                                             '1.1', usage={}))

    assert gauge.calls == 8
    assert gauge.most == 2


def test_a_digest_miss_reads_within_the_bound_a_hit_reads_nothing(gauge):
    health = health_module.DeviceHealth(None, concurrency=3)
    context = Context(gauge)

    # A heartbeat's UPDATE, then its digest miss: one read of the host.
    in_threads(9, lambda i: health.heartbeat(context, 'host-%d' % i,
                                             health=HEALTHY))

    assert gauge.calls == 18
    assert gauge.most == 3

    # Every permit taken: a heartbeat that matches the digest needs none
    # for its health.
    for _ in range(3):
        health._at_database.acquire()
    try:
        assert health.record(context, 'host-0', {
            ADDRESS: ('healthy', 'no problem seen')}) == []
    finally:
        for _ in range(3):
            health._at_database.release()
    assert gauge.calls == 18
