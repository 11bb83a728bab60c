"""The shipped playbooks' own modules, run in the test process the way
``ansible-playbook`` runs them on a host (arguments in, one JSON result
out), against trees written by ``sysfs.build``: what each reads, writes
and refuses, links that lead out of the tree included."""

import json
import os
import sys

from ansible.module_utils import basic
import pytest

from cyborg.privsep import playbook
from tests import script_module
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

PF = hosts.X710_P0.bdf
VF = hosts.X710_P0_VFS[0].bdf
H100 = hosts.H100.bdf
H100_VF_BDFS = [vf.bdf for vf in hosts.H100_VFS]
QAT = hosts.QAT_C62X.bdf
QAT4 = hosts.QAT_4XXX.bdf


def load(name):
    return script_module.load(os.path.join(playbook.LIBRARY, name + '.py'))


# What ansible ships beside each module that imports it.
sys.modules.setdefault(
    'ansible.module_utils.cyborg_sysfs', script_module.load(
        os.path.join(playbook.MODULE_UTILS, 'cyborg_sysfs.py'),
        'ansible.module_utils.cyborg_sysfs'))


PCI_DRIVER = load('cyborg_pci_driver')
SYSFS_ATTRIBUTE = load('cyborg_sysfs_attribute')
VGPU_TYPE = load('cyborg_vgpu_type')


@pytest.fixture
def run(monkeypatch, capsys):
    """``run(module, args, check_mode=False)``: the module's result, with
    ``failed`` when it failed."""
    def run_module(module, args, check_mode=False):
        payload = {'ANSIBLE_MODULE_ARGS': dict(
            args, _ansible_check_mode=check_mode)}
        # ansible-core's way of invoking a module by hand: its arguments
        # as the first command-line argument, read once per process.
        monkeypatch.setattr(sys, 'argv', ['module', json.dumps(payload)])
        monkeypatch.setattr(basic, '_ANSIBLE_ARGS', None)
        monkeypatch.setattr(basic, '_ANSIBLE_PROFILE', None)
        with pytest.raises(SystemExit):
            module.main()
        return json.loads(capsys.readouterr().out)
    return run_module


@pytest.fixture
def root(tmp_path):
    functions = ([f for f in hosts.IO_HOST
                  if f.bdf in {PF, hosts.X710_P0.parent}
                  or f in hosts.X710_P0_VFS]
                 + [f for f in hosts.GPU_HOST
                    if f.bdf in {hosts.T4.bdf, hosts.T4.parent,
                                 hosts.A100.bdf, hosts.A100.parent}
                    or f in hosts.A100_VFS]
                 + [f for f in hosts.H100_HOST
                    if f.bdf in {H100, hosts.H100.parent}
                    or f in hosts.H100_VFS]
                 + [f for f in hosts.IO_HOST
                    if f.bdf in {QAT, hosts.QAT_C62X.parent, QAT4,
                                 hosts.QAT_4XXX.parent}
                    or f in hosts.QAT_C62X_VFS])
    return sysfs.build(str(tmp_path / 'host'), functions)


def path(root, address, *parts):
    return os.path.join(root, 'sys/bus/pci/devices', address, *parts)


def read(file_name):
    with open(file_name) as f:
        return f.read()


def driver_args(root, **kw):
    return dict(root=root, device=VF, **kw)


# -- cyborg_pci_driver --------------------------------------------------------

def test_the_driver_and_override_are_read(run, root):
    result = run(PCI_DRIVER, driver_args(root))
    assert (result['changed'], result['driver'], result['override']) == (
        False, 'iavf', '')


def test_an_override_is_written_once_and_cleared_with_a_newline(run, root):
    override = path(root, VF, 'driver_override')

    assert run(PCI_DRIVER, driver_args(root, override='vfio-pci'))[
        'changed'] is True
    assert read(override) == 'vfio-pci'
    again = run(PCI_DRIVER, driver_args(root, override='vfio-pci'))
    assert (again['changed'], again['override']) == (False, 'vfio-pci')

    assert run(PCI_DRIVER, driver_args(root, override=''))['changed'] is True
    assert read(override) == '\n'
    assert run(PCI_DRIVER, driver_args(root, override=''))[
        'changed'] is False


