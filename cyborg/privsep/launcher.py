"""Starts the agent's privsep daemon with one fixed command line.

oslo.privsep runs ``[privsep_agent] helper_command`` with
``--privsep_context <context> --privsep_sock_path <socket>`` appended,
and the socket lies in a new temporary directory at each start. A sudoers
rule that admitted that path would need a wildcard, and sudo's ``*`` also
matches spaces: the agent's user could append arguments
(``--log-config-append``, another ``--config-file`` or
``--privsep_context``) to a command that runs as root.

This launcher runs as the agent's user, first in ``helper_command``::

    cyborg-privsep-launcher /var/lib/cyborg/privsep/agent.sock \\
        sudo /usr/local/bin/privsep-helper \\
        --config-file /etc/cyborg/cyborg.conf

It points the link (its first argument) at oslo.privsep's socket, runs the
rest of the line with ``--privsep_context cyborg.privsep.agent_pctxt
--privsep_sock_path <the link>`` and removes the link once the helper has
connected and exited. The command that sudo sees is therefore the same at
every start, and the sudoers rule (``sudoers_rule``) names it word for
word, with no wildcard.

The link's directory must belong to the agent's user and be writable by no
one else, so that no other user can point the link at a socket of theirs
between its creation and the helper's connection.
"""

import errno
import os
import pwd
import re
import stat
import subprocess
import sys

from cyborg import privsep

CONTEXT = privsep.agent_pctxt.pypath
# privsep-helper connects and exits within seconds; sudo may log or look
# up users first.
HELPER_TIMEOUT = 60
# Words a sudoers command line holds as they are: no wildcard, nothing
# that sudoers would read as syntax.
_PLAIN_WORD = re.compile(r'[A-Za-z0-9_./+-]+')
USAGE = ('usage: cyborg-privsep-launcher LINK COMMAND... (oslo.privsep '
         'appends --privsep_context %s --privsep_sock_path SOCKET)'
         % CONTEXT)


class LaunchError(Exception):
    """The helper cannot be started as asked."""


def pinned_arguments(link):
    """What the helper gets after the command: the same at each start."""
    return ['--privsep_context', CONTEXT, '--privsep_sock_path', link]


def root_command(command):
    """The words of ``command`` that run as root: those after ``sudo``
    and its options."""
    words = list(command)
    if words and os.path.basename(words[0]) == 'sudo':
        words.pop(0)
        while words and words[0].startswith('-'):
            words.pop(0)
    return words


def sudoers_rule(user, command, link):
    """The sudoers line that lets ``user`` run, as root, what
    ``cyborg-privsep-launcher link command...`` runs, and nothing else."""
    words = root_command(command) + pinned_arguments(link)
    if not os.path.isabs(words[0]):
        raise LaunchError('%s must be an absolute path in a sudoers rule'
                          % words[0])
    for word in [user, *words]:
        if not _PLAIN_WORD.fullmatch(word):
            raise LaunchError('%r cannot be written in a sudoers rule without '
                              'quoting or wildcards' % word)
    return '%s ALL=(root) NOPASSWD: %s' % (user, ' '.join(words))


def parse(argv):
    """``(link, command, socket)`` from the launcher's arguments."""
    if len(argv) < 6:
        raise LaunchError(USAGE)
    link, command, tail = argv[0], argv[1:-4], argv[-4:]
    if tail[0] != '--privsep_context' or tail[2] != '--privsep_sock_path':
        raise LaunchError(USAGE)
    if tail[1] != CONTEXT:
        raise LaunchError('only the agent\'s context %s is started, not %s'
                          % (CONTEXT, tail[1]))
    if not os.path.isabs(link):
        raise LaunchError('the link %s must be an absolute path' % link)
    return link, command, tail[3]


def check_directory(link):
    """The link's directory is a directory of ours that no one else may
    write."""
    directory = os.path.dirname(link)
    try:
        info = os.lstat(directory)
    except OSError as exc:
        raise LaunchError('the directory %s of the link: %s'
                          % (directory, exc.strerror))
    if not stat.S_ISDIR(info.st_mode):
        raise LaunchError('%s, the directory of the link, is not a directory'
                          % directory)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise LaunchError(
            '%s, the directory of the link, must belong to uid %d and be '
            'writable by no one else (it belongs to uid %d, mode %04o)'
            % (directory, os.geteuid(), info.st_uid,
               stat.S_IMODE(info.st_mode)))


def point(link, socket_path):
    """Make ``link`` a symbolic link to ``socket_path``, atomically."""
    new = '%s.%d' % (link, os.getpid())
    _remove(new)
    os.symlink(socket_path, new)
    os.replace(new, link)


def _remove(path):
    try:
        os.unlink(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise


def _user():
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def launch(argv):
    """Run the helper as described above; its exit status."""
    link, command, socket_path = parse(argv)
    check_directory(link)
    point(link, socket_path)
    try:
        status = subprocess.run(command + pinned_arguments(link),
                                timeout=HELPER_TIMEOUT,
                                check=False).returncode
    except subprocess.TimeoutExpired:
        raise LaunchError('%s did not exit within %d s'
                          % (command[0], HELPER_TIMEOUT))
    except OSError as exc:
        raise LaunchError('cannot run %s: %s' % (command[0], exc.strerror))
    finally:
        _remove(link)
    if status != 0:
        try:
            rule = sudoers_rule(_user(), command, link)
        except LaunchError as exc:
            rule = 'none can be written: %s' % exc
        raise LaunchError('%s exited with status %d; the sudoers rule for '
                          'it is: %s' % (' '.join(command), status, rule))
    return status


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        return launch(argv)
    except (LaunchError, OSError) as exc:
        print('cyborg-privsep-launcher: %s' % exc, file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
