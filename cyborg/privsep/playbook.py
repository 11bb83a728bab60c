"""Running a device configuration playbook as root.

A playbook pair is a directory named after it, holding ``setup.yml``,
``teardown.yml`` and ``variables.yml`` (``cyborg.device_config.declared``).
Pairs are looked up in the package's own directory
(``cyborg/device_config/playbooks``) first, then in the daemon's
``[device_config] playbook_dir``; the agent names a pair, never a path.
A pair runs only if its directory, every directory above it and its
three files belong to root and no one else may change them (a directory
writable by all is accepted only with its sticky bit set, as ``/tmp``),
so that the agent's user cannot put a playbook of its own where root
will run it. The variables must be those ``variables.yml`` declares,
each of its declared type; the sysfs root is the daemon's own.

The run (``cyborg.privsep.playbook_runner``, ansible-runner and a real
ansible-core, on this host only) gets a private directory of its own, a
minimal environment, no capability at all (``setpriv``: uid 0 writes
root's sysfs files as their owner, which needs none) and at most
``[device_config] playbook_timeout`` seconds. A failed run is no error
here: its status, the failed task and its message come back.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import cyborg.device_config
from cyborg.device_config import declared
from cyborg.privsep import agent_pctxt
from cyborg.privsep import checks

SHIPPED = os.path.join(os.path.dirname(cyborg.device_config.__file__),
                       'playbooks')
# The modules the shipped playbooks use, offered to operators' too.
LIBRARY = os.path.join(SHIPPED, 'library')
# Seconds the runner gets beyond the playbook's own limit to report.
_GRACE = 30


class PlaybookError(Exception):
    """The runner itself failed (not a task of the playbook)."""


def _trusted(path, what):
    """Refuse ``path`` unless root owns it and only root may change it."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise checks.InvalidArgument('%s: %s cannot be read (%s)'
                                     % (what, path, exc.strerror))
    if stat.S_ISLNK(st.st_mode):
        raise checks.InvalidArgument('%s: %s is a link' % (what, path))
    if st.st_uid != 0:
        raise checks.InvalidArgument('%s: %s does not belong to root'
                                     % (what, path))
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if writable and not sticky:
        raise checks.InvalidArgument('%s: %s may be changed by others than '
                                     'root (mode %o)' % (
                                         what, path, stat.S_IMODE(st.st_mode)))


def trusted_chain(path, what):
    """Refuse ``path`` unless it and every directory above it pass
    ``_trusted``; its real path if they do."""
    real = os.path.realpath(path)
    if real != os.path.abspath(path):
        raise checks.InvalidArgument('%s: %s goes through a link to %s'
                                     % (what, path, real))
    current = real
    while True:
        _trusted(current, what)
        parent = os.path.dirname(current)
        if parent == current:
            return real
        current = parent


def directories():
    """Where pairs are looked up, in order."""
    return [SHIPPED, checks.daemon_conf().device_config.playbook_dir]


def find_pair(name):
    """The directory of pair ``name``, checked as the module says."""
    if not isinstance(name, str) or not declared.PAIR_NAME.fullmatch(name):
        raise checks.InvalidArgument('%r is not a playbook pair name '
                                     '(letters, digits, _ and -)' % (name,))
    what = 'playbook pair %s' % name
    for top in directories():
        directory = os.path.join(top, name)
        if not os.path.isdir(directory) or os.path.islink(directory):
            continue
        check_ownership(directory, what)
        return directory
    raise checks.InvalidArgument('%s: no such pair in %s'
                                 % (what, ', '.join(directories())))


def check_ownership(directory, what):
    """Refuse the pair in ``directory`` unless it, every directory
    above it and its files (regular ones) are root's alone."""
    trusted_chain(directory, what)
    for file_name in declared.PAIR_FILES:
        path = os.path.join(directory, file_name)
        _trusted(path, what)
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise checks.InvalidArgument('%s: %s is not a regular file'
                                         % (what, path))


def checked_run(name, action, variables, sysfs_root):
    """(pair directory, extra variables) of a run the daemon may make."""
    if action not in declared.ACTIONS:
        raise checks.InvalidArgument('%r is not a playbook action (%s)'
                                     % (action, ', '.join(declared.ACTIONS)))
    directory = find_pair(name)
    try:
        declaration = declared.load(os.path.join(directory,
                                                 'variables.yml'))
        declared.check_values(declaration, variables)
    except declared.Invalid as exc:
        raise checks.InvalidArgument('playbook pair %s: %s' % (name, exc))
    return directory, dict(variables, sysfs_root=sysfs_root)


@agent_pctxt.entrypoint
def run_playbook(name, action, variables, check_mode=False):
    """Run ``action`` (setup or teardown) of pair ``name`` with
    ``variables``; with ``check_mode``, only say what it would change.
    Answers the runner's summary (``playbook_runner.summary``)."""
    if not isinstance(check_mode, bool):
        raise checks.InvalidArgument('check_mode must be true or false')
    return run(name, action, variables, check_mode, checks.sysfs_root(),
               checks.daemon_conf().device_config.playbook_timeout)


def run(name, action, variables, check_mode, sysfs_root, timeout):
    """``run_playbook`` against the tree at ``sysfs_root``, within
    ``timeout`` seconds: what the entry point does with the daemon's
    own configuration (and tools that simulate many hosts, each with a
    tree of its own, with theirs)."""
    directory, extravars = checked_run(name, action, variables, sysfs_root)
    setpriv = shutil.which('setpriv')
    if setpriv is None:
        raise PlaybookError('setpriv (util-linux), which runs playbooks '
                            'without capabilities, is not installed')
    private = tempfile.mkdtemp(prefix='cyborg-playbook-')
    try:
        spec = {'private_data_dir': private,
                'playbook': os.path.join(directory, action + '.yml'),
                'library': LIBRARY, 'extravars': extravars,
                'check_mode': check_mode, 'timeout': timeout}
        argv = [setpriv, '--bounding-set', '-all', '--inh-caps', '-all',
                '--no-new-privs', '--', sys.executable, '-m',
                'cyborg.privsep.playbook_runner']
        env = {'PATH': os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:'
                                      '/bin'),
               'HOME': private, 'LC_ALL': 'C.UTF-8', 'LANG': 'C.UTF-8'}
        try:
            done = subprocess.run(argv, input=json.dumps(spec),
                                  capture_output=True, text=True, env=env,
                                  cwd=private, timeout=timeout + _GRACE,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise PlaybookError('the playbook runner did not end within '
                                '%d s' % (timeout + _GRACE))
        if done.returncode != 0:
            raise PlaybookError('the playbook runner failed (exit %d): %s'
                                % (done.returncode, done.stderr[-2000:]))
        return json.loads(done.stdout)
    finally:
        shutil.rmtree(private, ignore_errors=True)
