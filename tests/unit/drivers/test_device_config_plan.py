"""cyborg-playbooks plan (tools/device_config_dry_run.py): what a policy
would do to a recorded host, found by the agent's drivers, the real
playbooks in check mode and read-only NVML, with the tree left byte for
byte as it was."""

import json
import os

from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.nic import intel
from cyborg.agent import config_plan
from cyborg.agent import device_state
from tests import script_module
from tests.unit.drivers.conftest import make_driver_conf
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

PF = hosts.X710_P0.bdf
VF_POLICY = {'name': 'x710-8-vfs', 'priority': 10, 'hosts': ['*'],
             'kind': 'sriov_vfs', 'devices': {'pci_addresses': [PF]},
             'settings': {'num_vfs': 8}}
H100_VM = '0000:00:06.0'  # the GPU of the recorded NVML session
TOOL = script_module.load('tools/device_config_dry_run.py',
                          'device_config_dry_run')


def snapshot(root):
    """{path: file contents, or the target of a link} of a tree."""
    found = {}
    for top, directories, files in os.walk(root):
        for name in directories + files:
            path = os.path.join(top, name)
            if os.path.islink(path):
                found[path] = ('link', os.readlink(path))
            elif os.path.isfile(path):
                with open(path, 'rb') as f:
                    found[path] = ('file', f.read())
    return found


