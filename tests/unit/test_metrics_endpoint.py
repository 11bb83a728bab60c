"""The metrics endpoint over real sockets: loopback by default, a bounded
number of connection threads, idle connections closed, an optional
bearer token."""

import socket
import threading
import urllib.error
import urllib.request

import pytest

from cyborg import conf as cyborg_conf
from cyborg.metrics import endpoint as metrics_endpoint
from tests.metrics_scrape import scrape

MAX_CONNECTIONS = 4
IDLE_TIMEOUT = 0.5
# How long a client waits for the endpoint to close a connection: far
# beyond IDLE_TIMEOUT, so that only an endpoint that never closes fails.
CLIENT_WAIT = 30


def connection_threads():
    return [t for t in threading.enumerate()
            if 'process_request_thread' in t.name]


def started(**options):
    served = metrics_endpoint.Endpoint(
        metrics_endpoint.service_registry(), '127.0.0.1', 0,
        max_connections=MAX_CONNECTIONS, **options)
    served.start()
    return served


def closed_by_server(sock):
    """Whether the endpoint closed ``sock`` (EOF or reset) before the
    client gave up waiting."""
    sock.settimeout(CLIENT_WAIT)
    try:
        return sock.recv(1) == b''
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_connections_are_closed():
    served = started(connection_timeout=IDLE_TIMEOUT)
    idle = [socket.create_connection(('127.0.0.1', served.port))
            for _ in range(10 * MAX_CONNECTIONS)]
    try:
        assert all(closed_by_server(sock) for sock in idle)
        # Their threads are gone, their slots free: a scrape is served.
        assert scrape(served.url).type_of('process_cpu_seconds') == (
            'counter')
    finally:
        for sock in idle:
            sock.close()
        served.stop()


def test_connection_threads_are_bounded():
    # Idle connections held long enough to be counted.
    served = started(connection_timeout=CLIENT_WAIT)
    before = len(connection_threads())
    idle = [socket.create_connection(('127.0.0.1', served.port))
            for _ in range(10 * MAX_CONNECTIONS)]
    try:
        # Those past the bound are closed as they are accepted...
        assert sum(closed_by_server(sock)
                   for sock in idle[MAX_CONNECTIONS:]) == (
            9 * MAX_CONNECTIONS)
        # ...and the first ones hold a thread each, no more.
        assert len(connection_threads()) - before == MAX_CONNECTIONS
    finally:
        for sock in idle:
            sock.close()
        served.stop()


def test_default_address_is_loopback():
    conf = cyborg_conf.load(default_config_files=[])
    conf.set_override('enabled', True, group='metrics')

    class Service:
        name = 'cyborg-test'
        stops = []

        def on_stop(self, stop):
            self.stops.append(stop)

    service = Service()
    served = metrics_endpoint.serve(service, conf, 0,
                                    metrics_endpoint.service_registry())
    try:
        assert conf.metrics.listen_address == '127.0.0.1'
        assert served._server.server_address[0] == '127.0.0.1'
    finally:
        for stop in service.stops:
            stop()


def test_bearer_token_is_required_when_set():
    served = metrics_endpoint.Endpoint(
        metrics_endpoint.service_registry(), '127.0.0.1', 0,
        token='s3cret')
    served.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(served.url, timeout=10)
        wrong = urllib.request.Request(
            served.url, headers={'Authorization': 'Bearer other'})
        with pytest.raises(urllib.error.HTTPError) as refused_wrong:
            urllib.request.urlopen(wrong, timeout=10)
        right = urllib.request.Request(
            served.url, headers={'Authorization': 'Bearer s3cret'})
        with urllib.request.urlopen(right, timeout=10) as answer:
            assert answer.status == 200
            assert b'process_cpu_seconds_total' in answer.read()
    finally:
        served.stop()
    assert refused.value.code == 401
    assert refused_wrong.value.code == 401
