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
}
GOOD = {'pci_address': '0000:18:00.0', 'num_vfs': 8, 'profile': '1g.10gb',
        'mode': 'enabled', 'persistent': False}


def test_every_shipped_pair_is_complete_and_declares_well():
    pairs = [name for name in sorted(os.listdir(playbook.SHIPPED))
             if name != 'library']
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
])
def test_the_agent_gives_a_shipped_pair_what_it_declares(kind, settings):
    """Settings that pass their kind's check reach the daemon as variables
    the pair declares, each of its type."""
    pair, variables = device_config.PAIRS[kind]('0000:18:00.0',
                                                kinds.check(kind, settings))
    declaration = declared.load(os.path.join(playbook.SHIPPED, pair,
                                             'variables.yml'))
    assert declared.check_values(declaration, variables) == variables