@pytest.mark.parametrize('name', ['../vfio-pci', 'vfio-pci/..', 'VFIO',
                                  'vfio pci', 'vfio-pci\n', 'x' * 33])
def test_a_name_that_is_no_driver_name_is_refused(run, root, name):
    result = run(PCI_DRIVER, driver_args(root, override=name))

    assert result['failed'] is True
    assert 'is not a driver name' in result['msg']
    assert read(path(root, VF, 'driver_override')) == '(null)\n'


def test_unbind_and_probe_write_the_address(run, root):
    unbind = os.path.join(root, 'sys/bus/pci/drivers/iavf/unbind')
    probe = os.path.join(root, 'sys/bus/pci/drivers_probe')

    assert run(PCI_DRIVER, driver_args(root, unbind=True))['changed'] is True
    assert read(unbind) == VF
    assert run(PCI_DRIVER, driver_args(root, probe=True))['changed'] is True
    assert read(probe) == VF

    os.unlink(path(root, VF, 'driver'))
    open(unbind, 'w').close()
    unbound = run(PCI_DRIVER, driver_args(root, unbind=True))
    assert (unbound['changed'], unbound['driver']) == (False, '')
    assert read(unbind) == ''


def test_check_mode_writes_nothing(run, root):
    for action in ({'override': 'vfio-pci'}, {'unbind': True},
                   {'probe': True}):
        assert run(PCI_DRIVER, driver_args(root, **action),
                   check_mode=True)['changed'] is True
    assert read(path(root, VF, 'driver_override')) == '(null)\n'
    assert read(os.path.join(root, 'sys/bus/pci/drivers/iavf/unbind')) == ''
    assert read(os.path.join(root, 'sys/bus/pci/drivers_probe')) == ''


def test_two_actions_in_one_task_are_refused(run, root):
    result = run(PCI_DRIVER, driver_args(root, unbind=True, probe=True))
    assert result['failed'] is True
    assert read(os.path.join(root, 'sys/bus/pci/drivers_probe')) == ''


def test_links_out_of_the_tree_are_not_followed(run, root, tmp_path):
    outside = tmp_path / 'outside'
    (outside / 'evil').mkdir(parents=True)
    (outside / 'evil' / 'unbind').write_text('')
    (outside / 'drivers_probe').write_text('')

    # A driver link to a directory outside the root.
    link = path(root, VF, 'driver')
    os.unlink(link)
    os.symlink(outside / 'evil', link)
    result = run(PCI_DRIVER, driver_args(root, unbind=True))
    assert result['failed'] is True
    assert 'outside' in result['msg']

    # A driver link below the drivers, but not to one.
    nested = os.path.join(root, 'sys/bus/pci/drivers/iavf/nested')
    os.mkdir(nested)
    open(os.path.join(nested, 'unbind'), 'w').close()
    os.unlink(link)
    os.symlink(nested, link)
    result = run(PCI_DRIVER, driver_args(root, unbind=True))
    assert result['failed'] is True
    assert 'not a driver of' in result['msg']

    # drivers_probe through a link.
    os.unlink(link)
    probe = os.path.join(root, 'sys/bus/pci/drivers_probe')
    os.unlink(probe)
    os.symlink(outside / 'drivers_probe', probe)
    result = run(PCI_DRIVER, driver_args(root, probe=True))
    assert result['failed'] is True
    assert 'goes through a link' in result['msg']

    assert read(outside / 'evil' / 'unbind') == ''
    assert read(os.path.join(nested, 'unbind')) == ''
    assert read(outside / 'drivers_probe') == ''
    assert read(os.path.join(root, 'sys/bus/pci/drivers/iavf/unbind')) == ''


@pytest.mark.parametrize('device', ['%s/../..' % VF, '0000:18:02.8',
                                    VF + '\n', '../' + VF])
