"""cyborg-playbooks check: what the daemon would refuse, and what would
fail at run time, found before a pair is used."""

import io
import os

from cyborg.cmd import playbooks
from cyborg.privsep import playbook

GOOD = '''\
- name: Good
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Read the VF count
      cyborg_sysfs_attribute:
        root: "{{ sysfs_root }}"
        device: "{{ pci_address }}"
        attribute: sriov_numvfs
      register: current
    - name: Say it
      ansible.builtin.debug:
        msg: "{{ current.current }}"
      when: current.current | int > limit
'''
VARIABLES = 'pci_address: {type: pci_address}\nlimit: {type: integer}\n'


def pair(top, name, setup=GOOD, variables=VARIABLES, mode=0o755):
    directory = top / name
    directory.mkdir()
    directory.chmod(mode)
    (directory / 'setup.yml').write_text(setup)
    (directory / 'teardown.yml').write_text(GOOD)
    (directory / 'variables.yml').write_text(variables)


def run(top):
    out = io.StringIO()
    status = playbooks.check(str(top), out=out)
    return status, out.getvalue()


def test_the_shipped_pairs_pass():
    status, out = run(playbook.SHIPPED)
    assert status == 0, out
    assert out.splitlines() == ['OK   driver_binding', 'OK   mig_layout',
                                'OK   qat_vfs', 'OK   sriov_vfs',
                                'OK   vgpu_type']


def test_a_good_pair_passes(tmp_path):
    pair(tmp_path, 'mine')
    assert run(tmp_path) == (0, 'OK   mine\n')


def test_each_problem_is_named(tmp_path):
    pair(tmp_path, 'undeclared', setup=GOOD.replace('> limit',
                                                    '> limit + extra'))
    pair(tmp_path, 'unused', variables=VARIABLES + 'spare: {type: boolean}\n')
    pair(tmp_path, 'loose', mode=0o777)
    pair(tmp_path, 'sriov_vfs')
    pair(tmp_path, 'broken', setup=GOOD.replace('tasks:', 'taskz:'))
    pair(tmp_path, 'badvars', variables='x: {type: float}\n')
    os.mkdir(tmp_path / 'half')
    (tmp_path / 'half' / 'setup.yml').write_text(GOOD)

    status, out = run(tmp_path)

    assert status == 2
    verdicts = {line.split()[1]: line.split()[0]
                for line in out.splitlines() if not line.startswith(' ')}
    assert verdicts == {'undeclared': 'FAIL', 'unused': 'WARN',
                        'loose': 'FAIL', 'sriov_vfs': 'FAIL',
                        'broken': 'FAIL', 'badvars': 'FAIL',
                        'half': 'FAIL'}, out
    assert 'setup.yml reads extra, which variables.yml does not declare' \
        in out
    assert 'declares spare, which no playbook reads' in out
    assert 'may be changed by others than root (mode 777)' in out
    assert 'a shipped pair has this name' in out
    assert "'taskz' is not a valid attribute" in out
    assert 'x needs a type' in out
    assert 'missing teardown.yml, variables.yml' in out


def test_a_missing_directory_fails(tmp_path):
    assert run(tmp_path / 'nowhere') == (
        2, '%s: no such directory\n' % (tmp_path / 'nowhere'))
