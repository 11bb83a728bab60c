"""The conductor's part of MIG instances made on demand: which profile
an ARQ asks for, and the traits that say what its GPU can still create.

A device profile group asks for a MIG profile by its slices (resources)
and by requiring the profile's trait, ``CUSTOM_MIG_PROFILE_<PROFILE>``
(``CUSTOM_MIG_PROFILE_3G_40GB``, ``CUSTOM_MIG_PROFILE_1G_10GB_ME`` for
1g.10gb+me), which a GPU's provider carries while the profile can still
be created there.
"""

import re

from cyborg.accelerator.drivers import traits as driver_traits
from cyborg.objects import inventory

TRAIT_PREFIX = 'CUSTOM_MIG_PROFILE_'
_TRAIT = re.compile(r'([1-9][0-9]*)G_([1-9][0-9]*)GB(_ME)?')
# The resource classes of a GPU on demand, in the order a profile counts
# them.
_SLICES = (inventory.MIG_COMPUTE_SLICE, inventory.MIG_MEMORY_SLICE,
           inventory.MIG_MEDIA_ENGINE)
# What a bind keeps of the instance its host made: the fields the
# agent's answer must hold, as strings, as attach handle info is.
DETAILS = ('mig_profile', 'start', 'gi_id', 'ci_id', 'mig_uuid')


class NotAMIGRequest(ValueError):
    """A group that names no MIG profile, or several."""


def profile_trait(profile):
    """``CUSTOM_MIG_PROFILE_3G_40GB`` for ``3g.40gb``, as the driver
    names it."""
    return driver_traits.custom('MIG_PROFILE', profile)


def profile_asked(group):
    """The MIG profile a device profile group requires, by its trait."""
    names = []
    for key, value in group.items():
        if not key.startswith('trait:' + TRAIT_PREFIX):
            continue
        if str(value).strip().lower() != 'required':
            continue
        found = _TRAIT.fullmatch(key[len('trait:' + TRAIT_PREFIX):])
        if found is None:
            raise NotAMIGRequest('%s names no MIG profile.' % key[6:])
        names.append('%sg.%sgb%s' % (found.group(1), found.group(2),
                                      '+me' if found.group(3) else ''))
    if len(names) != 1:
        raise NotAMIGRequest(
            'A device profile group for a MIG instance made on demand must '
            'require exactly one %s<PROFILE> trait; this one requires %s.'
            % (TRAIT_PREFIX, ', '.join(names) or 'none'))
    return names[0]


def profile_of_slices(card, resources):
    """The profile of ``card`` (a ``device_config.mig`` table) whose slices
    one allocation holds (``{resource class: amount}``), or None."""
    held = tuple(int(resources.get(name, 0)) for name in _SLICES)
    for profile in card.profiles:
        if held == (profile.compute_slices, profile.memory_slices,
                    int(profile.media_engine)):
            return profile.name
    return None


def held_back(stranded):
    """{resource class: units} Placement must hold back for the slices an
    agent says no placement can use (``[compute, memory]``), or None when
    it did not say (an older agent) or said something else."""
    if (not isinstance(stranded, (list, tuple)) or len(stranded) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool)
                       and n >= 0 for n in stranded)):
        return None
    return {inventory.MIG_COMPUTE_SLICE: stranded[0],
            inventory.MIG_MEMORY_SLICE: stranded[1]}


def kept_details(answer):
    """The instance an agent made, as the ARQ keeps it; ValueError if the
    answer lacks a field."""
    if not isinstance(answer, dict):
        raise ValueError('The agent did not say which MIG instance it made.')
    missing = [name for name in DETAILS if answer.get(name) is None]
    if missing:
        raise ValueError('The agent\'s answer lacks %s.' % ', '.join(missing))
    return {name: str(answer[name]) for name in DETAILS}


def traits_with(traits, creatable):
    """``traits`` with the profile traits replaced by those of the
    profiles in ``creatable``."""
    kept = [t for t in traits or () if not t.startswith(TRAIT_PREFIX)]
    return kept + sorted(profile_trait(p) for p in creatable)