def test_a_device_that_is_no_pci_address_is_refused(run, root, device):
    result = run(PCI_DRIVER, {'root': root, 'device': device,
                              'probe': True})
    assert result['failed'] is True
    assert 'is not a PCI address' in result['msg']
    assert read(os.path.join(root, 'sys/bus/pci/drivers_probe')) == ''


def test_the_vfs_and_their_drivers_are_read_when_asked(run, root):
    vfs = [vf.bdf for vf in hosts.QAT_C62X_VFS]
    os.unlink(path(root, vfs[1], 'driver'))

    result = run(PCI_DRIVER, {'root': root, 'device': QAT, 'vfs': True})

    assert (result['changed'], result['driver'], result['vfs']) == (
        False, 'c6xx', [{'address': vf, 'driver': '' if vf == vfs[1]
                         else 'vfio-pci'} for vf in vfs])
    assert 'vfs' not in run(PCI_DRIVER, {'root': root, 'device': QAT})


def test_a_virtfn_link_out_of_the_tree_is_not_followed(run, root, tmp_path):
    outside = tmp_path / 'outside' / '0000:3d:01.0'
    outside.mkdir(parents=True)
    link = os.path.join(os.path.realpath(path(root, QAT)), 'virtfn0')
    os.unlink(link)
    os.symlink(outside, link)

    result = run(PCI_DRIVER, {'root': root, 'device': QAT, 'vfs': True})

    assert result['failed'] is True
    assert 'outside' in result['msg']


# -- cyborg_sysfs_attribute ---------------------------------------------------

def test_an_attribute_one_directory_down_takes_a_list(run, root):
    args = {'root': root, 'device': QAT4, 'attribute': 'qat/cfg_services'}
    assert run(SYSFS_ATTRIBUTE, args)['current'] == 'sym;asym'

    result = run(SYSFS_ATTRIBUTE, dict(args, value='asym;dc'))

    assert (result['changed'], result['exists'], result['previous']) == (
        True, True, 'sym;asym')
    assert read(path(root, QAT4, 'qat/cfg_services')) == 'asym;dc'


def test_a_missing_attribute_is_answered_only_where_allowed(run, root):
    """A gen2 QAT device has no qat/state: nothing is made there."""
    args = {'root': root, 'device': QAT, 'attribute': 'qat/state',
            'value': 'down'}

    result = run(SYSFS_ATTRIBUTE, dict(args, missing_ok=True))
    assert (result['changed'], result['exists'], result['current']) == (
        False, False, '')

    result = run(SYSFS_ATTRIBUTE, args)
    assert result['failed'] is True
    assert 'cannot read' in result['msg']
    assert not os.path.exists(path(root, QAT, 'qat'))


@pytest.mark.parametrize('attribute', [
    'qat/../driver_override', '../sriov_numvfs', 'qat/state/up',
    '/qat/state', 'qat//state', 'qat/'])
def test_an_attribute_that_is_no_attribute_name_is_refused(run, root,
                                                           attribute):
    result = run(SYSFS_ATTRIBUTE, {'root': root, 'device': QAT4,
                                   'attribute': attribute, 'value': 'up'})

    assert result['failed'] is True
    assert 'is not an attribute name' in result['msg']


# -- cyborg_vgpu_type ---------------------------------------------------------

def vgpu_args(root, device=H100, mdev_type='nvidia-1062', **kw):
    return dict(root=root, device=device, mdev_type=mdev_type, **kw)


def current_types(root):
    return [read(path(root, vf, 'nvidia/current_vgpu_type')).strip()
            for vf in H100_VF_BDFS]


def test_the_types_of_a_gpu_whose_vfs_take_one(run, root):
    result = run(VGPU_TYPE, vgpu_args(root, mdev_type='nvidia-1061'))

    assert (result['sriov'], result['offered'], result['offers'],
            result['others']) == (
        True, True, ['nvidia-1061', 'nvidia-1062'],
        ['0000:4e:00.5 holds nvidia-1062'])


