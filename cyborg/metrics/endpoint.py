"""The HTTP endpoint Prometheus scrapes, one per service.

prometheus_client's WSGI app answers ``GET /metrics`` (any path but
``/favicon.ico``) from the service's registry, served by a threading WSGI
server on a daemon thread of its own: one thread per connection, at most
``[metrics] max_connections`` at once (a connection past them is closed
unanswered; Prometheus scrapes again at its next interval), each closed
once it has been idle ``[metrics] connection_timeout`` seconds. With
``[metrics] bearer_token`` set, a scrape without that token is answered
401. A port that cannot be had is logged and the service runs on without
metrics: its RPC work matters more, and Prometheus shows the target down.
"""

import hmac
import socket
import threading
from wsgiref import simple_server

from oslo_log import log
import prometheus_client
from prometheus_client import exposition

LOG = log.getLogger(__name__)

# Seconds stop() waits for the serving thread once told to shut down.
STOP_TIMEOUT = 5
# How often the serving loop looks whether it is told to stop: a service
# stop waits this long at most.
POLL_INTERVAL = 0.05


class _Handler(simple_server.WSGIRequestHandler):
    """No access log line per scrape; the server's timeout on the
    connection, and a connection that times out or drops just closed."""

    def setup(self):
        self.timeout = self.server.connection_timeout
        super().setup()

    def handle(self):
        try:
            super().handle()
        except (TimeoutError, ConnectionError):
            pass  # the server closes it

    def log_message(self, format, *args):
        pass


class _Server(exposition.ThreadingWSGIServer):
    """A thread per connection, ``max_connections`` at most."""

    # Connections the kernel queues while the loop accepts (socketserver's
    # 5 makes a burst of clients wait for SYN retries).
    request_queue_size = 64

    def __init__(self, address, family, max_connections, connection_timeout):
        self.address_family = family
        self.connection_timeout = connection_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, _Handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _with_token(app, token):
    """``app`` for a request that carries ``Authorization: Bearer
    <token>``; 401 for any other."""
    expected = ('Bearer ' + token).encode()

    def checked(environ, start_response):
        given = environ.get('HTTP_AUTHORIZATION', '').encode('latin-1')
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response('401 Unauthorized', [
            ('Content-Type', 'text/plain; charset=utf-8'),
            ('WWW-Authenticate', 'Bearer')])
        return [b'The metrics need a bearer token.\n']

    return checked


def service_registry():
    """A registry of one service's own, with the process's CPU, memory
    and open files (``process_*``) in it."""
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=registry)
    return registry


class Endpoint:
    """``registry`` served on ``address``:``port`` (0: any free port;
    ``port`` holds the one taken once started), to ``max_connections``
    connections at once, each closed after ``connection_timeout`` idle
    seconds; only to requests bearing ``token`` when one is given."""

    def __init__(self, registry, address, port, max_connections=16,
                 connection_timeout=10.0, token=None):
        self.registry = registry
        self.address = address
        self.port = port
        self.max_connections = max_connections
        self.connection_timeout = connection_timeout
        self.token = token
        self._server = None
        self._thread = None

    def start(self):
        family = socket.AF_INET6 if ':' in self.address else socket.AF_INET
        self._server = _Server((self.address, self.port), family,
                               self.max_connections, self.connection_timeout)
        app = prometheus_client.make_wsgi_app(self.registry)
        if self.token:
            app = _with_token(app, self.token)
        self._server.set_app(app)
        self.port = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name='metrics-endpoint',
            kwargs={'poll_interval': POLL_INTERVAL}, daemon=True)
        self._thread.start()

    def stop(self):
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._thread.join(STOP_TIMEOUT)

    @property
    def url(self):
        host = self.address
        if host in ('0.0.0.0', '::', ''):
            host = '127.0.0.1'
        elif ':' in host:
            host = '[%s]' % host
        return 'http://%s:%d/metrics' % (host, self.port)


def serve(service, conf, port, registry):
    """``registry`` on ``[metrics] listen_address``:``port`` for as long
    as ``service`` runs (its stop is registered with the service).

    Returns the started ``Endpoint``; None when ``[metrics] enabled`` is
    off or the port cannot be had.
    """
    if not conf.metrics.enabled:
        return None
    endpoint = Endpoint(registry, conf.metrics.listen_address, port,
                        max_connections=conf.metrics.max_connections,
                        connection_timeout=conf.metrics.connection_timeout,
                        token=conf.metrics.bearer_token)
    try:
        endpoint.start()
    except OSError as exc:
        LOG.error('%s: no metrics endpoint: cannot listen on %s port %d: '
                  '%s', service.name, conf.metrics.listen_address, port, exc)
        return None
    service.on_stop(endpoint.stop)
    LOG.info('%s: Prometheus metrics on %s port %d', service.name,
             conf.metrics.listen_address, endpoint.port)
    return endpoint
