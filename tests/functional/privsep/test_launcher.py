"""cyborg-privsep-launcher as oslo.privsep runs it, with a stand-in for
``sudo privsep-helper`` that records its arguments and connects to its
``--privsep_sock_path`` as the helper does.

(The real helper through the launcher: ``test_daemon.py`` and
``tests/functional/services/test_unprivileged_agent.py``.)
"""

import os
import pathlib
import socket
import subprocess
import sys
import tempfile

import pytest

from cyborg.privsep import launcher

# Records its arguments, then connects to the socket it is given and says
# hello, as privsep-helper connects before it forks the daemon.
HELPER = '''#!%(python)s
import socket, sys
with open(%(record)r, 'w') as f:
    f.write('\\n'.join(sys.argv[1:]))
path = sys.argv[sys.argv.index('--privsep_sock_path') + 1]
with socket.socket(socket.AF_UNIX) as s:
    s.connect(path)
    s.sendall(b'hello')
sys.exit(%(status)d)
'''


class Client:
    """What oslo.privsep's client does: a socket in a new temporary
    directory, then the helper command with the two arguments."""

    def __init__(self, directory, status=0):
        self.record = directory / 'argv'
        self.helper = directory / 'privsep-helper'
        self.helper.write_text(HELPER % {'python': sys.executable,
                                         'record': str(self.record),
                                         'status': status})
        self.helper.chmod(0o755)
        self.links = directory / 'links'
        self.links.mkdir(mode=0o700)
        self.link = str(self.links / 'agent.sock')

    def start(self, context=launcher.CONTEXT, link=None):
        """``(exit status, stderr, what the socket got)``."""
        tmpdir = tempfile.mkdtemp()
        sock_path = os.path.join(tmpdir, 'privsep.sock')
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(sock_path)
            listener.listen(1)
            listener.settimeout(30)
            result = subprocess.run(
                [sys.executable, '-m', 'cyborg.privsep.launcher',
                 link or self.link, str(self.helper), '--config-file',
                 '/etc/cyborg/cyborg.conf', '--privsep_context', context,
                 '--privsep_sock_path', sock_path],
                capture_output=True, text=True, timeout=60, check=False)
            got = b''
            if self.record.exists():
                connection, _ = listener.accept()
                with connection:
                    got = connection.recv(16)
        os.unlink(sock_path)
        os.rmdir(tmpdir)
        return result.returncode, result.stderr, got

    @property
    def argv(self):
        return self.record.read_text().splitlines()


@pytest.fixture
def client(tmp_path):
    return Client(tmp_path)


def test_the_helper_gets_the_fixed_link_and_reaches_the_socket(client):
    status, stderr, got = client.start()
    assert (status, stderr) == (0, '')
    assert client.argv == ['--config-file', '/etc/cyborg/cyborg.conf',
                           '--privsep_context', 'cyborg.privsep.agent_pctxt',
                           '--privsep_sock_path', client.link]
    assert got == b'hello'
    # The link is gone once the helper has connected.
    assert not os.path.lexists(client.link)
    # Started again (another oslo.privsep socket): the same words.
    first = client.argv
    assert client.start()[0] == 0
    assert client.argv == first


def test_another_context_is_not_started(client):
    status, stderr, _got = client.start(
        context='nova.privsep.sys_admin_pctxt')
    assert status == 1
    assert ("only the agent's context cyborg.privsep.agent_pctxt is "
            "started, not nova.privsep.sys_admin_pctxt") in stderr
    assert not client.record.exists()


@pytest.mark.parametrize('mode', [0o720, 0o702, 0o777])
def test_a_link_directory_others_may_write_is_refused(client, mode):
    client.links.chmod(mode)
    status, stderr, _got = client.start()
    assert status == 1
    assert 'must belong to uid 0 and be writable by no one else' in stderr
    assert not client.record.exists()
    assert not os.path.lexists(client.link)


def test_a_link_directory_of_another_user_is_refused(client):
    os.chown(client.links, 65534, 65534)
    status, stderr, _got = client.start()
    assert status == 1
    assert 'it belongs to uid 65534' in stderr
    assert not client.record.exists()


def test_a_link_directory_that_is_a_link_is_refused(client, tmp_path):
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir(mode=0o700)
    (tmp_path / 'via').symlink_to(elsewhere)
    status, stderr, _got = client.start(link=str(tmp_path / 'via' / 'a.sock'))
    assert status == 1
    assert 'is not a directory' in stderr
    assert not client.record.exists()


def test_a_helper_that_fails_names_the_sudoers_rule(tmp_path):
    client = Client(tmp_path, status=3)
    status, stderr, _got = client.start()
    assert status == 1
    rule = launcher.sudoers_rule('root', [str(client.helper),
                                          '--config-file',
                                          '/etc/cyborg/cyborg.conf'],
                                 client.link)
    assert 'exited with status 3; the sudoers rule for it is: %s' % rule in (
        stderr)
    assert not os.path.lexists(client.link)


def test_the_sudoers_rule_is_the_command_after_sudo_word_for_word():
    assert launcher.sudoers_rule(
        'cyborg', ['sudo', '-n', '/usr/bin/privsep-helper', '--config-file',
                   '/etc/cyborg/cyborg.conf'],
        '/var/lib/cyborg/privsep/agent.sock') == (
        'cyborg ALL=(root) NOPASSWD: /usr/bin/privsep-helper --config-file '
        '/etc/cyborg/cyborg.conf --privsep_context cyborg.privsep.agent_pctxt '
        '--privsep_sock_path /var/lib/cyborg/privsep/agent.sock')


@pytest.mark.parametrize('command, link, match', [
    (['sudo', 'privsep-helper'], '/run/a.sock', 'must be an absolute path'),
    (['sudo', '/usr/bin/privsep-helper', '--config-file', '/etc/*.conf'],
     '/run/a.sock', 'without quoting or wildcards'),
    (['sudo', '/usr/bin/privsep-helper'], '/run/my socket',
     'without quoting or wildcards'),
    (['sudo', '/usr/bin/privsep-helper', '--config-file', '/etc/a,b.conf'],
     '/run/a.sock', 'without quoting or wildcards'),
])
def test_no_rule_with_a_wildcard_or_sudoers_syntax(command, link, match):
    with pytest.raises(launcher.LaunchError, match=match):
        launcher.sudoers_rule('cyborg', command, link)


def test_arguments_not_from_oslo_privsep_are_refused():
    for argv in ([], ['/run/a.sock', 'sudo'],
                 ['/run/a.sock', 'sudo', 'x', '--privsep_sock_path', '/s',
                  '--privsep_context', launcher.CONTEXT],
                 ['relative.sock', 'sudo', '--privsep_context',
                  launcher.CONTEXT, '--privsep_sock_path', '/s']):
        with pytest.raises(launcher.LaunchError):
            launcher.parse(argv)
    assert launcher.parse(
        ['/run/a.sock', 'sudo', 'helper', '--privsep_context',
         launcher.CONTEXT, '--privsep_sock_path', '/tmp/x/privsep.sock']) == (
        '/run/a.sock', ['sudo', 'helper'], '/tmp/x/privsep.sock')


def test_the_console_script_is_declared():
    setup_cfg = pathlib.Path(__file__).resolve().parents[3] / 'setup.cfg'
    assert ('cyborg-privsep-launcher = cyborg.privsep.launcher:main'
            in setup_cfg.read_text())
