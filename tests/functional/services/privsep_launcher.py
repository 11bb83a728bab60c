"""A stand-in for sudo, for tests only: starts the privsep daemon of an
agent that runs as an unprivileged user.

In production the agent's ``[privsep_agent] helper_command`` is ``sudo
privsep-helper --config-file /etc/cyborg/cyborg.conf`` (or rootwrap), and
sudoers lets the agent's user run it as root. This machine has no sudo,
and an unprivileged process cannot become root by itself, so:

- ``Launcher`` is a thread of the test process, which runs as root. It
  listens on a Unix socket and runs ``privsep-helper`` as root for each
  request.
- The agent's ``helper_command`` is this file run as a script,
  ``python privsep_launcher.py <socket>``: oslo.privsep appends
  ``--privsep_context <context> --privsep_sock_path <path>``, the script
  passes them to the launcher and exits with the status of the
  privsep-helper that the launcher ran. That helper connects to the
  agent's socket, forks the daemon and exits, as under sudo.

Like a strict sudoers line, the launcher serves only the user it was made
for (the peer's uid, ``SO_PEERCRED``), only the agent's context, and gives
privsep-helper its own configuration file, never one the caller names.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import threading

CONTEXT = 'cyborg.privsep.agent_pctxt'
HELPER_TIMEOUT = 60


def helper_command(socket_path):
    """The agent's ``[privsep_agent] helper_command`` for a launcher."""
    return '%s %s %s' % (sys.executable, os.path.abspath(__file__),
                         socket_path)


class Launcher:
    """Runs ``privsep-helper --config-file <config_file>`` as root for the
    user ``uid``; what it was asked and answered is in ``requests``."""

    def __init__(self, directory, uid, config_file, log_file):
        self.uid = uid
        self.config_file = str(config_file)
        self.log_file = str(log_file)
        self.socket_path = os.path.join(str(directory), 'launcher.sock')
        self.requests = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.socket_path)
        # Anyone may connect; the peer's uid decides.
        os.chmod(self.socket_path, 0o666)
        self._server.listen(4)
        self._thread = threading.Thread(target=self._serve,
                                        name='privsep-launcher', daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            try:
                connection, _address = self._server.accept()
            except OSError:
                return  # closed
            with connection:
                self._answer(connection)

    def _answer(self, connection):
        _pid, uid, _gid = struct.unpack('3i', connection.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize('3i')))
        connection.settimeout(HELPER_TIMEOUT)
        with connection.makefile('r') as lines:
            args = json.loads(lines.readline() or 'null')
        if uid != self.uid:
            status, why = 1, 'uid %d may not start a privsep daemon' % uid
        elif not (isinstance(args, list) and len(args) == 4
                  and args[:3] == ['--privsep_context', CONTEXT,
                                   '--privsep_sock_path']
                  and os.path.isabs(args[3])):
            status, why = 1, 'not the arguments of privsep-helper'
        else:
            helper = os.path.join(os.path.dirname(sys.executable),
                                  'privsep-helper')
            with open(self.log_file, 'ab') as log:
                status = subprocess.run(
                    [helper, '--config-file', self.config_file, *args],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    timeout=HELPER_TIMEOUT, check=False).returncode
            why = 'privsep-helper exited %d' % status
        self.requests.append((uid, args, status, why))
        connection.sendall(b'%d\n' % status)

    def close(self):
        self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self._server.close()
        self._thread.join(timeout=10)
        os.unlink(self.socket_path)


def main(argv):
    socket_path, args = argv[1], argv[2:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(HELPER_TIMEOUT)
        connection.connect(socket_path)
        connection.sendall(json.dumps(args).encode() + b'\n')
        with connection.makefile('r') as lines:
            return int(lines.readline() or 1)


if __name__ == '__main__':
    sys.exit(main(sys.argv))