def dry_run(tmp_path, capsys, root, *args):
    """The tool run as an operator would, with an empty configuration;
    (exit status, standard output, standard error)."""
    config = tmp_path / 'cyborg.conf'
    config.write_text('')
    status = TOOL.main(['--config-file', str(config), '--host', 'compute-1',
                        '--sysfs-root', root, '--drivers', 'intel_nic_driver',
                        *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_vf_policy_shows_the_pf_its_counts_and_what_would_change(
        tmp_path, capsys, fresh_host_tree):
    root = fresh_host_tree('io')
    before = snapshot(root)

    status, out, _ = dry_run(tmp_path, capsys, root, json.dumps(VF_POLICY))

    assert status == 0, out
    assert 'nothing is changed' in out
    assert '  intel_nic_driver         NIC    %s ' % PF in out
    assert 'It selects 1 device(s) on this host.' in out
    assert '\n%s (8086:1572, reported by intel_nic_driver)\n' % PF in out
    assert 'sriov_numvfs 4; sriov_totalvfs 64' in out
    assert '  VFs: 4 now, 8 wanted (sriov_totalvfs 64)\n' in out
    assert 'check mode successful, 2 of 5 tasks would change' in out
    assert '    would change  Remove the VFs that exist\n' in out
    assert '    would change  Create the VFs\n' in out
    assert '    ok            Read the VF count\n' in out
    assert snapshot(root) == before


def test_a_policy_that_selects_nothing_runs_nothing(tmp_path, capsys,
                                                    host_tree):
    policy = dict(VF_POLICY, devices={'vendor_id': '10de'})

    status, out, _ = dry_run(tmp_path, capsys, host_tree('io'), '--json',
                             json.dumps(policy))

    report = json.loads(out)
    assert status == 0
    assert report['host_selected'] is True
    assert report['selected'] == []
    assert [d['pci_address'] for d in report['devices']] == [
        PF, hosts.X710_P1.bdf, hosts.E810.bdf]


def test_another_hosts_policy_selects_nothing_here(tmp_path, capsys,
                                                   host_tree):
    policy = dict(VF_POLICY, hosts=['gpu-*'])

    status, out, _ = dry_run(tmp_path, capsys, host_tree('io'),
                             json.dumps(policy))

    assert status == 0
    assert 'Its hosts do not include compute-1: it selects nothing here.' \
        in out


def test_an_invalid_policy_is_refused_with_the_apis_sentence(
        tmp_path, capsys, host_tree):
    policy = dict(VF_POLICY, settings={'num_vfs': -1})

    status, out, err = dry_run(tmp_path, capsys, host_tree('io'),
                               json.dumps(policy))

    assert (status, out) == (2, '')
    assert 'num_vfs must be a whole number from 0 to 2048, not -1.' in err


def test_settings_applied_before_put_the_teardown_first(monkeypatch,
                                                        host_tree):
    checked = []
    monkeypatch.setattr(config_plan, 'check_run', lambda *run: checked.append(
        run[:3]) or {'status': 'successful', 'tasks': [],
                     'would_change': []})
    reader = pci.PCIReader(host_tree('io'))

    report = config_plan.plan(
        reader, [intel.IntelNICDriver(make_driver_conf(), reader)],
        'compute-1', config_plan.read_policy(VF_POLICY),
        applied={'num_vfs': 4})

    assert checked == [
        ('sriov_vfs', 'teardown', {'pci_address': PF, 'num_vfs': 4}),
        ('sriov_vfs', 'setup', {'pci_address': PF, 'num_vfs': 8})]
    assert report['selected'][0]['compare'] == [
        'VFs: 4 now, 8 wanted (sriov_totalvfs 64)']


def test_a_gpu_without_nvml_shows_its_types_and_says_so(host_tree):
    reader = pci.PCIReader(host_tree('gpu'))

    with device_state.MIGModes('cyborg_no_such_nvml') as modes:
        state = device_state.read(reader, hosts.T4.bdf, modes)

    assert state == {
        'driver': 'nvidia', 'driver_override': None,
        'mdev_types': ['nvidia-222', 'nvidia-223', 'nvidia-230'],
        'mig_mode': 'no NVML: the NVML bindings (Python package '
                    'nvidia-ml-py) are not installed'}


def test_vfs_that_take_a_type_themselves_are_read(tmp_path):
    reader = pci.PCIReader(sysfs.build(str(tmp_path), hosts.H100_HOST))

    state = device_state.read(reader, hosts.H100.bdf)

    assert state['vf_vgpu_types'] == {'0000:4e:00.4': None,
                                      '0000:4e:00.5': 'nvidia-1062',
                                      '0000:4e:00.6': None}
    assert state['creatable_vgpu_types'] == ['nvidia-1061', 'nvidia-1062']
    assert (state['sriov_numvfs'], state['sriov_totalvfs']) == (3, 32)
    assert 'mig_mode' not in state


def test_the_mig_mode_is_read_through_nvml(mig_nvml):
    mig_nvml()
    with device_state.MIGModes() as modes:
        assert modes.read(H100_VM) == 'on'
        assert modes.read('0000:99:00.0').startswith('unknown: NVML: ')


def test_the_mig_mode_off_as_recorded(mig_nvml):
    mig_nvml(mig_enabled=False)
    with device_state.MIGModes() as modes:
        assert modes.read(H100_VM) == 'off'


def test_a_pair_that_escapes_check_mode_is_not_run(tmp_path):
    (tmp_path / 'setup.yml').write_text(
        '- hosts: localhost\n  tasks:\n'
        '    - name: Reset the card\n'
        '      ansible.builtin.command: /usr/bin/reset-card\n'
        '      check_mode: false\n')
    (tmp_path / 'teardown.yml').write_text(
        '- hosts: localhost\n  tasks:\n'
        '    - ansible.builtin.include_tasks: more.yml\n')

    assert config_plan.escapes_check_mode(str(tmp_path)) == [
        "setup.yml: task 'Reset the card' sets check_mode to False, so it "
        'would run for real',
        'teardown.yml: ansible.builtin.include_tasks brings in tasks this '
        'check does not read']


def test_the_shipped_pairs_stay_in_check_mode():
    shipped = config_plan.playbook.SHIPPED
    pairs = [os.path.join(shipped, name) for name in os.listdir(shipped)
             if os.path.isfile(os.path.join(shipped, name, 'setup.yml'))]

    assert len(pairs) >= 3
    for pair in pairs:
        assert config_plan.escapes_check_mode(pair) == [], pair
