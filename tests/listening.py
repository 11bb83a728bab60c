"""A listening socket for a server process to inherit.

The test binds port 0 and passes the socket (gunicorn's ``fd://N``), so
the port is known before the server starts and no other process can
take it in between.
"""

import contextlib
import socket


@contextlib.contextmanager
def inheritable_listener(backlog=64):
    """A socket listening on a free port of 127.0.0.1, inheritable; closed
    in this process when the block ends (the child keeps its copy)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(('127.0.0.1', 0))
        listener.listen(backlog)
        listener.set_inheritable(True)
        yield listener
    finally:
        listener.close()
