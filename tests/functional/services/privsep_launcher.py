"""A stand-in for sudo, for tests only: starts the privsep daemon of an
agent that runs as an unprivileged user.

In production the agent's ``[privsep_agent] helper_command`` is
``cyborg-privsep-launcher <link> sudo privsep-helper --config-file
/etc/cyborg/cyborg.conf``, and one sudoers rule lets the agent's user run
that helper's command line, word for word, as root. The tests cannot let
an unprivileged process become root through sudo, so:

- ``Launcher`` is a thread of the test process, which runs as root. It
  listens on a Unix socket and, for each request that its sudoers rule
  allows, runs the command as root, with the variables sudo sets.
- In the agent's ``helper_command``, this file run as a script,
  ``python privsep_launcher.py <socket>``, takes the place of ``sudo``:
  it passes the command that follows to the launcher and exits with the
  status of what the launcher ran.

As sudo does with the rule, the launcher serves only the rule's user (the
peer's uid, ``SO_PEERCRED``) and only the rule's command line, compared
word for word: nothing more, nothing less.
"""

import json
import os
import pwd
import socket
import struct
import subprocess
import sys
import threading

HELPER_TIMEOUT = 60
_RULE_RUNS_AS = 'ALL=(root)'
_RULE_TAG = 'NOPASSWD:'


def sudo_command(socket_path):
    """What takes the place of ``sudo`` in a ``helper_command``."""
    return [sys.executable, os.path.abspath(__file__), socket_path]


def parse_rule(rule):
    """``(user, command words)`` of a sudoers line ``user ALL=(root)
    NOPASSWD: command...``."""
    user, runs_as, tag, *command = rule.split()
    assert (runs_as, tag) == (_RULE_RUNS_AS, _RULE_TAG), rule
    return user, command


class Launcher:
    """Runs, as root, the command of the sudoers line ``rule`` for its
    user; what it was asked and answered is in ``requests``."""

    def __init__(self, directory, rule, log_file):
        user, self.command = parse_rule(rule)
        self.user = pwd.getpwnam(user)
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
        if uid != self.user.pw_uid:
            status, why = 1, 'uid %d may not run %s' % (uid, args)
        elif args != self.command:
            status, why = 1, '%s is not the command of the rule' % (args,)
        else:
            # The test's environment (its PYTHONPATH finds this tree's
            # cyborg) and what sudo tells the command about its caller.
            environment = dict(os.environ, SUDO_USER=self.user.pw_name,
                               SUDO_UID=str(self.user.pw_uid),
                               SUDO_GID=str(self.user.pw_gid))
            with open(self.log_file, 'ab') as log:
                status = subprocess.run(
                    args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    env=environment, timeout=HELPER_TIMEOUT,
                    check=False).returncode
            why = '%s exited %d' % (args[0], status)
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
