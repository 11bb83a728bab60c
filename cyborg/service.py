"""Run a service on native threads: parts, periodic tasks and signals.

A ``Service`` starts its parts (RPC servers, periodic tasks) in
``on_start`` and registers how to stop each of them; ``stop`` undoes them
in reverse order. ``launch`` runs one service in the foreground: SIGTERM
and SIGINT stop it and the process exits 0, SIGHUP stops it, re-reads the
configuration files and starts it again.

A service whose neighbours (the database, RabbitMQ, Placement) are down
when it starts does not exit: ``wait_for`` retries with a log line that
names the neighbour and the error, until it answers or the service is
told to stop.

No eventlet: oslo.messaging imports oslo.service, whose default backend is
eventlet; selecting the threading backend first keeps eventlet (and its
hub and monkey-patching) out of the process. Entry points import this
module before anything that imports oslo.messaging.
"""

import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse

from oslo_log import log
from oslo_service import backend as oslo_service_backend

from cyborg import long_lived

try:
    oslo_service_backend.init_backend(
        oslo_service_backend.BackendType.THREADING)
except oslo_service_backend.exceptions.BackendAlreadySelected:
    # Only a process that imported oslo.messaging first (a test runner)
    # gets here; services import this module first.
    pass

LOG = log.getLogger(__name__)

# How long stop() waits for its parts (RPC servers finishing their
# requests, periodic tasks finishing their run) before leaving them behind.
STOP_TIMEOUT = 8


class PeriodicTask:
    """``func()`` every ``interval`` seconds on its own thread.

    An exception is logged and the task runs again at the next interval:
    one failed run (a neighbour down) must not end the loop. ``sooner``,
    when given, is asked after each run for the seconds until the next
    one is wanted, which counts if shorter than the interval (a watch
    that knows when something is due).
    """

    def __init__(self, name, interval, func, initial_delay=0, sooner=None):
        self.name = name
        self.interval = interval
        self.func = func
        self.initial_delay = initial_delay
        self.sooner = sooner
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Daemon: a run stuck on a neighbour must not keep a stopping
        # process alive.
        self._thread = threading.Thread(target=self._loop, name=name,
                                        daemon=True)

    def start(self):
        self._thread.start()

    def run_now(self):
        """Run as soon as the current run (if any) is over."""
        self._wake.set()

    def _loop(self):
        delay = self.initial_delay
        while not self._stop.is_set():
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                return
            started = time.monotonic()
            try:
                self.func()
            except Exception:
                LOG.exception('Periodic task %s failed; next run in %s s',
                              self.name, self.interval)
            delay = max(0.0, self.interval - (time.monotonic() - started))
            if self.sooner is not None:
                due = self.sooner()
                if due is not None:
                    delay = min(delay, max(0.0, due))

    def stop(self, timeout=STOP_TIMEOUT):
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                LOG.warning('Periodic task %s did not finish within %s s',
                            self.name, timeout)


