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

A run does not outlive the process that asked for it. The runner holds
the read end of a pipe, its lifeline, whose other end only this process
holds: when that end closes, the runner kills every process of the run
and ends. It closes at the run's deadline, when this process begins to
exit, or with this process if it is killed. The privsep daemon begins to
exit when its agent is gone (oslo.privsep ends its loop when the agent's
socket closes): the run of an agent killed meanwhile stops there, rather
than going on beside the one its restarted agent is asked for. The
runner is in a session of its own, so that a kill of the agent's process
group, which holds the daemon, leaves it to stop the run.
"""

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

from cyborg.conf import device_config as device_config_conf
import cyborg.device_config
from cyborg.device_config import declared
from cyborg.privsep import agent_pctxt
from cyborg.privsep import checks

SHIPPED = os.path.join(os.path.dirname(cyborg.device_config.__file__),
                       'playbooks')
# The modules the shipped playbooks use, offered to operators' too.
LIBRARY = os.path.join(SHIPPED, 'library')
# What those modules share (checked PCI addresses and sysfs paths).
MODULE_UTILS = os.path.join(SHIPPED, 'module_utils')
# Directories of SHIPPED that hold no pair.
NOT_PAIRS = ('library', 'module_utils')
# The library NVML's bindings load when nothing else is configured.
DEFAULT_NVML = 'libnvidia-ml.so.1'
_LIBRARY_NAME = re.compile(r'lib[A-Za-z0-9_.+-]+\.so(\.[0-9]+)*')
# Seconds the runner gets beyond the playbook's own limit to report.
_GRACE = 30
# The agent's wait for the daemon's answer: the longest run a
# configuration allows, the runner's grace, and time to answer. The
# daemon's own limit is [device_config] playbook_timeout; the default
# wait of a privileged call (30 s) would give up on most playbooks while
# the daemon goes on running them.
CALL_SECONDS = device_config_conf.MAX_PLAYBOOK_SECONDS + _GRACE + 30
# Seconds between two looks at the deadline and at this process.
_WATCH = 0.5
# Set once this process begins to exit: the runs in flight stop.
_exiting = threading.Event()
_hooked = False
_hook_lock = threading.Lock()


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


def checked_run(name, action, variables, sysfs_root,
                nvml_library=DEFAULT_NVML):
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
    return directory, dict(variables, sysfs_root=sysfs_root,
                           nvml_library=checked_nvml(nvml_library))


def checked_nvml(library):
    """``library`` if a playbook may load it: a bare library name for
    the dynamic loader, or an absolute path that root alone may change
    (a replay of a recorded card, ``.py``, included)."""
    if not isinstance(library, str) or not library:
        raise checks.InvalidArgument('nvml_library must name a library')
    if '/' not in library:
        if not _LIBRARY_NAME.fullmatch(library):
            raise checks.InvalidArgument('%r is not a library name'
                                         % (library,))
        return library
    if not os.path.isabs(library):
        raise checks.InvalidArgument('nvml_library %s is neither a library '
                                     'name nor an absolute path' % library)
    return trusted_chain(library, 'nvml_library')


@agent_pctxt.entrypoint_with_timeout(CALL_SECONDS)
def run_playbook(name, action, variables, check_mode=False):
    """Run ``action`` (setup or teardown) of pair ``name`` with
    ``variables``; with ``check_mode``, only say what it would change.
    Answers the runner's summary (``playbook_runner.summary``)."""
    if not isinstance(check_mode, bool):
        raise checks.InvalidArgument('check_mode must be true or false')
    conf = checks.daemon_conf().device_config
    return run(name, action, variables, check_mode, checks.sysfs_root(),
               conf.playbook_timeout, nvml_library=conf.nvml_library)


def run(name, action, variables, check_mode, sysfs_root, timeout,
        nvml_library=DEFAULT_NVML):
    """``run_playbook`` against the tree at ``sysfs_root`` and the NVML
    of ``nvml_library``, within ``timeout`` seconds: what the entry
    point does with the daemon's own configuration (and tools that
    simulate many hosts, each with a tree and cards of its own, with
    theirs)."""
    directory, extravars = checked_run(name, action, variables, sysfs_root,
                                       nvml_library)
    setpriv = shutil.which('setpriv')
    if setpriv is None:
        raise PlaybookError('setpriv (util-linux), which runs playbooks '
                            'without capabilities, is not installed')
    private = tempfile.mkdtemp(prefix='cyborg-playbook-')
    try:
        spec = {'private_data_dir': private,
                'playbook': os.path.join(directory, action + '.yml'),
                'library': LIBRARY, 'module_utils': MODULE_UTILS,
                'extravars': extravars,
                'check_mode': check_mode, 'timeout': timeout}
        argv = [setpriv, '--bounding-set', '-all', '--inh-caps', '-all',
                '--no-new-privs', '--', sys.executable, '-m',
                'cyborg.privsep.playbook_runner']
        env = {'PATH': os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:'
                                      '/bin'),
               'HOME': private, 'LC_ALL': 'C.UTF-8', 'LANG': 'C.UTF-8'}
        _stop_runs_at_exit()
        lifeline, held = os.pipe()
        spec['lifeline'] = lifeline  # the same number in the runner
        with os.fdopen(held, 'wb') as held:
            try:
                runner = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True, env=env,
                    cwd=private, pass_fds=(lifeline,),
                    start_new_session=True)
            finally:
                os.close(lifeline)
            with runner:
                stdout, stderr = _wait(runner, json.dumps(spec),
                                       timeout + _GRACE, held)
        if runner.returncode != 0:
            raise PlaybookError('the playbook runner failed (exit %d): %s'
                                % (runner.returncode, stderr[-2000:]))
        return json.loads(stdout)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _wait(runner, text, seconds, lifeline):
    """The (stdout, stderr) of ``runner`` once it ends, given ``text``
    on its standard input. Past ``seconds``, or once this process
    begins to exit, ``lifeline`` is closed (the runner stops the run)
    and PlaybookError says why."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return runner.communicate(text, timeout=_WATCH)
        except subprocess.TimeoutExpired:
            text = None  # written: communicate() goes on reading
        if _exiting.is_set():
            why = 'the playbook run was stopped: the process that asked ' \
                  'for it is exiting'
        elif time.monotonic() > deadline:
            why = 'the playbook runner did not end within %d s' % seconds
        else:
            continue
        lifeline.close()
        try:
            runner.communicate(timeout=_GRACE)
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.communicate()
        raise PlaybookError(why)


def _stop_runs_at_exit():
    """Have the runs in flight stop as soon as this process begins to
    exit. Python runs this hook before it waits for the threads left
    (concurrent.futures' own hook, which the privsep daemon's pool of
    call threads is joined by, comes after it: it was registered
    before, when the pool started); an ``atexit`` function would come
    only after the runs had ended."""
    global _hooked
    with _hook_lock:
        if _hooked:
            return
        _hooked = True
        try:
            threading._register_atexit(_exiting.set)
        except RuntimeError:  # exiting already
            _exiting.set()
