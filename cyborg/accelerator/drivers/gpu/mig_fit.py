"""Where on a MIG card to create the next GPU instance.

Placement sees a card as counters (compute slices, memory slices, the
media engine) and one trait per profile that can still be created; the
card itself decides the start slot. Counters can fit while no start slot
does (1g.10gb instances at 0, 1 and 5 leave room for neither a 3g.40gb
nor a 4g.40gb), so the start chosen now decides how often a bind that
Placement accepted is refused later. ``choose_start`` offers NVML's
implicit choice (the lowest free start) and a best fit that keeps the
largest instances creatable.

Boots served from one snapshot of the traits reach a card together,
and its instances are made one at a time: best fit weighs the profiles
still waiting for the card (Placement gave them to it, nothing is made
yet), so that the first made leaves a start for the others where one
exists (in tools/bench/mig_churn.py, 16 boots at a time at 90 % load of
the uniform mix, it halved the binds the card refused: 3.2 to 1.5 %).

``occupied`` is always a collection of ``(profile name, start)``, the
instances the card holds. All functions are pure; their answers are
memoised per card and set of instances (the H100 has 2319 reachable
sets), except a choice that weighs waiting profiles.
"""

from cyborg.device_config import mig

RULES = ('best-fit', 'lowest-slot')


def creatable(card, occupied):
    """{profile name: how many more instances could be created now}.

    The most instances of that profile alone that fit next to
    ``occupied``, within the profile's maximum and the single media
    engine: what NVML's remaining capacity answers on a real card.
    """
    return dict(_state(card, occupied).creatable)


def free_starts(card, occupied, profile_name):
    """The allowed starts where ``profile_name`` could be created now."""
    return list(_state(card, occupied).free[_known(card, profile_name)])


def choose_start(card, occupied, profile_name, rule='best-fit',
                 waiting=()):
    """The start to create ``profile_name`` at, or None when none is free.

    ``'lowest-slot'``: the lowest free start, what NVML does when it is
    not given a placement. ``'best-fit'``: the start after which the
    most of the ``waiting`` profiles (other binds Placement already gave
    this card, not made yet) still fit, then the largest profile still
    creatable is largest in memory slices, then the card can still grow
    into the most layouts (sets of further instances), then the lowest.
    """
    if rule not in RULES:
        raise ValueError('unknown rule %r; rules: %s'
                         % (rule, ', '.join(RULES)))
    state = _state(card, occupied)
    index = _known(card, profile_name)
    waiting = () if rule == 'lowest-slot' else _largest_first(card, waiting)
    if waiting:
        # Not memoised: the waiting lists are too many to keep.
        return _choose(card, state, index, rule, waiting)
    key = (index, rule)
    if key not in state.chosen:
        state.chosen[key] = _choose(card, state, index, rule, ())
    return state.chosen[key]


def still_fit(card, occupied, waiting):
    """How many of the ``waiting`` profiles best fit places next to
    ``occupied``, largest first (as first-fit decreasing packs bins)."""
    placed = 0
    instances = frozenset(occupied)
    for name in _largest_first(card, waiting):
        start = choose_start(card, instances, name)
        if start is not None:
            instances = instances | {(name, start)}
            placed += 1
    return placed


def traits(card, occupied):
    """Names of the profiles with at least one creatable instance, in the
    card's order: one trait each for Placement."""
    return list(_state(card, occupied).traits)


def counters(card, occupied):
    """(free compute slices, free memory slices, free media engine 0/1)."""
    return _state(card, occupied).counters


def stranded(card, occupied):
    """(compute slices, memory slices) free but in no placement that can
    be created now: a 3g.40gb at 0 leaves compute slice 3 to no one.
    Placement counts them free unless they are reserved."""
    return _state(card, occupied).stranded


class _State:
    """What follows from one set of instances on one card."""

    __slots__ = ('instances', 'free', 'creatable', 'traits', 'counters',
                 'stranded', 'largest', 'layouts', 'chosen')


class _Table:
    """The memo of one card: its states, and its layout counts keyed by
    what they depend on."""

    def __init__(self, card):
        self.card = card
        self.states = {}  # frozenset of instances -> _State
        self.layouts = {}  # (memory, compute, media, held, first) -> int
        self.placements = [
            (index, _masks(profile, start))
            for index, profile in enumerate(card.profiles)
            for start in profile.starts]


_tables = {}  # card (frozen, hashable) -> _Table


def _state(card, occupied):
    table = _tables.get(card)
    if table is None:
        table = _tables[card] = _Table(card)
    instances = frozenset(occupied)
    state = table.states.get(instances)
    if state is None:
        if len(instances) != len(occupied):
            raise ValueError('instances listed twice: %s' % (occupied,))
        state = table.states[instances] = _analyse(table, instances)
    return state