class Service:
    """The parts of one service; subclasses fill ``on_start``."""

    def __init__(self, name, retry_interval=5):
        self.name = name
        self.retry_interval = retry_interval
        self._stopping = threading.Event()
        self._cleanups = []
        self._lock = threading.Lock()
        self._transport = None  # (transport_url, transport) kept on reload
        self.start_error = None  # why the last start failed, if it did

    @property
    def stopping(self):
        return self._stopping.is_set()

    def start(self):
        self._stopping.clear()
        LOG.info('%s starting', self.name)
        self.on_start()
        if not self.stopping:
            LOG.info('%s started', self.name)

    def on_start(self):
        """Start the parts; register each one's stop with ``on_stop``."""

    def on_stop(self, func, *args):
        with self._lock:
            self._cleanups.append((func, args))

    def add_periodic(self, name, interval, func, initial_delay=0,
                     sooner=None):
        task = PeriodicTask(name, interval, func, initial_delay, sooner)
        task.start()
        self.on_stop(task.stop)
        return task

    def kept_transport(self, conf):
        """The message transport, kept across a SIGHUP restart.

        Work that a restart does not wait for (a bind waiting minutes for
        an agent to program an FPGA) still gets its reply on the same
        transport. It is made again only when ``transport_url`` changed,
        and cleaned up when the service stops for good.
        """
        url = conf.transport_url
        kept = self._transport
        if kept is not None and kept[0] != url:
            kept[1].cleanup()
            kept = None
        if kept is None:
            kept = (url, get_transport(conf))
            self._transport = kept
        return kept[1]

    def stop(self, final=True):
        """Stop every part started so far, the last one first; a restart
        (``final`` false) keeps the transport."""
        self._stopping.set()
        with self._lock:
            cleanups, self._cleanups = self._cleanups[::-1], []
        # One deadline for all parts: a neighbour that is down can make
        # several of them hang.
        deadline = time.monotonic() + STOP_TIMEOUT
        for func, args in cleanups:
            _bounded(func, args, '%s: stopping' % self.name,
                     max(0.5, deadline - time.monotonic()))
        if final and self._transport is not None:
            _bounded(self._transport[1].cleanup, (),
                     '%s: stopping' % self.name,
                     max(0.5, deadline - time.monotonic()))
            self._transport = None
        LOG.info('%s stopped', self.name)

    def sleep(self, seconds):
        """Sleep unless told to stop; True if the service is stopping."""
        return self._stopping.wait(seconds)

    def wait_for(self, what, check):
        """``check()``'s result once it stops raising; None if stopping.

        Every failure is logged as "<service>: waiting for <what>", so an
        operator sees which neighbour the service is waiting for and why.
        """
        attempt = 0
        while not self.stopping:
            attempt += 1
            try:
                result = check()
            except Exception as exc:
                error = describe_error(exc)
            else:
                error = None
            if error is not None:
                # Logged outside the except block: oslo.log would append
                # the whole exception again.
                LOG.warning('%s: waiting for %s (attempt %d): %s; retrying '
                            'in %s s', self.name, what, attempt, error,
                            self.retry_interval)
                if self.sleep(self.retry_interval):
                    return None
                continue
            if attempt > 1:
                LOG.info('%s: %s is reachable again', self.name, what)
            return result
        return None


def describe_error(exc):
    """The first line of an error, with its type: one log line."""
    text = str(exc).strip().splitlines()
    return '%s: %s' % (type(exc).__name__, text[0] if text else '')


def eventlet_status():
    """``(ok, text)``: whether eventlet ran a hub or patched anything.

    futurist imports eventlet whenever it is installed, so its presence
    in ``sys.modules`` means little; a hub object or a patched module
    would mean that something ran on eventlet.
    """
    eventlet = sys.modules.get('eventlet')
    if eventlet is None:
        return True, 'eventlet not imported'
    from eventlet import patcher
    from eventlet.hubs import hub
    patched = sorted(patcher.already_patched)
    hubs = sum(1 for o in gc.get_objects() if isinstance(o, hub.BaseHub))
    if patched or hubs:
        return False, ('eventlet in use: %d hubs, patched modules: %s'
                       % (hubs, ', '.join(patched) or 'none'))
    return True, 'eventlet imported but no hub ran and nothing is patched'


def _bounded(func, args, what, timeout=STOP_TIMEOUT):
    """``func(*args)`` on a daemon thread, waited for ``timeout`` at most.

    A part stuck on a neighbour that is down (oslo.messaging joins its
    listener thread without a timeout) must not keep the process from
    exiting.
    """
    def run():
        try:
            func(*args)
        except Exception:
            LOG.exception('%s: error in %s', what, func)
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        LOG.warning('%s: %s still running after %.1f s; leaving it',
                    what, getattr(func, '__qualname__', func), timeout)


def stop_rpc_server(server):
    """Stop taking requests, then wait for those in progress."""
    server.stop()
    server.wait()


def get_transport(conf, url=None):
    """``rpc.get_transport``, imported late: entry points import this
    module before anything that imports oslo.messaging.
    """
    from cyborg import rpc
    return rpc.get_transport(conf, url=url)


