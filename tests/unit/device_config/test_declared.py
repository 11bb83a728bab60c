"""Playbook pairs' variable declarations, and the values checked against
them before the privileged side runs a playbook."""

import os

import pytest

from cyborg.agent import device_config
from cyborg.device_config import declared
from cyborg.device_config import kinds
from cyborg.privsep import playbook

DECLARED = {
    'pci_address': {'type': 'pci_address'},
    'num_vfs': {'type': 'integer', 'min': 0, 'max': 8},
    'profile': {'type': 'string', 'pattern': r'[1-9]g\.[0-9]+gb',
                'max_length': 16},
    'mode': {'type': 'choice', 'values': ['enabled', 'disabled']},
    'persistent': {'type': 'boolean'},
    'layout': {'type': 'counts', 'pattern': r'[1-9]g\.[0-9]+gb', 'max': 7},
}
GOOD = {'pci_address': '0000:18:00.0', 'num_vfs': 8, 'profile': '1g.10gb',
        'mode': 'enabled', 'persistent': False,
        'layout': {'1g.10gb': 7, '3g.40gb': 0}}


def test_every_shipped_pair_is_complete_and_declares_well():
    pairs = [name for name in sorted(os.listdir(playbook.SHIPPED))
             if name not in playbook.NOT_PAIRS]
    assert pairs
    for name in pairs:
        directory = os.path.join(playbook.SHIPPED, name)
        assert declared.PAIR_NAME.fullmatch(name)
        assert sorted(os.listdir(directory)) == sorted(declared.PAIR_FILES)
        assert declared.load(os.path.join(directory, 'variables.yml'))


def test_good_values_pass():
    assert declared.check_values(declared.check_declaration(
        DECLARED, 'test'), GOOD) == GOOD


@pytest.mark.parametrize('change, match', [
    ({'num_vfs': 9}, 'num_vfs must be a whole number from 0 to 8, not 9'),
    ({'num_vfs': -1}, 'from 0 to 8'),
    ({'num_vfs': 2.0}, 'from 0 to 8'),
    ({'persistent': 'yes'}, 'persistent must be true or false'),
    ({'pci_address': '0000:18:00.0\n'}, 'must be a PCI address'),
    ({'pci_address': '0000:18:00.0/..'}, 'must be a PCI address'),
    ({'profile': '1g.10gb;x'}, r'profile must match'),
    ({'profile': '1g.100000000000000gb'}, 'at most 16 characters'),
    ({'mode': 'on'}, 'mode must be one of enabled, disabled'),
    ({'extra': 1}, 'declare no variable extra'),
    ({'layout': {'1g.10gb': 8}}, 'The count of 1g.10gb in layout must be a '
     'whole number from 0 to 7, not 8'),
    ({'layout': {'1g.10gb': True}}, 'from 0 to 7'),
    ({'layout': {'big': 1}}, r'The names in layout must match'),
    ({'layout': {'{{ x }}': 1}}, 'no template delimiters'),
    ({'layout': ['1g.10gb']}, 'layout must map at most 32 names'),
])
def test_a_bad_value_is_refused_with_a_sentence(change, match):
    values = dict(GOOD, **change)
    with pytest.raises(declared.Invalid, match=match):
        declared.check_values(DECLARED, values)


def test_a_missing_value_is_refused():
    values = dict(GOOD)
    del values['mode']
    with pytest.raises(declared.Invalid, match='need the variable mode'):
        declared.check_values(DECLARED, values)


def test_template_delimiters_never_pass_whatever_the_pattern():
    loose = {'note': {'type': 'string', 'pattern': '.*'}}
    for value in ('{{ lookup("pipe", "id") }}', '{% raw %}', '{# x #}'):
        with pytest.raises(declared.Invalid, match='no template'):
            declared.check_values(loose, {'note': value})
    assert declared.check_values(loose, {'note': 'plain words'})


@pytest.mark.parametrize('declaration, match', [
    ([], 'must map variable names'),
    ({'Bad-Name': {'type': 'integer'}}, 'is not a variable name'),
    ({'sysfs_root': {'type': 'string', 'pattern': '.*'}},
     'set by the host'),
    ({'x': {'type': 'float'}}, 'needs a type'),
    ({'x': {'type': 'string'}}, 'needs a pattern'),
    ({'x': {'type': 'string', 'pattern': '('}}, 'not a regular expression'),
    ({'x': {'type': 'integer', 'min': '0'}}, 'min must be a whole number'),
    ({'x': {'type': 'integer', 'pattern': '.*'}}, 'has no pattern'),
    ({'x': {'type': 'choice', 'values': ['{{ x }}']}},
     'a list of plain strings'),
    ({'x': {'type': 'counts', 'max': 7}}, 'counts needs a pattern its names'),
    ({'x': {'type': 'counts', 'pattern': '.*'}}, 'counts need a max'),
    ({'x': {'type': 'counts', 'pattern': '.*', 'max': 1, 'max_length': 3}},
     'a counts has no max_length'),
])
def test_a_bad_declaration_is_refused(declaration, match):
    with pytest.raises(declared.Invalid, match=match):
        declared.check_declaration(declaration, 'variables.yml')


