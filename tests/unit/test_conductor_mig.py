"""The conductor's reading of MIG device profile groups and agents'
answers (``cyborg.conductor.mig``)."""

import pytest

from cyborg.conductor import mig
from cyborg.device_config import mig as device_mig


@pytest.mark.parametrize('trait, profile', [
    ('CUSTOM_MIG_PROFILE_3G_40GB', '3g.40gb'),
    ('CUSTOM_MIG_PROFILE_1G_10GB_ME', '1g.10gb+me'),
    ('CUSTOM_MIG_PROFILE_7G_80GB', '7g.80gb'),
])
def test_a_group_asks_for_the_profile_its_trait_names(trait, profile):
    group = {'resources:CUSTOM_MIG_COMPUTE_SLICE': '3',
             'trait:' + trait: 'required', 'trait:CUSTOM_X': 'required'}
    assert mig.profile_asked(group) == profile
    # And back: the trait the driver gives a GPU that can create it.
    assert mig.profile_trait(profile) == trait


@pytest.mark.parametrize('group, match', [
    ({'resources:CUSTOM_MIG_COMPUTE_SLICE': '3'}, 'requires none'),
    ({'trait:CUSTOM_MIG_PROFILE_3G_40GB': 'forbidden'}, 'requires none'),
    ({'trait:CUSTOM_MIG_PROFILE_3G_40GB': 'required',
      'trait:CUSTOM_MIG_PROFILE_1G_10GB': 'required'},
     'requires 3g.40gb, 1g.10gb'),
    ({'trait:CUSTOM_MIG_PROFILE_BIG': 'required'}, 'names no MIG profile'),
])
def test_a_group_that_names_no_single_profile_is_refused(group, match):
    with pytest.raises(mig.NotAMIGRequest, match=match):
        mig.profile_asked(group)


def test_an_answer_is_kept_as_strings_and_must_be_whole():
    answer = {'mig_profile': '3g.40gb', 'start': 4, 'gi_id': 2, 'ci_id': 0,
              'mig_uuid': 'MIG-1', 'creatable': ['1g.10gb']}
    assert mig.kept_details(answer) == {
        'mig_profile': '3g.40gb', 'start': '4', 'gi_id': '2', 'ci_id': '0',
        'mig_uuid': 'MIG-1'}
    with pytest.raises(ValueError, match='lacks mig_uuid'):
        mig.kept_details(dict(answer, mig_uuid=None))
    with pytest.raises(ValueError, match='did not say'):
        mig.kept_details(None)


def test_the_profile_traits_are_replaced_the_others_kept():
    traits = ['CUSTOM_GPU_NVIDIA', 'CUSTOM_MIG_PROFILE_4G_40GB',
              'CUSTOM_MIG_PROFILE_1G_10GB']
    assert mig.traits_with(traits, ['3g.40gb', '1g.10gb']) == [
        'CUSTOM_GPU_NVIDIA', 'CUSTOM_MIG_PROFILE_1G_10GB',
        'CUSTOM_MIG_PROFILE_3G_40GB']


def test_the_slices_of_one_instance_make_one_accelerator_request():
    from cyborg.objects import inventory
    assert inventory.accelerators_asked({
        'resources:CUSTOM_MIG_COMPUTE_SLICE': '3',
        'resources:CUSTOM_MIG_MEMORY_SLICE': '4',
        'trait:CUSTOM_MIG_PROFILE_3G_40GB': 'required'}) == 1
    assert inventory.accelerators_asked({
        'resources:CUSTOM_MIG_COMPUTE_SLICE': '7',
        'resources:CUSTOM_MIG_MEMORY_SLICE': '8',
        'resources:CUSTOM_MIG_MEDIA_ENGINE': '1'}) == 1
    # Other resources still count one per unit.
    assert inventory.accelerators_asked({'resources:VGPU': '2',
                                         'resources:FPGA': '1'}) == 3
    assert inventory.accelerators_asked({'trait:CUSTOM_X': 'required'}) == 0


@pytest.mark.parametrize('resources, profile', [
    ({'CUSTOM_MIG_COMPUTE_SLICE': 1, 'CUSTOM_MIG_MEMORY_SLICE': 1},
     '1g.10gb'),
    ({'CUSTOM_MIG_COMPUTE_SLICE': 1, 'CUSTOM_MIG_MEMORY_SLICE': 1,
      'CUSTOM_MIG_MEDIA_ENGINE': 1}, '1g.10gb+me'),
    ({'CUSTOM_MIG_COMPUTE_SLICE': 1, 'CUSTOM_MIG_MEMORY_SLICE': 2},
     '1g.20gb'),
    ({'CUSTOM_MIG_COMPUTE_SLICE': 3, 'CUSTOM_MIG_MEMORY_SLICE': 4},
     '3g.40gb'),
    ({'CUSTOM_MIG_COMPUTE_SLICE': 7, 'CUSTOM_MIG_MEMORY_SLICE': 8,
      'CUSTOM_MIG_MEDIA_ENGINE': 1}, '7g.80gb'),
    # Two instances' slices in one allocation name no profile.
    ({'CUSTOM_MIG_COMPUTE_SLICE': 2, 'CUSTOM_MIG_MEMORY_SLICE': 5}, None),
    ({'CUSTOM_MIG_COMPUTE_SLICE': 7, 'CUSTOM_MIG_MEMORY_SLICE': 8}, None),
    ({}, None),
])
def test_the_profile_an_allocation_of_slices_holds(resources, profile):
    assert mig.profile_of_slices(device_mig.H100_80GB, resources) == profile


@pytest.mark.parametrize('stranded, held', [
    ([1, 0], {'CUSTOM_MIG_COMPUTE_SLICE': 1, 'CUSTOM_MIG_MEMORY_SLICE': 0}),
    ((0, 1), {'CUSTOM_MIG_COMPUTE_SLICE': 0, 'CUSTOM_MIG_MEMORY_SLICE': 1}),
    # An agent of 1.0 says nothing; anything else is not trusted.
    (None, None), ([1], None), ([1, -1], None), (['1', 0], None),
    ([True, 0], None), ({'compute': 1}, None),
])
def test_what_placement_holds_back_for_an_agents_stranded_slices(
        stranded, held):
    assert mig.held_back(stranded) == held