def message_bus_hosts(conf):
    """``(host, port)`` of each RabbitMQ server in ``transport_url``.

    Empty for the in-process ``fake://`` transport.
    """
    from oslo_messaging import opts as messaging_opts
    for group, opts in messaging_opts.list_opts():
        if group is None or group == 'DEFAULT':
            conf.register_opts(opts)
    url = conf.transport_url or ''
    if not url.startswith(('rabbit:', 'amqp:')):
        return []
    hosts = []
    for netloc in urllib.parse.urlsplit(url).netloc.split(','):
        hostport = netloc.rpartition('@')[2]
        parsed = urllib.parse.urlsplit('//' + hostport)
        hosts.append((parsed.hostname or 'localhost', parsed.port or 5672))
    return hosts


def check_message_bus(conf, timeout=5):
    """Raise unless one RabbitMQ server of ``transport_url`` accepts TCP.

    oslo.messaging would retry on its own, but inside its own loop; this
    check lets the service say plainly what it is waiting for.
    """
    errors = []
    for host, port in message_bus_hosts(conf):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as exc:
            errors.append('%s:%d %s' % (host, port, exc))
    if errors:
        raise ConnectionError('RabbitMQ unreachable: ' + '; '.join(errors))


def describe_message_bus(conf):
    hosts = message_bus_hosts(conf)
    if not hosts:
        return 'the in-process message bus'
    return 'RabbitMQ at %s' % ', '.join('%s:%d' % h for h in hosts)


# Asks the service that ``launch`` runs in this process to stop.
_stop_requests = []


def stop_foreground(reason):
    """Stop the service ``launch`` runs, as SIGTERM would, for ``reason``
    (its console went away); nothing if none runs."""
    for request in list(_stop_requests):
        request(reason)


def launch(service, conf=None):
    """Run ``service`` until SIGTERM or SIGINT; returns the exit status.

    The service starts on a separate thread, so that a signal stops it
    promptly even while it is still waiting for a neighbour. SIGHUP
    restarts it, with the configuration files read again when ``conf``
    is given. A start that fails returns 1, with the error in
    ``service.start_error``.
    """
    requests = []
    wake = threading.Event()

    def request(reason):
        requests.append(reason)
        if reason != signal.SIGHUP:
            # Lets a start still waiting for a neighbour give up now.
            service._stopping.set()
        wake.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, frame: request(
            signal.Signals(signum)))

    def failed(error):
        service.start_error = error
        request(None)

    _stop_requests[:] = [request]
    try:
        return _run(service, conf, requests, wake, failed)
    finally:
        _stop_requests.clear()


def _run(service, conf, requests, wake, failed):
    service.start_error = None
    starter = _start_in_thread(service, failed)
    while True:
        wake.wait()
        wake.clear()
        reason = requests.pop(0) if requests else signal.SIGTERM
        if reason is None:
            service.stop()
            return 1
        if isinstance(reason, signal.Signals):
            LOG.info('%s: signal %s received', service.name, reason.name)
        else:
            LOG.info('%s: %s; stopping', service.name, reason)
        starter.join(STOP_TIMEOUT)
        service.stop(final=reason != signal.SIGHUP)
        # What this start made may be garbage now, and the check below
        # looks at every object.
        long_lived.unsettle()
        if reason != signal.SIGHUP:
            _ok, status = eventlet_status()
            LOG.info('%s exiting; threads only: %s', service.name, status)
            _exit_if_stuck(0)
            return 0
        if conf is not None:
            conf.reload_config_files()
        starter = _start_in_thread(service, failed)


def _exit_if_stuck(status):
    """Exit now if a part left behind holds a non-daemon thread.

    Python waits for such threads at exit; one stuck reconnecting to a
    neighbour that is down would keep the process alive for good.
    """
    stuck = [t.name for t in threading.enumerate()
             if t is not threading.main_thread() and not t.daemon]
    if stuck:
        LOG.warning('Exiting without waiting for threads %s', stuck)
        logging.shutdown()
        os._exit(status)


def _start_in_thread(service, failed):
    def start():
        try:
            service.start()
        except Exception as error:
            LOG.exception('%s failed to start', service.name)
            failed(error)
        else:
            long_lived.settle()
    thread = threading.Thread(target=start, name='%s-start' % service.name,
                              daemon=True)
    thread.start()
    return thread
