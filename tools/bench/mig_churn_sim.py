"""Simulate MIG instances coming and going on a host of H100 cards.

    python tools/bench/mig_churn_sim.py [--requests 50000] [--seed 1]
        [--cards 8] [--boots 1,16] [--mixes uniform,small-heavy]
        [--loads 0.7,0.9] [--views counters,traits] [--pick random|pack]

Requests for one MIG profile each arrive as a Poisson process and hold
their instance for an exponential lifetime (mean 1). The arrival rate
makes the offered load, in compute slices (mean slices asked x rate x
mean lifetime / (cards x 7)), the one asked. The mixes:

- ``uniform``: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb
  equally likely;
- ``small-heavy``: 40, 20, 20, 10, 5 and 5 % of the same.

Placement, the scheduler, sees a card only as counters (free compute
slices, memory slices, media engine) and, in the ``traits`` view, one
trait per profile the card can still create (``counters`` view: none).
Of the cards that pass, it takes a random one (``--pick random``, what
Placement's candidates give a scheduler that weighs nothing) or the most
used (``pack``: most compute slices in use, then the first). The card
then picks a start slot by its rule (``lowest-slot``, NVML's implicit
choice, or ``best-fit``; ``cyborg.accelerator.drivers.gpu.mig_fit``).
A request ends one of three ways: placed; refused by Placement (no card
passes); or accepted by Placement and refused by the card (no free start
slot: fragmentation), its allocation then given back.

Concurrency (``--boots K``): K requests that arrive one after another
are served together, at the arrival time of the last, from one snapshot
of the cards' traits taken before any of them is applied. Placement
serialises allocations with provider generations, so the counters stay
consistent: the requests are applied in order, each filtered by the
counters as the ones before it left them (a claim that no longer fits
moves on to the next candidate, as the scheduler's alternates do; none
left is a refusal by Placement). Only the traits are stale: the agent
publishes them after its card acted. ``pack`` orders by the snapshot.
With K = 1 and the ``traits`` view, every trait Placement trusts is
true, so the card never refuses; the table shows it.

The host starts empty and every request counts: it fills within a few
mean lifetimes, of the more than 1,500 a row spans at the default 50,000
requests.
Both rules of a row see the same arrivals, profiles and lifetimes (the
random choices among candidates differ once the cards do). Printed per
mix, load, view and boots: requests, placed, refused by Placement (% of
requests), refused by the card (% of those Placement accepted), and on
the best-fit row the ratio of all refusals, best-fit / lowest-slot.
Output depends only on the arguments (``--seed`` included).
"""

import argparse
import heapq
import itertools
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from cyborg.accelerator.drivers.gpu import mig_fit  # noqa: E402
from cyborg.device_config import mig  # noqa: E402

CARD = mig.H100_80GB
MIXES = {
    'uniform': {'1g.10gb': 1, '1g.20gb': 1, '2g.20gb': 1, '3g.40gb': 1,
                '4g.40gb': 1, '7g.80gb': 1},
    'small-heavy': {'1g.10gb': 40, '1g.20gb': 20, '2g.20gb': 20,
                    '3g.40gb': 10, '4g.40gb': 5, '7g.80gb': 5},
}
VIEWS = ('counters', 'traits')
PICKS = ('random', 'pack')


class Card:
    """One card: its instances and what Placement was told of it."""

    __slots__ = ('index', 'occupied', 'counters', 'traits')

    def __init__(self, index):
        self.index = index
        self.occupied = frozenset()
        self.publish()

    def publish(self):
        # The agent's report after every create and destroy.
        self.counters = mig_fit.counters(CARD, self.occupied)
        self.traits = frozenset(mig_fit.traits(CARD, self.occupied))

    def create(self, instance):
        self.occupied = self.occupied | {instance}
        self.publish()

    def destroy(self, instance):
        self.occupied = self.occupied - {instance}
        self.publish()


def arrivals(mix, load, cards, requests, seed):
    """[(time, profile name, lifetime)]: the same for every rule, view
    and boots of a mix and load."""
    rng = random.Random('%s/%s/%s/%s' % (seed, mix, load, cards))
    names = list(MIXES[mix])
    weights = [MIXES[mix][name] for name in names]
    mean_compute = (sum(w * CARD.profile(n).compute_slices
                        for n, w in zip(names, weights, strict=True))
                    / sum(weights))
    rate = load * cards * CARD.compute_slices / mean_compute
    now, out = 0.0, []
    for name in rng.choices(names, weights, k=requests):
        now += rng.expovariate(rate)
        out.append((now, name, rng.expovariate(1.0)))
    return out


