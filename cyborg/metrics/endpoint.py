"""The HTTP endpoint Prometheus scrapes, one per service.

prometheus_client's WSGI app answers ``GET /metrics`` (any path but
``/favicon.ico``) from the service's registry, served by its threading
WSGI server (one daemon thread per scrape) on a daemon thread of its own.
A port that cannot be had is logged and the service runs on without
metrics: its RPC work matters more, and Prometheus shows the target down.
"""

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


class _QuietHandler(simple_server.WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format, *args):
        pass


def service_registry():
    """A registry of one service's own, with the process's CPU, memory
    and open files (``process_*``) in it."""
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=registry)
    return registry


class Endpoint:
    """``registry`` served on ``address``:``port`` (0: any free port;
    ``port`` holds the one taken once started)."""

    def __init__(self, registry, address, port):
        self.registry = registry
        self.address = address
        self.port = port
        self._server = None
        self._thread = None

    def start(self):
        family = socket.AF_INET6 if ':' in self.address else socket.AF_INET

        class Server(exposition.ThreadingWSGIServer):
            address_family = family

        self._server = simple_server.make_server(
            self.address, self.port,
            prometheus_client.make_wsgi_app(self.registry), Server,
            handler_class=_QuietHandler)
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
    endpoint = Endpoint(registry, conf.metrics.listen_address, port)
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
