"""MIG GPU-instance profiles and placements, and a fitter of layouts.

A GPU instance occupies a run of memory slices starting at one of its
profile's allowed start slots, and as many compute slices from the same
start (NVIDIA's placements give the memory start; the compute slices of
an instance lie within its memory slices). A layout, ``{profile name:
count}`` as ``mig-parted`` writes it, fits a card when every instance can
be placed so that no two overlap in memory or compute slices, no profile
has more instances than the card allows, and at most one instance uses
the card's single media-engine set.

The table is that of the H100 80GB (``nvidia-smi mig -lgip`` of a real
card, with NVIDIA's published placements; the test data holds both).
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str  # '1g.10gb'
    gi_profile_id: int  # NVML's GPU-instance profile id
    max_instances: int
    memory_slices: int
    compute_slices: int
    starts: tuple[int, ...]  # allowed start slots, in memory slices
    media_engine: bool = False  # uses the single OFA/JPEG set


@dataclasses.dataclass(frozen=True)
class Card:
    name: str
    memory_slices: int
    compute_slices: int
    profiles: tuple[Profile, ...]

    def profile(self, name):
        for profile in self.profiles:
            if profile.name == name:
                return profile
        return None


H100_80GB = Card('NVIDIA H100 80GB', memory_slices=8, compute_slices=7,
                 profiles=(
                     Profile('1g.10gb', 19, 7, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
                     Profile('1g.10gb+me', 20, 1, 1, 1,
                             (0, 1, 2, 3, 4, 5, 6), media_engine=True),
                     Profile('1g.20gb', 15, 4, 2, 1, (0, 2, 4, 6)),
                     Profile('2g.20gb', 14, 3, 2, 2, (0, 2, 4)),
                     Profile('3g.40gb', 9, 2, 4, 3, (0, 4)),
                     Profile('4g.40gb', 5, 1, 4, 4, (0,)),
                     Profile('7g.80gb', 0, 1, 8, 7, (0,),
                             media_engine=True),
                 ))

# (PCI vendor id, product id) -> the card's table: the H100 80GB in its
# SXM5 (2330) and PCIe (2331) forms.
CARDS = {
    ('10de', '2330'): H100_80GB,
    ('10de', '2331'): H100_80GB,
}


def card_of(vendor_id, product_id):
    """The MIG table of the card with these PCI ids, or None."""
    return CARDS.get(((vendor_id or '').lower(), (product_id or '').lower()))


class Unfit(ValueError):
    """A layout that cannot be placed on a card; its text says why."""


def place(card, layout, occupied=()):
    """Placements ``[(profile name, start), ...]`` for the instances of
    ``layout`` on ``card``, next to the instances ``occupied`` already
    holds (``[(profile name, start), ...]``); raises ``Unfit`` with a
    sentence when there are none."""
    taken_memory, taken_compute, media = set(), set(), 0
    for name, start in occupied:
        profile = _known(card, name)
        memory, compute = _slices(profile, start)
        taken_memory |= memory
        taken_compute |= compute
        media += profile.media_engine
    wanted = []
    for name, count in layout.items():
        profile = _known(card, name)
        if count > profile.max_instances:
            raise Unfit('%s offers at most %d instance(s) of %s, not %d.'
                        % (card.name, profile.max_instances, name, count))
        wanted.extend([profile] * count)
    if media + sum(p.media_engine for p in wanted) > 1:
        raise Unfit('%s has one media-engine set: at most one instance of '
                    '%s.' % (card.name, ' or '.join(
                        p.name for p in card.profiles if p.media_engine)))
    # Largest first: they have the fewest starts, so dead ends show early.
    wanted.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    found = _search(wanted, 0, taken_memory, taken_compute, [])
    if found is None:
        raise Unfit('%s cannot place %s: no start slots leave their memory '
                    'and compute slices apart%s.' % (
                        card.name, _described(layout),
                        ' next to the instances it holds' if occupied
                        else ''))
    return found


def fits(card, layout, occupied=()):
    try:
        place(card, layout, occupied)
    except Unfit:
        return False
    return True


def _known(card, name):
    profile = card.profile(name)
    if profile is None:
        raise Unfit('%s has no MIG profile %s; it offers %s.' % (
            card.name, name, ', '.join(p.name for p in card.profiles)))
    return profile


def _slices(profile, start):
    return (set(range(start, start + profile.memory_slices)),
            set(range(start, start + profile.compute_slices)))


def _search(wanted, index, memory, compute, placed):
    if index == len(wanted):
        return list(placed)
    profile = wanted[index]
    # Instances of one profile are interchangeable: place them in
    # increasing start order, so that no order is tried twice.
    earliest = 0
    if index and wanted[index - 1] is profile:
        earliest = placed[-1][1] + 1
    for start in profile.starts:
        if start < earliest:
            continue
        mem, comp = _slices(profile, start)
        if memory & mem or compute & comp:
            continue
        placed.append((profile.name, start))
        found = _search(wanted, index + 1, memory | mem, compute | comp,
                        placed)
        if found is not None:
            return found
        placed.pop()
    return None


def _described(layout):
    return ' + '.join('%d x %s' % (count, name)
                      for name, count in layout.items() if count)