def simulate(requests, cards, rule, view, boots, pick, seed):
    """{'placed', 'placement', 'card'}: how the requests ended."""
    rng = random.Random('%s/pick' % seed)
    host = [Card(i) for i in range(cards)]
    profiles = {p.name: (p.compute_slices, p.memory_slices,
                         int(p.media_engine)) for p in CARD.profiles}
    ends = []  # (time, serial, card, instance) of the live instances
    serial = itertools.count()
    outcome = {'placed': 0, 'placement': 0, 'card': 0}
    for first in range(0, len(requests), boots):
        batch = requests[first:first + boots]
        now = batch[-1][0]
        while ends and ends[0][0] <= now:
            _, _, card, instance = heapq.heappop(ends)
            card.destroy(instance)
        seen = [card.traits for card in host]
        if pick == 'pack':
            order = sorted(host, key=lambda c: (c.counters[0], c.index))
        else:
            order = host
        for _, name, lifetime in batch:
            compute, memory, media = profiles[name]
            candidates = [
                card for card in order
                if card.counters[0] >= compute
                and card.counters[1] >= memory
                and card.counters[2] >= media
                and (view == 'counters' or name in seen[card.index])]
            if not candidates:
                outcome['placement'] += 1
                continue
            card = (candidates[0] if pick == 'pack'
                    else rng.choice(candidates))
            start = mig_fit.choose_start(CARD, card.occupied, name, rule)
            if start is None:
                outcome['card'] += 1
                continue
            instance = (name, start)
            card.create(instance)
            heapq.heappush(ends, (now + lifetime, next(serial), card,
                                  instance))
            outcome['placed'] += 1
    return outcome


def percent(part, whole):
    return 100.0 * part / whole if whole else 0.0


def table(args):
    rows = []
    for mix, load, view, boots in itertools.product(
            args.mixes, args.loads, args.views, args.boots):
        requests = arrivals(mix, load, args.cards, args.requests,
                            args.seed)
        refusals = {}
        for rule in ('lowest-slot', 'best-fit'):
            out = simulate(requests, args.cards, rule, view, boots,
                           args.pick, args.seed)
            accepted = out['placed'] + out['card']
            refusals[rule] = out['placement'] + out['card']
            ratio = ''
            if rule == 'best-fit':
                ratio = ('%.2f' % (refusals['best-fit']
                                   / refusals['lowest-slot'])
                         if refusals['lowest-slot'] else '-')
            rows.append((mix, '%d%%' % round(100 * load), view,
                         str(boots), rule, str(len(requests)),
                         str(out['placed']),
                         '%.2f' % percent(out['placement'], len(requests)),
                         '%.2f' % percent(out['card'], accepted), ratio))
    return rows


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--requests', type=int, default=50000,
                        help='requests per row (default 50000)')
    parser.add_argument('--seed', default='1')
    parser.add_argument('--cards', type=int, default=8)
    parser.add_argument('--boots', default='1,16',
                        help='requests served from one snapshot')
    parser.add_argument('--mixes', default=','.join(MIXES))
    parser.add_argument('--loads', default='0.7,0.9',
                        help='offered loads, fractions of compute slices')
    parser.add_argument('--views', default=','.join(VIEWS))
    parser.add_argument('--pick', choices=PICKS, default='random')
    args = parser.parse_args(argv)
    args.boots = [int(b) for b in args.boots.split(',')]
    args.mixes = args.mixes.split(',')
    args.loads = [float(x) for x in args.loads.split(',')]
    args.views = args.views.split(',')
    for mix in args.mixes:
        if mix not in MIXES:
            parser.error('unknown mix %s; mixes: %s' % (mix, ', '.join(
                MIXES)))
    for view in args.views:
        if view not in VIEWS:
            parser.error('unknown view %s; views: %s' % (view, ', '.join(
                VIEWS)))
    return args


HEADER = ('mix', 'load', 'view', 'boots', 'rule', 'requests', 'placed',
          'refused-placement%', 'refused-card%', 'refusals-bf/ls')


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    print('%d x %s; seed %s; pick %s; card refusals in %% of the requests '
          'Placement accepted' % (args.cards, CARD.name, args.seed,
                                  args.pick), flush=True)
    started = time.process_time()
    rows = [HEADER] + table(args)
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    for row in rows:
        cells = zip(row, widths, strict=True)
        print('  '.join(cell.ljust(width) if i < 5 else cell.rjust(width)
                        for i, (cell, width) in enumerate(cells)).rstrip())
    print('CPU %.1f s' % (time.process_time() - started), file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