def _analyse(table, instances):
    card = table.card
    memory = compute = media = 0
    held = [0] * len(card.profiles)
    for name, start in instances:
        index = _known(card, name)
        profile = card.profiles[index]
        if start not in profile.starts:
            raise ValueError('%s cannot start at slot %d' % (name, start))
        mem, comp = _masks(profile, start)
        if memory & mem or compute & comp:
            raise ValueError('%s at slot %d overlaps another instance'
                             % (name, start))
        memory |= mem
        compute |= comp
        media += profile.media_engine
        held[index] += 1
    state = _State()
    state.instances = instances
    state.free, state.creatable = [], {}
    for index, profile in enumerate(card.profiles):
        room = profile.max_instances - held[index]
        if profile.media_engine and media:
            room = 0
        starts = ()
        if room > 0:
            starts = tuple(s for s in profile.starts
                           if _fits(memory, compute, _masks(profile, s)))
        state.free.append(starts)
        # Instances of one profile all have the same length, so taking
        # free starts lowest first packs the most of them.
        count, end = 0, 0
        for start in starts:
            if start >= end and count < room:
                count, end = count + 1, start + profile.memory_slices
        state.creatable[profile.name] = count
    state.traits = tuple(p.name for p in card.profiles
                         if state.creatable[p.name])
    state.counters = (card.compute_slices - bin(compute).count('1'),
                      card.memory_slices - bin(memory).count('1'),
                      1 - min(media, 1))
    usable = [0, 0]
    for index, starts in enumerate(state.free):
        for start in starts:
            masks = _masks(card.profiles[index], start)
            usable = [usable[0] | masks[1], usable[1] | masks[0]]
    state.stranded = (state.counters[0] - bin(usable[0]).count('1'),
                      state.counters[1] - bin(usable[1]).count('1'))
    # Memory slices only: the 4g.40gb (start 0) and the 3g.40gb (0 or 4)
    # take the same half of the card. Ranking the 4g.40gb above would
    # send small instances to slots 4-6, where slot 7 serves nothing
    # smaller than a 1g.20gb at 6: four 1g.10gb would then leave no room
    # for a 3g.40gb, which they do at 0-3.
    state.largest = max((p.memory_slices for p in card.profiles
                         if state.creatable[p.name]), default=0)
    state.layouts = _layouts(table, memory, compute, media, tuple(held), 0)
    state.chosen = {}
    return state


def _layouts(table, memory, compute, media, held, first):
    """How many sets of further instances, the empty one included, fit
    next to those that leave ``memory``, ``compute``, ``media`` and
    ``held`` taken, using the card's placements from ``first`` on (each
    set is counted once: by its placements in their order).

    Best fit breaks ties of size with this count. The sums over the
    profiles of the free starts, or of the creatable instances (layouts
    one instance, or one profile, further), choose the same start as
    each other in every reachable state of the H100, and both send a
    first 1g.10gb to slot 6, which keeps the 4g.40gb's start and strands
    slot 7; this count sends it to 0. Over tools/bench/mig_churn_sim.py
    (50,000 requests a row, seeds 1 and 2) it left 0.5 and 0.9 % fewer
    requests refused than the free starts.
    """
    key = (memory, compute, media, held, first)
    count = table.layouts.get(key)
    if count is None:
        count = 1
        profiles = table.card.profiles
        for at in range(first, len(table.placements)):
            index, masks = table.placements[at]
            profile = profiles[index]
            if (not _fits(memory, compute, masks)
                    or held[index] >= profile.max_instances
                    or (profile.media_engine and media)):
                continue
            count += _layouts(
                table, memory | masks[0], compute | masks[1],
                media + profile.media_engine,
                held[:index] + (held[index] + 1,) + held[index + 1:],
                at + 1)
        table.layouts[key] = count
    return count


def _choose(card, state, index, rule, waiting):
    starts = state.free[index]
    if not starts:
        return None
    if rule == 'lowest-slot':
        return starts[0]
    name = card.profiles[index].name
    best, best_key = None, None
    for start in starts:
        after = _state(card, state.instances | {(name, start)})
        fit = still_fit(card, after.instances, waiting) if waiting else 0
        key = (fit, after.largest, after.layouts)
        # Strictly better only: the lowest start wins a tie.
        if best_key is None or key > best_key:
            best, best_key = start, key
    return best


def _largest_first(card, names):
    """``names`` as a tuple, largest profile (memory, then compute slices)
    first: one order, so one memo entry, per multiset."""
    def size(name):
        profile = card.profiles[_known(card, name)]
        return (-profile.memory_slices, -profile.compute_slices, name)
    return tuple(sorted(names, key=size))


def _fits(memory, compute, masks):
    return not (memory & masks[0] or compute & masks[1])


def _masks(profile, start):
    return (((1 << profile.memory_slices) - 1) << start,
            ((1 << profile.compute_slices) - 1) << start)


def _known(card, name):
    for index, profile in enumerate(card.profiles):
        if profile.name == name:
            return index
    raise mig.Unfit('%s has no MIG profile %s; it offers %s.' % (
        card.name, name, ', '.join(p.name for p in card.profiles)))
