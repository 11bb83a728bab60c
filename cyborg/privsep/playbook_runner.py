"""One playbook run with ansible-runner, as ``cyborg.privsep.playbook``
starts it: the run's description as JSON on standard input, its summary
as JSON on standard output.

The playbook runs on this host only (an inventory of ``localhost`` with
the local connection), with ansible-core's own configuration files out
of the way (``ANSIBLE_CONFIG`` points at an empty file) and every
temporary file in the run's private directory.

No process of the run outlives it. The runner is the child subreaper of
the run: ansible's workers start sessions of their own, and a process
whose parent dies is given to the runner, not to init. When the run
ends, and as soon as the daemon closes its end of the lifeline (the
pipe whose read end ``lifeline`` names), the runner kills every process
below it.
"""

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time

import ansible_runner

# The end of a task's message that is kept.
_MESSAGE_CHARS = 2000
_TASK_EVENTS = {
    'runner_on_ok': 'ok',
    'runner_on_failed': 'failed',
    'runner_on_skipped': 'skipped',
    'runner_on_unreachable': 'unreachable',
}


def _message(result):
    message = result.get('msg') or result.get('stderr') or ''
    if not isinstance(message, str):
        message = json.dumps(message)
    return message[-_MESSAGE_CHARS:]


def summary(runner):
    """{status, rc, tasks: [{name, status, message}], failed_task,
    message}: ``status`` is ansible-runner's (successful, failed,
    timeout, ...); a task's status ok, changed, failed, skipped or
    unreachable."""
    tasks = []
    failed = None
    for event in runner.events:
        status = _TASK_EVENTS.get(event.get('event'))
        if status is None:
            continue
        data = event.get('event_data', {})
        result = data.get('res') or {}
        if status == 'ok' and result.get('changed'):
            status = 'changed'
        if data.get('ignore_errors'):
            status = 'ok'
        task = {'name': data.get('task', ''), 'status': status,
                'message': _message(result)}
        tasks.append(task)
        if status in ('failed', 'unreachable') and failed is None:
            failed = task
    if failed is not None:
        message = failed['message']
    elif runner.status != 'successful':
        # ansible-playbook failed before any task: what it said.
        message = runner.stdout.read()[-_MESSAGE_CHARS:]
    else:
        message = ''
    return {'status': runner.status, 'rc': runner.rc, 'tasks': tasks,
            'failed_task': failed['name'] if failed else None,
            'message': message}


def run(spec):
    private = spec['private_data_dir']
    config = os.path.join(private, 'ansible.cfg')
    with open(config, 'w'):
        pass
    # The ansible-playbook installed beside this Python comes first.
    path = os.pathsep.join([os.path.dirname(sys.executable),
                            os.environ.get('PATH', os.defpath)])
    runner = ansible_runner.run(
        private_data_dir=private,
        playbook=spec['playbook'],
        inventory='localhost ansible_connection=local '
                  'ansible_python_interpreter=%s' % sys.executable,
        extravars=spec['extravars'],
        cmdline='--check' if spec['check_mode'] else None,
        envvars={'PATH': path,
                 'ANSIBLE_CONFIG': config,
                 'ANSIBLE_LIBRARY': spec['library'],
                 'ANSIBLE_MODULE_UTILS': spec['module_utils'],
                 'ANSIBLE_LOCAL_TEMP': os.path.join(private, 'tmp'),
                 'ANSIBLE_REMOTE_TEMP': os.path.join(private, 'tmp'),
                 'ANSIBLE_NOCOLOR': '1',
                 'ANSIBLE_RETRY_FILES_ENABLED': '0'},
        timeout=spec['timeout'],
        quiet=True,
        rotate_artifacts=1)
    return summary(runner)


_PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, 'prctl(PR_SET_CHILD_SUBREAPER): %s'
                      % os.strerror(errno))


def _living_below(pid):
    """The pids of the processes below ``pid`` that have not ended."""
    children = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry) as f:
                state, parent = f.read().rsplit(')', 1)[1].split()[:2]
        except (OSError, ValueError):
            continue  # gone meanwhile
        if state != 'Z':
            children.setdefault(int(parent), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def stop_everything():
    """Kill every process below this one, and reap those given to it,
    until none is left."""
    while True:
        below = _living_below(os.getpid())
        if not below:
            return
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass


def _stop_when_cut(lifeline):
    """Wait until the daemon closes its end of ``lifeline`` (nothing is
    ever written to it), then stop the run and end."""
    os.read(lifeline, 1)
    stop_everything()
    sys.stderr.write('the run was stopped: the privsep daemon closed its '
                     'lifeline\n')
    sys.stderr.flush()
    os._exit(3)


def main():
    spec = json.load(sys.stdin)
    _adopt_orphans()
    threading.Thread(target=_stop_when_cut, args=(spec['lifeline'],),
                     daemon=True).start()
    try:
        result = run(spec)
    finally:
        stop_everything()
    json.dump(result, sys.stdout)


if __name__ == '__main__':
    main()