@pytest.mark.parametrize('device, mdev_type, offers', [
    (hosts.T4.bdf, 'nvidia-222', ['nvidia-222', 'nvidia-223',
                                  'nvidia-230']),
    # An A100 under mdev: its VFs' types, as the NVIDIA driver reports.
    (hosts.A100.bdf, 'nvidia-472', ['nvidia-472', 'nvidia-473']),
])
def test_mdev_types_are_read_and_nothing_is_written(run, root, device,
                                                    mdev_type, offers):
    result = run(VGPU_TYPE, vgpu_args(root, device, mdev_type,
                                      state='present'))

    assert (result['changed'], result['sriov'], result['offered'],
            result['offers']) == (False, False, True, offers)
    assert not run(VGPU_TYPE, vgpu_args(root, device, 'nvidia-1'))[
        'offered']


def test_the_free_vfs_take_the_type_while_the_card_has_room(
        run, root, monkeypatch):
    """The card holds two H100-20C: once a second VF has it, the free
    ones list nothing, and are left free."""
    write = VGPU_TYPE.Tree.write

    def kernel(tree, file_name, text):
        write(tree, file_name, text)
        if current_types(root).count('1062') == 2:
            for vf in H100_VF_BDFS:
                with open(path(root, vf, 'nvidia/creatable_vgpu_types'),
                          'w') as f:
                    f.write('ID    : vGPU Name\n')
    monkeypatch.setattr(VGPU_TYPE.Tree, 'write', kernel)

    result = run(VGPU_TYPE, vgpu_args(root, state='present'))

    assert (result['changed'], result['changed_vfs']) == (
        True, ['0000:4e:00.4'])
    assert current_types(root) == ['1062', '1062', '0']


def test_absent_takes_back_only_the_type(run, root):
    other = path(root, '0000:4e:00.6', 'nvidia/current_vgpu_type')
    with open(other, 'w') as f:
        f.write('1061\n')

    result = run(VGPU_TYPE, vgpu_args(root, state='absent'))

    assert result['changed_vfs'] == ['0000:4e:00.5']
    assert current_types(root) == ['0', '0', '1061']
    assert run(VGPU_TYPE, vgpu_args(root, state='absent'))[
        'changed'] is False


def test_a_vgpu_type_in_check_mode_writes_nothing(run, root):
    result = run(VGPU_TYPE, vgpu_args(root, state='present'),
                 check_mode=True)

    assert result['changed_vfs'] == ['0000:4e:00.4', '0000:4e:00.6']
    assert current_types(root) == ['0', '1062', '0']


@pytest.mark.parametrize('mdev_type, match', [
    ('../nvidia-1062', 'is not an mdev type name'),
    ('nvidia-1062/..', 'is not an mdev type name'),
    ('i915-GVTg_V5_4', 'is not an NVIDIA vGPU type'),
])
def test_a_type_that_cannot_be_written_is_refused(run, root, mdev_type,
                                                  match):
    result = run(VGPU_TYPE, vgpu_args(root, mdev_type=mdev_type,
                                      state='present'))

    assert result['failed'] is True
    assert match in result['msg']
    assert current_types(root) == ['0', '1062', '0']


def test_a_vf_link_out_of_the_tree_is_not_followed(run, root, tmp_path):
    outside = tmp_path / 'outside' / '0000:4e:00.4'
    (outside / 'nvidia').mkdir(parents=True)
    (outside / 'nvidia' / 'current_vgpu_type').write_text('0\n')
    (outside / 'nvidia' / 'creatable_vgpu_types').write_text('1062 : x\n')
    link = os.path.join(os.path.realpath(path(root, H100)), 'virtfn0')
    os.unlink(link)
    os.symlink(outside, link)

    result = run(VGPU_TYPE, vgpu_args(root, state='present'))

    assert result['failed'] is True
    assert 'outside' in result['msg']
    assert read(outside / 'nvidia' / 'current_vgpu_type') == '0\n'
