"""A loopback TCP proxy that can be closed and opened again.

Services under test reach a neighbour (RabbitMQ, a database, Placement)
through a ``TCPGate`` instead of directly. Closing the gate cuts every
connection through it and refuses new ones, as a stopped server would;
opening it listens again on the same port. The shared servers of the
machine keep running for everybody else.
"""

import socket
import threading


class TCPGate:
    """Forwards ``127.0.0.1:<port>`` to ``(target_host, target_port)``."""

    def __init__(self, target_host, target_port, port=0):
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._connections = set()
        self._listener = None
        self._accepting = None
        self.port = port
        self.open()

    @property
    def address(self):
        return '127.0.0.1:%d' % self.port

    @property
    def is_open(self):
        return self._listener is not None

    def open(self):
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # The port must be the same after a reopen, while the cut
            # connections may still sit in TIME_WAIT.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(('127.0.0.1', self.port))
            listener.listen(64)
            self.port = listener.getsockname()[1]
            self._listener = listener
            self._accepting = threading.Thread(
                target=self._accept, args=(listener,), daemon=True,
                name='tcp-gate-%d' % self.port)
            self._accepting.start()

    def close(self):
        """Refuse new connections and reset the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, set()
        if listener is None:
            return
        # shutdown() wakes the thread blocked in accept(); close() alone
        # does not on Linux.
        _shutdown(listener)
        listener.close()
        self._accepting.join(5)
        for sock in connections:
            # SO_LINGER 0: the peer sees a reset at once, as when a server
            # dies, rather than a polite end of stream.
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                b'\x01\x00\x00\x00\x00\x00\x00\x00')
            except OSError:
                pass
            _shutdown(sock)
            sock.close()

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._connections.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink),
                                 daemon=True).start()

    def _pump(self, source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # One side ended: end the other, and forget both.
            with self._lock:
                self._connections.discard(source)
                self._connections.discard(sink)
            for sock in (source, sink):
                _shutdown(sock)
            source.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _shutdown(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