def test_a_declaration_that_is_not_yaml_is_refused(tmp_path):
    path = tmp_path / 'variables.yml'
    path.write_text('x: [unclosed\n')
    with pytest.raises(declared.Invalid, match='cannot be read'):
        declared.load(str(path))


@pytest.mark.parametrize('kind, settings', [
    ('sriov_vfs', {'num_vfs': 8}),
    ('driver_binding', {'driver': 'vfio-pci'}),
    ('driver_binding', {'driver': 'own'}),
    ('vgpu_type', {'mdev_type': 'nvidia-1062'}),
    ('vgpu_type', {'mdev_type': 'i915-GVTg_V5_4'}),
    ('mig_layout', {'mig_enabled': True, 'mig_devices': {'1g.10gb': 7}}),
    ('mig_layout', {'mig_enabled': False}),
])
def test_the_agent_gives_a_shipped_pair_what_it_declares(kind, settings):
    """Settings that pass their kind's check reach the daemon as variables
    the pair declares, each of its type."""
    pair, variables = device_config.PAIRS[kind]('0000:18:00.0',
                                                kinds.check(kind, settings))
    declaration = declared.load(os.path.join(playbook.SHIPPED, pair,
                                             'variables.yml'))
    assert declared.check_values(declaration, variables) == variables


@pytest.mark.parametrize('kernel_driver, pair, vf_driver', [
    ('c6xx', 'qat_vfs', 'c6xxvf'),
    ('qat_c62x', 'qat_vfs', 'c6xxvf'),
    ('dh895xcc', 'qat_vfs', 'dh895xccvf'),
    ('c3xxx', 'qat_vfs', 'c3xxxvf'),
    ('4xxx', 'qat_vfs', 'none'),
    ('qat_420xx', 'qat_vfs', 'none'),
    ('i40e', 'sriov_vfs', None),
    (None, 'sriov_vfs', None),
])
def test_a_vf_count_takes_the_pair_of_the_pf_driver(kernel_driver, pair,
                                                     vf_driver):
    """A QAT PF's VFs come from the QAT pair, told their driver; every
    other PF's from the generic one. The declaration takes each."""
    runs = device_config.runs(kinds.SRIOV_VFS, '0000:3d:00.0',
                              {'num_vfs': 4}, {'num_vfs': 8},
                              kernel_driver=kernel_driver)

    assert [(p, action) for p, action, _ in runs] == [
        (pair, 'teardown'), (pair, 'setup')]
    declaration = declared.load(os.path.join(playbook.SHIPPED, pair,
                                             'variables.yml'))
    for _, _, variables in runs:
        assert declared.check_values(declaration, variables) == variables
        assert variables.get('vf_driver') == vf_driver
    assert runs[1][2]['num_vfs'] == 8


def test_only_a_vf_count_depends_on_the_driver():
    assert device_config.pair_for(kinds.DRIVER_BINDING, 'c6xx') is \
        device_config.PAIRS[kinds.DRIVER_BINDING]


@pytest.mark.parametrize('kind, applied', [
    (kinds.SRIOV_VFS, {'num_vfs': 8}),
    (kinds.DRIVER_BINDING, {'driver': 'vfio-pci'}),
    (kinds.MIG_LAYOUT, {'mig_enabled': True, 'mig_devices': {'1g.10gb': 7}}),
])
def test_putting_a_device_back_as_discovered_runs_the_teardown_alone(
        kind, applied):
    runs = device_config.runs(kind, '0000:3d:00.0', applied, None)

    [(pair, action, variables)] = runs
    assert action == 'teardown'
    declaration = declared.load(os.path.join(playbook.SHIPPED, pair,
                                             'variables.yml'))
    assert declared.check_values(declaration, variables) == variables


def test_an_fpga_base_image_has_nothing_to_undo():
    def nothing_may_run(*args):
        raise AssertionError('ran %s' % (args,))

    result = device_config.apply(
        kinds.FPGA_BASE_IMAGE, '0000:3d:00.0', {'bitstream_uuid': 'x'},
        None, nothing_may_run, load_bitstream=nothing_may_run)

    assert (result['state'], result['changed']) == ('applied', [])
    assert result['message'] == 'An FPGA base image has nothing to undo.'
