"""The console of a command run in the foreground, which may go away.

Python ignores SIGPIPE, so a write to a closed pipe (``| head`` that has
finished, a closed terminal) raises instead, and a command would end with
a BrokenPipeError traceback: from ``print``, from a log handler on the
console, or from the interpreter's last flush. ``guard`` wraps stdout and
stderr so that the first failed write points the stream at /dev/null
(nothing written later fails again) and asks the running service to stop,
as SIGPIPE would end a command; it then exits as on SIGTERM.
"""

import errno
import os
import sys

# EPIPE: a pipe without reader; EIO: a terminal that was closed.
_GONE = (errno.EPIPE, errno.EIO)


class GuardedStream:
    """A text stream whose writes never fail because its reader left."""

    def __init__(self, stream, name):
        self._stream = stream
        self._name = name
        self.closed_by_reader = False

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as error:
            self._gone(error)
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except OSError as error:
            self._gone(error)

    def _gone(self, error):
        if error.errno not in _GONE:
            raise error
        if self.closed_by_reader:
            return
        self.closed_by_reader = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)
        # Imported here: cyborg-dbsync and cyborg-status run no service.
        from cyborg import service
        service.stop_foreground('the console (%s) was closed' % self._name)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def guard():
    """Wrap stdout and stderr; call it before logging is set up, so that
    log handlers on the console write through the wrappers."""
    for name in ('stdout', 'stderr'):
        stream = getattr(sys, name)
        if not isinstance(stream, GuardedStream):
            setattr(sys, name, GuardedStream(stream, name))


def say(text, error=False):
    """One line for the person at the console (stderr when ``error``)."""
    stream = sys.stderr if error else sys.stdout
    print(text, file=stream, flush=True)
