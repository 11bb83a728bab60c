"""The sudoers rule that the installation guide and the devstack plugin
give the agent's user, judged by the real sudo.

Each rule is installed in a mount namespace of the test's own, bound over
``/etc/sudoers`` with a throwaway user bound into ``/etc/passwd`` (nothing
changes outside it), and ``sudo -l -U <user> <command>`` answers whether
the user may run that command line as root. The one command line that
``cyborg-privsep-launcher`` runs is allowed; the same with any argument
added, or another socket, is not.
"""

import os
import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

from cyborg.privsep import launcher
from tests.unit import test_devstack

REPO = pathlib.Path(__file__).resolve().parents[3]
USER = 'cyborg-sudo-test'
# Run in the namespace: $1 passwd, $2 sudoers, $3 a directory for
# /usr/local/bin (the guide's paths), then the command.
_NAMESPACE = ('mount --bind "$1" /etc/passwd && mount --bind "$2" '
              '/etc/sudoers && mount --bind "$3" /usr/local/bin && '
              'shift 3 && exec "$@"')


def _sudo_allows(tmp_path, rule, user, command):
    """Whether sudo, with ``rule`` as its whole policy, lets ``user`` run
    ``command`` as root."""
    assert shutil.which('sudo') and shutil.which('visudo'), (
        'sudo is not installed (.ci/run installs it)')
    sudoers = tmp_path / 'sudoers'
    sudoers.write_text('Defaults env_reset\n%s\n' % rule)
    sudoers.chmod(0o440)
    check = subprocess.run(['visudo', '-c', '-f', str(sudoers)],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    passwd = tmp_path / 'passwd'
    passwd.write_text(pathlib.Path('/etc/passwd').read_text()
                      + '%s:x:64999:65534::/nonexistent:/usr/sbin/nologin\n'
                      % user)
    result = subprocess.run(
        ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c',
         _NAMESPACE, 'sh', str(passwd), str(sudoers),
         str(tmp_path / 'usr-local-bin'), 'sudo', '-n', '-l', '-U', user,
         *command],
        capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert 'command not found' not in result.stderr, result.stderr
    return result.returncode == 0


def _executable(path):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\nexit 0\n')
    path.chmod(0o755)


def _guide_rule_and_helper_command():
    """The rule and ``helper_command`` of the installation guide."""
    text = (REPO / 'doc' / 'source' / 'install.rst').read_text()
    [rule] = re.findall(r'^    (\S+ ALL=\(root\) NOPASSWD: .*)$', text,
                        re.MULTILINE)
    [helper_command] = re.findall(r'^    helper_command = (.*)$', text,
                                  re.MULTILINE)
    return rule, helper_command


def _devstack_rule_and_helper_command(tmp_path):
    directory = tmp_path / 'devstack'
    directory.mkdir()
    run = test_devstack.run_plugin(directory,
                                   phases=[('stack', 'post-config')])
    conf = test_devstack.read_ini(run.cyborg_conf)
    return (run.sudoers.read_text().strip(),
            conf['privsep_agent']['helper_command'])


def _shipped(tmp_path, source):
    if source == 'install guide':
        rule, helper_command = _guide_rule_and_helper_command()
    else:
        rule, helper_command = _devstack_rule_and_helper_command(tmp_path)
    # For the throwaway user: the rule's user is the guide's or stack.sh's.
    rule = '%s %s' % (USER, rule.split(' ', 1)[1])
    words = shlex.split(helper_command)
    if os.path.basename(words[0]) == 'cyborg-privsep-launcher':
        link, command = words[1], words[2:]
        socket_path = link
    else:
        # oslo.privsep's own socket: in a new temporary directory each time.
        link, command = None, words
        socket_path = '/tmp/tmpk2j4x9qz/privsep.sock'
    # The command run as root, where sudo looks for it.
    root_command = launcher.root_command(command)
    helper = root_command[0]
    if helper.startswith('/usr/local/bin/'):
        helper = str(tmp_path / 'usr-local-bin' / os.path.basename(helper))
    (tmp_path / 'usr-local-bin').mkdir(exist_ok=True)
    _executable(helper)
    return (rule, root_command + launcher.pinned_arguments(socket_path),
            command, link)


@pytest.fixture(params=['install guide', 'devstack'])
def shipped(request, tmp_path):
    return _shipped(tmp_path, request.param)


def test_the_rule_has_no_wildcard_and_is_the_launchers(shipped):
    rule, pinned, command, link = shipped
    assert '*' not in rule and '?' not in rule and '[' not in rule
    assert rule == launcher.sudoers_rule(USER, command, link)
    assert rule.split()[3:] == pinned


def test_sudo_allows_the_pinned_command_line(shipped, tmp_path):
    rule, pinned, _command, _link = shipped
    assert _sudo_allows(tmp_path, rule, USER, pinned)


@pytest.mark.parametrize('extra', [
    # Code as root: the logging configuration is read by fileConfig.
    ['--log-config-append', '/tmp/evil.ini'],
    # Another project's context (Nova's), or options of the caller's.
    ['--privsep_context', 'nova.privsep.sys_admin_pctxt'],
    ['--config-file', '/tmp/capabilities.conf'],
    ['--config-dir', '/tmp'],
])
def test_sudo_refuses_an_argument_more(shipped, tmp_path, extra):
    rule, pinned, _command, _link = shipped
    assert not _sudo_allows(tmp_path, rule, USER, pinned + extra)


def test_sudo_refuses_another_socket(shipped, tmp_path):
    rule, pinned, _command, _link = shipped
    assert not _sudo_allows(tmp_path, rule, USER,
                            pinned[:-1] + ['/tmp/elsewhere/privsep.sock'])


def test_sudo_refuses_another_user(shipped, tmp_path):
    rule, pinned, _command, _link = shipped
    assert not _sudo_allows(tmp_path, rule, 'nobody', pinned)
