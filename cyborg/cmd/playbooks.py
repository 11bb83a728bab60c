"""cyborg-playbooks: check a directory of device configuration playbook
pairs before the agent's privsep daemon will run them.

    cyborg-playbooks check [DIRECTORY]

DIRECTORY defaults to ``/etc/cyborg/playbooks`` (``[device_config]
playbook_dir``). For each pair (a directory holding ``setup.yml``,
``teardown.yml`` and ``variables.yml``) it checks what the daemon will
check, and more:

- ownership: the pair, every directory above it and its files belong to
  root and no one else may change them;
- ``variables.yml`` is a valid declaration;
- both playbooks pass ``ansible-playbook --syntax-check`` with the
  shipped modules (``cyborg_sysfs_attribute``, ``cyborg_pci_driver``,
  ``cyborg_vgpu_type``, ``cyborg_mig_layout``) on the library path;
- every variable the playbooks read is declared, registered by a task,
  set by the host (``sysfs_root``, ``nvml_library``) or Ansible's own;
  a declared variable that no playbook reads is a warning;
- no pair takes the name of a shipped one.

Exit status: 0 when every pair passes, 1 when one only warns, 2 when one
fails.

``cyborg-playbooks plan [POLICY]`` shows what a policy would do on this
host without changing anything (``cyborg.cmd.playbook_plan``).
"""

import argparse
import os
import subprocess
import sys
import tempfile

import jinja2
from jinja2 import meta as jinja_meta
import yaml

from cyborg.cmd import playbook_plan
from cyborg.device_config import declared
from cyborg.privsep import checks
from cyborg.privsep import playbook

DEFAULT_DIRECTORY = '/etc/cyborg/playbooks'
# Keys whose values Ansible reads as bare Jinja expressions.
_EXPRESSIONS = ('when', 'that', 'failed_when', 'changed_when', 'until')
# Names a playbook may read without declaring them.
_ANSIBLE_NAMES = {'item', 'ansible_loop', 'hostvars', 'groups',
                  'inventory_hostname', 'omit', 'playbook_dir',
                  'ansible_check_mode', 'ansible_facts'}
_SYNTAX_TIMEOUT = 120


def _strings(node, expression=False):
    """(text, is_expression) of every string in a parsed playbook."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, key in _EXPRESSIONS)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value, expression)
    elif isinstance(node, str):
        yield node, expression


def _registered(node):
    if isinstance(node, dict):
        if isinstance(node.get('register'), str):
            yield node['register']
        for value in node.values():
            yield from _registered(value)
    elif isinstance(node, list):
        for value in node:
            yield from _registered(value)


def read_variables(path):
    """(names the playbook at ``path`` reads, names its tasks register)."""
    with open(path) as f:
        parsed = yaml.safe_load(f)
    environment = jinja2.Environment()
    names = set()
    for text, expression in _strings(parsed):
        source = '{{ %s }}' % text if expression else text
        try:
            names |= jinja_meta.find_undeclared_variables(
                environment.parse(source))
        except jinja2.TemplateSyntaxError:
            continue  # --syntax-check reports it
    return names, set(_registered(parsed))


def _syntax(paths):
    """ansible-playbook's complaint about the playbooks ``paths``, or
    None (one run for all: ansible starts slowly)."""
    with tempfile.TemporaryDirectory() as directory:
        config = os.path.join(directory, 'ansible.cfg')
        open(config, 'w').close()
        env = dict(os.environ, ANSIBLE_CONFIG=config,
                   ANSIBLE_LIBRARY=playbook.LIBRARY,
                   ANSIBLE_MODULE_UTILS=playbook.MODULE_UTILS,
                   ANSIBLE_LOCAL_TEMP=directory, LC_ALL='C.UTF-8')
        binary = os.path.join(os.path.dirname(sys.executable),
                              'ansible-playbook')
        try:
            done = subprocess.run(
                [binary, '--syntax-check', '-i', 'localhost,', *paths],
                capture_output=True, text=True, env=env, check=False,
                timeout=_SYNTAX_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return 'ansible-playbook --syntax-check did not end'
    if done.returncode == 0:
        return None
    return (done.stderr or done.stdout).strip()[-1000:]


def check_pair(directory):
    """(failures, warnings) of the pair in ``directory``."""
    failures, warnings = [], []
    name = os.path.basename(directory)
    if not declared.PAIR_NAME.fullmatch(name):
        return (['%r is not a pair name (letters, digits, _ and -)'
                 % name], [])
    shipped = os.path.join(playbook.SHIPPED, name)
    if (os.path.isdir(shipped)
            and os.path.realpath(directory) != os.path.realpath(shipped)):
        failures.append('a shipped pair has this name; the shipped one '
                        'would run')
    missing = [f for f in declared.PAIR_FILES
               if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        return failures + ['missing %s' % ', '.join(missing)], warnings
    try:
        playbook.check_ownership(directory, 'playbook pair %s' % name)
    except checks.InvalidArgument as exc:
        failures.append(str(exc))
    try:
        declaration = declared.load(os.path.join(directory,
                                                 'variables.yml'))
    except declared.Invalid as exc:
        return failures + [str(exc)], warnings
    paths = [os.path.join(directory, action + '.yml')
             for action in declared.ACTIONS]
    complaint = _syntax(paths)
    if complaint:
        return failures + [complaint], warnings
    read = set()
    for action, path in zip(declared.ACTIONS, paths, strict=True):
        names, registered = read_variables(path)
        read |= names
        undeclared = sorted(
            n for n in names - registered - set(declaration)
            - set(declared.RESERVED) - _ANSIBLE_NAMES
            if not n.startswith('ansible_'))
        if undeclared:
            failures.append('%s.yml reads %s, which variables.yml does not '
                            'declare' % (action, ', '.join(undeclared)))
    unused = sorted(set(declaration) - read)
    if unused:
        warnings.append('variables.yml declares %s, which no playbook reads'
                        % ', '.join(unused))
    return failures, warnings


def check(top, out=sys.stdout):
    """Check every pair below ``top``; the exit status."""
    if not os.path.isdir(top):
        print('%s: no such directory' % top, file=out)
        return 2
    worst = 0
    pairs = [n for n in sorted(os.listdir(top))
             if os.path.isdir(os.path.join(top, n))
             and n not in playbook.NOT_PAIRS]
    if not pairs:
        print('%s: no playbook pair' % top, file=out)
        return 1
    for name in pairs:
        failures, warnings = check_pair(os.path.join(top, name))
        verdict = 'FAIL' if failures else 'WARN' if warnings else 'OK'
        print('%-4s %s' % (verdict, name), file=out)
        for problem in failures + warnings:
            for line in problem.splitlines():
                print('     %s' % line, file=out)
        worst = max(worst, 2 if failures else 1 if warnings else 0)
    return worst


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='cyborg-playbooks',
        description='Check device configuration playbook pairs.')
    commands = parser.add_subparsers(dest='command', required=True)
    checking = commands.add_parser('check', help='check a directory of '
                                   'playbook pairs')
    checking.add_argument('directory', nargs='?', default=DEFAULT_DIRECTORY)
    playbook_plan.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == 'plan':
        return playbook_plan.main(args)
    return check(os.path.abspath(args.directory))


if __name__ == '__main__':
    sys.exit(main())
