"""The agent's privileged helper (``cyborg.privsep``) in tests.

- ``in_process(root)``: the entry points run in the test process, checks
  and all, against the sysfs tree at ``root``, as they would in the
  daemon. For tests of drivers and of the agent, whose subject is not
  privilege separation.
- ``Daemon``: a real privsep daemon, started the way the agent starts it
  (oslo.privsep's ``helper_command``, through ``cyborg-privsep-launcher``),
  running ``privsep-helper`` directly: the tests run as root, so no sudo
  is needed in between.
"""

import contextlib
import os
import shlex
import sys

from cyborg import privsep
from cyborg.privsep import checks

SECTION = privsep.CONFIG_SECTION


def privsep_helper():
    """oslo.privsep's ``privsep-helper`` beside this Python."""
    path = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
    assert os.path.exists(path), 'privsep-helper is not installed'
    return path


def launcher_command(link):
    """``cyborg-privsep-launcher link``, as this Python runs it."""
    return [sys.executable, '-m', 'cyborg.privsep.launcher', link]


@contextlib.contextmanager
def in_process(root):
    conf = checks.daemon_conf()
    conf.set_override('sysfs_root', str(root), group='pci')
    privsep.agent_pctxt.set_client_mode(False)
    try:
        yield
    finally:
        privsep.agent_pctxt.set_client_mode(True)
        conf.clear_override('sysfs_root', group='pci')


class Daemon:
    """A real daemon of the agent's context, root ``root``.

    ``config_file`` gets ``[pci] sysfs_root``; ``path`` is the daemon's
    ``PATH`` (where it finds the FPGA tools), as sudo's secure_path would
    be. ``pid`` is the daemon's process id once started.
    """

    def __init__(self, directory, root, path='/usr/sbin:/usr/bin:/sbin:/bin'):
        self.root = str(root)
        self.config_file = os.path.join(str(directory), 'privsep.conf')
        with open(self.config_file, 'w') as f:
            f.write('[pci]\nsysfs_root = %s\n' % self.root)
        links = os.path.join(str(directory), 'privsep-link')
        os.mkdir(links, 0o700)
        self.helper_command = ' '.join(shlex.quote(part) for part in [
            *launcher_command(os.path.join(links, 'agent.sock')),
            'env', 'PATH=' + path, privsep_helper(), '--config-file',
            self.config_file])
        self.pid = None

    def start(self):
        checks.daemon_conf().set_override('helper_command',
                                          self.helper_command, group=SECTION)
        privsep.agent_pctxt.start()
        [self.pid] = processes_with_arguments(self.config_file)
        return self

    def stop(self):
        privsep.agent_pctxt.stop()
        checks.daemon_conf().clear_override('helper_command', group=SECTION)


def processes_with_arguments(*arguments):
    """The pids of the processes with all ``arguments`` on their command
    line (privsep-helper's daemon is a child of no one here)."""
    found = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % entry, 'rb') as f:
                argv = f.read().split(b'\0')
        except OSError:
            continue
        if all(argument.encode() in argv for argument in arguments):
            found.append(int(entry))
    return found


def process_status(pid):
    """``/proc/<pid>/status`` as ``{field: value}``."""
    with open('/proc/%d/status' % pid) as f:
        return dict(line.rstrip('\n').split(':\t', 1) for line in f
                    if ':\t' in line)


def capability_mask(values):
    """The hex mask ``/proc/<pid>/status`` shows for these capabilities."""
    return '%016x' % sum(1 << value for value in values)
