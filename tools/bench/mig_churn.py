"""Replay MIG instances coming and going through the real stack.

    python tools/bench/mig_churn.py [--requests 700] [--warmup 3]
        [--seed 1] [--cards 8] [--boots 1,16] [--mixes uniform,small-heavy]
        [--loads 0.7,0.9] [--rules best-fit,lowest-slot]
        [--gpu-choice fullest-when-alone|scheduler|fullest]
        [--baseline-gpu-choice scheduler|fullest-when-alone|fullest]
        [--db sqlite|mysql|postgresql]

The churn of ``tools/bench/mig_churn_sim.py`` (its arrivals: Poisson,
exponential lifetimes of mean 1, the ``uniform`` and ``small-heavy``
mixes, the load in compute slices), played against one host of
``--cards`` H100 80GB whose MIG instances are made on demand:

- the host: its sysfs tree written with that many H100 functions, each
  behind its own root port, every one listed in ``[gpu_devices]
  mig_on_demand_addresses``; NVML is the tests' stand-in
  (``tests/unit/drivers/nvml_mig_standin.py``), which enforces the
  card's placement rules and creates an instance at once; the agent's
  privileged calls run in this process, their checks included;
- the agent (NVIDIA driver), the conductor (``Binder`` and ``HostSync``)
  and the API (WebTest) on oslo.messaging's in-process transport, on
  SQLite (``--db``: MariaDB or PostgreSQL); the agent reports its host
  through the conductor, which syncs it to a real Placement
  (openstack-placement in this process, on its own database of the same
  engine), once at the start and again whenever a card refused a bind,
  as it does in service. Placement on SQLite answers some concurrent
  writes "database is locked" (its transactions read before they
  write): a host sync that fails so leaves a card's traits stale until
  the next, which ``--db mysql`` does not. A device profile per MIG
  profile, asking for its slices (and media engine) and requiring its
  trait. The transport's listeners look for messages every 50 ms; here
  they wake at each delivery instead, as a broker pushes them;
- Nova: this script, with the stand-in of its external-events endpoint
  (``tests/nova_events.py``, served on 127.0.0.1, checking each event
  with Nova's schema) that the conductor tells of each bind.

Time is virtual: arrivals and departures are taken in the order of their
simulated times, without waiting. An arrival goes Nova's way: ``GET
/allocation_candidates`` (the flavor's VCPU and MEMORY_MB, the device
profile's group as ``resources_device_profile_0`` with its required
trait), one candidate picked at random, ``PUT /allocations`` (refused:
the next candidate, in a random order, as the simulation moves on;
none left is a refusal by Placement), the ARQ created and bound, the
event awaited, the resolved ARQ read. A bind that ends ``BindFailed`` is
a refusal by the card (checked: the conductor counted as many), and the
ARQ and the allocation are deleted at once. A departure deletes the
instance's ARQ, then its allocation.

``--boots K``: K consecutive arrivals are served together at the time
of the last, as the simulation serves them: their candidates are all
asked before any of them claims (one snapshot of the traits), the claims
are made in arrival order, then the binds run concurrently, one thread
each. With K = 1 the traits Placement filters on are always current, so
the card never refuses.

Warm-up: the first ``--warmup`` mean lifetimes of arrivals (at each
mix's and load's rate) go through the same path uncounted, so that the
counted requests meet a host already near its steady occupancy; the
simulation counts from an empty host instead. Both rules of a row see
the same arrivals, profiles and lifetimes; ``[conductor]
mig_placement_rule`` is switched between them, and so is ``[conductor]
mig_gpu_choice``: best fit runs with ``--gpu-choice`` (by default the
service's default, which packs a request on the fullest GPU of the host
that offers its profile while no other bind of the host is under way),
lowest slot with ``--baseline-gpu-choice`` (by default the GPU Nova
claimed: what the card and the scheduler do by themselves). Both at
``scheduler`` compare the start rules alone. After each row every
instance departs (uncounted), and the host is checked empty in NVML and
in Placement.

Printed per mix, load, boots and rule: counted requests, placed, refused
by Placement (% of requests), refused by the card (the bind failed, % of
those Placement accepted), moved (bound on another card of the host than
the one Nova claimed: refused by that card, ``[conductor]
mig_move_on_refusal``, off with ``--no-moves``, or packed on a fuller
one, ``[conductor] mig_gpu_choice``; % of
those accepted), on the best-fit row the
ratio of all refusals best-fit / lowest-slot, and the time from the
bind's PATCH to Nova's event (p50, p99, in ms, wall clock of this
process on this machine, the stand-in creating at once). A real H100
takes about 1.5 s to create a GPU instance and 1 s to destroy one, and
one card makes its instances one at a time: the last two columns
estimate the same times with real cards, adding 1.5 s per creation
queued on the card the bind ended on in its batch, the bind itself
included (destructions happen between batches here and are not added).
Totals per boots and rule follow, then the figures the
design aims at and the run time.

On two shared cores a request costs about 0.2 s one boot at a time and
0.3 s sixteen at a time (CPU bound, mostly Placement and SQLAlchemy):
the default 16 rows of 700 take about 45 minutes.
"""

import argparse
import contextlib
import dataclasses
import heapq
import itertools
import logging
import math
import os
import pathlib
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import mig_churn_sim as sim  # noqa: E402
from oslo_messaging._drivers import impl_fake  # noqa: E402
import pytest  # noqa: E402  (its MonkeyPatch installs the NVML stand-in)

from cyborg import context as cyborg_context  # noqa: E402
from cyborg import rpc  # noqa: E402
from cyborg.accelerator.drivers import pci  # noqa: E402
from cyborg.accelerator.drivers.gpu import nvidia  # noqa: E402
from cyborg.agent import manager as agent_manager  # noqa: E402
from cyborg.agent import rpcapi as agent_rpcapi  # noqa: E402
from cyborg.clients import nova as nova_client  # noqa: E402
from cyborg.clients import placement as placement_client  # noqa: E402
from cyborg.conductor import host_sync  # noqa: E402
from cyborg.conductor import manager as conductor_manager  # noqa: E402
from cyborg.conductor import mig as conductor_mig  # noqa: E402
from cyborg.conductor import placement_sync  # noqa: E402
from cyborg.conductor import rpcapi as conductor_rpcapi  # noqa: E402
from cyborg.conf import conductor as conductor_conf  # noqa: E402
from cyborg.db import session  # noqa: E402
from cyborg.metrics import conductor as conductor_metrics  # noqa: E402
from cyborg.privsep import checks  # noqa: E402
from cyborg.privsep import mig as privsep_mig  # noqa: E402
from tests import arq_stack  # noqa: E402
from tests import conductor_rpc  # noqa: E402
from tests import db_servers  # noqa: E402
from tests import nova_events  # noqa: E402
from tests import privsep_rig  # noqa: E402
from tests.conftest import create_schema  # noqa: E402
from tests.conftest import make_conf  # noqa: E402
from tests.placement_service import PlacementService  # noqa: E402
from tests.placement_service import create_compute_node  # noqa: E402
from tests.unit.drivers import nvml_mig_standin  # noqa: E402
from tests.unit.drivers import nvml_standin  # noqa: E402
from tests.unit.drivers.trees import hosts  # noqa: E402
from tests.unit.drivers.trees import recorded  # noqa: E402
from tests.unit.drivers.trees import sysfs  # noqa: E402

HOST = 'gpu-host'
ARQS = arq_stack.ARQS
CARD = sim.CARD
RULES = ('best-fit', 'lowest-slot')
_GPU_CHOICE = next(opt for opt in conductor_conf.opts
                   if opt.name == 'mig_gpu_choice')
GPU_CHOICES = tuple(_GPU_CHOICE.type.choices)
# What the flavor asks besides the accelerator: Nova's unnumbered group.
FLAVOR = 'MEMORY_MB:512,VCPU:1'
# Nova's suffix of the device profile's request group.
SUFFIX = '_device_profile_0'
SLICE_CLASSES = ('CUSTOM_MIG_COMPUTE_SLICE', 'CUSTOM_MIG_MEMORY_SLICE',
                 'CUSTOM_MIG_MEDIA_ENGINE')
# A real H100's time to create a GPU instance (with its compute instance).
REAL_CREATE_SECONDS = 1.5
EVENT_TIMEOUT = 60
SQLITE_RETRIES = 3
PV = placement_client.MICROVERSION


def gpu_addresses(cards):
    """PCI addresses of the host's GPUs, all below bus 0x80 (NUMA 0)."""
    if not 0 < cards <= 9:
        raise ValueError('1 to 9 cards')
    return ['0000:%02x:00.0' % (0x12 + 0x0c * i) for i in range(cards)]


def profile_groups(name):
    """The device profile group asking for MIG profile ``name``."""
    profile = CARD.profile(name)
    group = {'resources:CUSTOM_MIG_COMPUTE_SLICE': str(profile.compute_slices),
             'resources:CUSTOM_MIG_MEMORY_SLICE': str(profile.memory_slices),
             'trait:' + conductor_mig.profile_trait(name): 'required'}
    if profile.media_engine:
        group['resources:CUSTOM_MIG_MEDIA_ENGINE'] = '1'
    return [group]


def candidate_query(name):
    """Nova's query for one boot of a flavor naming ``mig-<name>``."""
    profile = CARD.profile(name)
    resources = ['CUSTOM_MIG_COMPUTE_SLICE:%d' % profile.compute_slices,
                 'CUSTOM_MIG_MEMORY_SLICE:%d' % profile.memory_slices]
    if profile.media_engine:
        resources.append('CUSTOM_MIG_MEDIA_ENGINE:1')
    return [('resources', FLAVOR),
            ('resources' + SUFFIX, ','.join(resources)),
            ('required' + SUFFIX, conductor_mig.profile_trait(name)),
            ('group_policy', 'none'), ('limit', '1000')]


class TimedNovaEvents(nova_events.NovaEventsServer):
    """Nova's events endpoint, noting when each instance's event came."""

    def __init__(self):
        super().__init__()
        self._slots_lock = threading.Lock()
        self._slots = {}  # instance -> [threading.Event, time, status]

    def expect(self, instance):
        with self._slots_lock:
            self._slots[instance] = [threading.Event(), None, None]

    def wait(self, instance, timeout=EVENT_TIMEOUT):
        """(monotonic time of arrival, status) of the instance's event."""
        with self._slots_lock:
            slot = self._slots[instance]
        if not slot[0].wait(timeout):
            raise AssertionError('no event for instance %s in %d s'
                                 % (instance, timeout))
        with self._slots_lock:
            del self._slots[instance]
        return slot[1], slot[2]

    def _record(self, call, events=()):
        now = time.monotonic()
        super()._record(call, events)
        with self._slots_lock:
            for event in events:
                slot = self._slots.get(event.server_uuid)
                if slot is not None and not slot[0].is_set():
                    slot[1], slot[2] = now, event.status
                    slot[0].set()


@dataclasses.dataclass
class Stack:
    api: object  # WebTest app
    placement: object  # keystoneauth adapter, in process
    nova: TimedNovaEvents
    library: object  # the NVML stand-in
    conf: object
    addresses: list
    providers: dict  # rp uuid -> GPU address
    node_rp: str
    metrics: object  # the conductor's
    sync: object  # the conductor's HostSync
    context: object  # an admin context of the database

    def refused(self):
        """MIG instances the cards refused so far, as the conductor
        counted them."""
        return self.metrics.registry.get_sample_value(
            'cyborg_conductor_mig_instances_total', {'outcome': 'refused'})


class _WakeOnDelivery:
    """The ``time`` of oslo.messaging's in-process driver, whose
    listeners look for a message every 50 ms: a listener's pause ends
    as soon as a message is delivered, as a broker would push it."""

    def __init__(self):
        self.delivered = threading.Condition()
        self.time = time.time

    def sleep(self, seconds):
        with self.delivered:
            self.delivered.wait(seconds)


def wake_listeners_on_delivery(monkeypatch):
    clock = _WakeOnDelivery()
    deliver = impl_fake.FakeExchange.deliver_message

    def deliver_message(exchange, *args, **kwargs):
        deliver(exchange, *args, **kwargs)
        with clock.delivered:
            clock.delivered.notify_all()

    monkeypatch.setattr(impl_fake, 'time', clock)
    monkeypatch.setattr(impl_fake.FakeExchange, 'deliver_message',
                        deliver_message)


@contextlib.contextmanager
def host_stack(directory, cards, engine='sqlite'):
    """The whole stack of one host with ``cards`` H100s, started; this
    service's and Placement's databases on ``engine``."""
    addresses = gpu_addresses(cards)
    with contextlib.ExitStack() as stack:
        monkeypatch = stack.enter_context(pytest.MonkeyPatch.context())
        wake_listeners_on_delivery(monkeypatch)
        url = db_servers.create_database(engine, directory)
        stack.callback(db_servers.drop_database, url)
        create_schema(url)
        conf = make_conf(url)
        conf.set_override('host', HOST)
        conf.set_override('mig_on_demand_addresses', addresses,
                          group='gpu_devices')
        database = session.Database(conf)
        stack.callback(database.dispose)
        context = cyborg_context.admin_context(database,
                                               project_id='admin-project')

        nova = TimedNovaEvents()
        nova.start()
        stack.callback(nova.stop)
        nova.configure(conf)

        placement_url = None
        if engine != 'sqlite':
            placement_url = db_servers.create_database(engine, directory)
            stack.callback(db_servers.drop_database, placement_url)
        placement = PlacementService(
            _directory(directory, 'placement'),
            connection=placement_url).start()
        stack.callback(placement.stop)

        root = _directory(directory, 'host')
        sysfs.build(str(root), hosts.h100s(addresses))
        library = nvml_mig_standin.MIGCapableNVML(
            recorded.recording('h100-vm', 'nvml-record.jsonl'))
        for address in addresses:
            library.add_gpu(address)
        nvml_standin.install(monkeypatch, library)
        stack.enter_context(privsep_rig.in_process(str(root)))
        monkeypatch.setattr(privsep_mig, '_cards', {})
        # The privileged helper checks its own copy of the configuration.
        daemon = checks.daemon_conf()
        daemon.set_override('mig_on_demand_addresses', addresses,
                            group='gpu_devices')
        stack.callback(daemon.clear_override, 'mig_on_demand_addresses',
                       group='gpu_devices')

        driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(str(root)))
        transport = stack.enter_context(arq_stack.fake_transport(conf))
        sync = host_sync.HostSync(placement.client())
        metrics = conductor_metrics.ConductorMetrics()
        binder = arq_stack.binder(
            conf, agent_rpcapi.AgentAPI(transport, timeout=30),
            nova=nova_client.NovaClient.from_conf(conf), sync=sync,
            metrics=metrics)
        adapter = placement.adapter()
        node = create_compute_node(adapter, HOST)

        # The agent reports through the conductor, as it does at its
        # start, and at once after a card refused a bind.
        agent = agent_manager.AgentManager(
            conf, [driver], conductor_rpcapi.ConductorAPI(transport),
            placement=placement.client(),
            candidates=[(HOST, 'the configured host')], glance=None)
        server = rpc.get_server(transport, rpc.AGENT_TOPIC, HOST, [agent])
        server.start()
        stack.callback(server.wait)
        stack.callback(server.stop)
        stack.enter_context(conductor_rpc.serving(
            transport, database,
            [conductor_manager.ConductorManager(sync, binder)]))

        summary = agent.report_inventory()
        if (summary or {}).get('placement', {}).get('status') != 'synced':
            raise RuntimeError('the host did not sync: %s' % summary)
        providers = {}
        for address in addresses:
            providers[placement_sync.provider_uuid('%s_migs_%s' % (
                HOST, address))] = address
        for profile in CARD.profiles:
            arq_stack.make_profile(context, 'mig-' + profile.name,
                                   profile_groups(profile.name))
        # WebTest's WSGI lint is the tests' check, not the service's work.
        yield Stack(arq_stack.webtest_app(conf, database, transport,
                                          lint=False),
                    adapter, nova, library, conf, addresses, providers,
                    node['uuid'], metrics, sync, context)


def _directory(parent, name):
    path = pathlib.Path(parent) / name
    path.mkdir()
    return path


class NovaBoots:
    """Nova's steps for one host, with the outcome of each request."""

    def __init__(self, stack, rng):
        self.stack = stack
        self.rng = rng
        self.conflicts = 0  # claims Placement refused

    def _placement(self, method, url, expect, **kw):
        retried = False
        for _attempt in range(SQLITE_RETRIES):
            response = getattr(self.stack.placement, method)(
                url, microversion=PV, raise_exc=False, **kw)
            # Placement on SQLite gives up on a writer that waited 5 s
            # for another (a loaded machine); its MySQL would not.
            if not (response.status_code == 500
                    and 'database is locked' in response.text):
                break
            retried = True
        if retried and method == 'delete' and response.status_code == 404:
            # The failed attempt removed the allocations and failed on
            # removing the consumer, which Placement does apart.
            return response
        if response.status_code not in expect:
            raise AssertionError('%s %s: %d %s' % (
                method.upper(), url, response.status_code, response.text))
        return response

    def candidates(self, name):
        return self._placement(
            'get', '/allocation_candidates', (200,),
            params=candidate_query(name)).json()['allocation_requests']

    def claim(self, instance, candidates):
        """The provider of slices claimed, or None: Placement refused."""
        order = list(candidates)
        self.rng.shuffle(order)
        for candidate in order:
            claimed = self._placement(
                'put', '/allocations/' + instance, (204, 409), json={
                    'allocations': candidate['allocations'],
                    'consumer_generation': None,
                    'consumer_type': 'INSTANCE',
                    'project_id': 'bench-project', 'user_id': 'bench-user'})
            if claimed.status_code == 204:
                rp, = candidate['mappings'][SUFFIX]
                return rp
            self.conflicts += 1
        return None

    def bind(self, instance, name, rp):
        """(state, seconds from the PATCH to Nova's event, the provider
        the ARQ ended on: another GPU's when its own refused)."""
        api = self.stack.api
        arq, = api.post_json(ARQS, {
            'device_profile_name': 'mig-' + name}).json['arqs']
        self.stack.nova.expect(instance)
        started = time.monotonic()
        api.patch_json(ARQS, arq_stack.bind_body([arq], rp, instance, HOST))
        arrived, status = self.stack.nova.wait(instance)
        if status != 'completed':
            return 'BindFailed', arrived - started, rp
        # Nova reads the resolved ARQs once every event is in.
        resolved, = arq_stack.wait_resolved(api, instance)
        return (resolved['state'], arrived - started,
                resolved['device_rp_uuid'])

    def delete(self, instance):
        self.stack.api.delete(ARQS, {'instance': instance})
        self._placement('delete', '/allocations/' + instance, (204,))


@dataclasses.dataclass
class Row:
    requests: int = 0
    placed: int = 0
    placement: int = 0  # refused by Placement
    card: int = 0  # accepted by Placement, refused by the card
    moved: int = 0  # refused by its card, bound on another of the host
    seconds: list = dataclasses.field(default_factory=list)
    estimated: list = dataclasses.field(default_factory=list)
    conflicts: int = 0
    wall: float = 0.0
    failed: int = 0  # BindFailed, warm-up included


def arrivals(mix, load, cards, requests, warmup, seed):
    """(uncounted warm-up arrivals, the simulation's arrivals): the
    first ``warmup`` mean lifetimes' worth at the mix's rate, then
    ``requests``."""
    names = list(sim.MIXES[mix])
    weights = [sim.MIXES[mix][n] for n in names]
    mean_compute = (sum(w * CARD.profile(n).compute_slices
                        for n, w in zip(names, weights, strict=True))
                    / sum(weights))
    rate = load * cards * CARD.compute_slices / mean_compute
    extra = math.ceil(warmup * rate)
    out = sim.arrivals(mix, load, cards, extra + requests, seed)
    return extra, out


def churn(stack, nova, requests, warm, boots, row):
    """Serve ``requests`` [(time, profile, lifetime)], the first
    ``warm`` uncounted, ``boots`` at a time; every instance left departs
    at the end."""
    ends = []  # (time, serial, instance)
    serial = itertools.count()
    for first in range(0, len(requests), boots):
        batch = requests[first:first + boots]
        now = batch[-1][0]
        while ends and ends[0][0] <= now:
            nova.delete(heapq.heappop(ends)[2])
        counted = [first + i >= warm for i in range(len(batch))]
        # One snapshot: every candidate list before any claim.
        seen = [nova.candidates(name) for _, name, _ in batch]
        claimed = []
        for index, ((_, name, lifetime), candidates) in enumerate(
                zip(batch, seen, strict=True)):
            instance = str(uuid.uuid4())
            rp = nova.claim(instance, candidates) if candidates else None
            if rp is None:
                row.placement += counted[index]
                continue
            claimed.append((index, instance, name, lifetime, rp))
        results = _bind_all(nova, claimed)
        estimate = _with_real_cards(stack, claimed, results)
        for i, (index, instance, _, lifetime, rp) in enumerate(claimed):
            state, seconds, ended_on = results[i]
            if state == 'Bound':
                heapq.heappush(ends, (now + lifetime, next(serial),
                                      instance))
            elif state == 'BindFailed':
                row.failed += 1
                nova.delete(instance)
            else:
                raise AssertionError('instance %s: ARQ %s' % (instance,
                                                              state))
            if counted[index]:
                row.placed += state == 'Bound'
                row.card += state == 'BindFailed'
                row.moved += state == 'Bound' and ended_on != rp
                row.seconds.append(seconds)
                row.estimated.append(estimate[i])
        row.requests += sum(counted)
    while ends:
        nova.delete(heapq.heappop(ends)[2])


def _with_real_cards(stack, claimed, results):
    """{boot: seconds to its event had each creation on its card taken
    REAL_CREATE_SECONDS}: one card creates one instance at a time, in
    the order the binds finished here."""
    queued = {}  # GPU address -> instances made there in this batch
    estimate = {}
    for seconds, i in sorted((results[i][1], i) for i in range(len(claimed))):
        address = stack.providers[results[i][2]]
        if results[i][0] == 'Bound':
            queued[address] = queued.get(address, 0) + 1
        estimate[i] = seconds + REAL_CREATE_SECONDS * queued.get(address, 0)
    return estimate


def _bind_all(nova, claimed):
    """[(state, seconds)] of the claimed boots, bound concurrently."""
    if len(claimed) == 1:
        _, instance, name, _, rp = claimed[0]
        return [nova.bind(instance, name, rp)]
    results = [None] * len(claimed)
    errors = []

    def boot(i, instance, name, rp):
        try:
            results[i] = nova.bind(instance, name, rp)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=boot, args=(i, instance, name, rp))
               for i, (_, instance, name, _, rp) in enumerate(claimed)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def check_empty(stack):
    """Nothing on the cards, in Placement's usages or its traits' absence."""
    held = {a: stack.library.instances(a) for a in stack.addresses}
    if any(held.values()):
        raise AssertionError('instances left on the cards: %s' % held)
    every = {conductor_mig.profile_trait(p.name) for p in CARD.profiles}
    for rp, address in stack.providers.items():
        usages = stack.placement.get(
            '/resource_providers/%s/usages' % rp, microversion=PV).json()
        if any(usages['usages'].get(c) for c in SLICE_CLASSES):
            raise AssertionError('%s still used in Placement: %s'
                                 % (address, usages))
        traits = set(stack.placement.get(
            '/resource_providers/%s/traits' % rp,
            microversion=PV).json()['traits'])
        if not every <= traits:
            raise AssertionError('%s lacks traits of an empty card: %s'
                                 % (address, sorted(every - traits)))


def run_row(stack, mix, load, boots, rule, args):
    stack.conf.set_override('mig_placement_rule', rule, group='conductor')
    stack.conf.set_override('mig_move_on_refusal', not args.no_moves,
                            group='conductor')
    stack.conf.set_override(
        'mig_gpu_choice',
        args.gpu_choice if rule == 'best-fit' else args.baseline_gpu_choice,
        group='conductor')
    warm, requests = arrivals(mix, load, args.cards, args.requests,
                              args.warmup, args.seed)
    nova = NovaBoots(stack, random.Random('%s/pick' % args.seed))
    row = Row()
    refused = stack.refused()
    started = time.monotonic()
    churn(stack, nova, requests, warm, boots, row)
    row.wall = time.monotonic() - started
    # Every failed bind must be a card's refusal, not another error.
    if stack.refused() - refused != row.failed:
        raise AssertionError('%d binds failed, %d refused by a card'
                             % (row.failed, stack.refused() - refused))
    row.conflicts = nova.conflicts
    # What the conductor's retry pass does for a sync Placement failed.
    stack.sync.sync_host(stack.context, HOST)
    check_empty(stack)
    if stack.nova.invalid:
        raise AssertionError('Nova refused events: %s'
                             % stack.nova.invalid[:3])
    stack.nova.reset()
    return row


def percent(part, whole):
    return 100.0 * part / whole if whole else 0.0


def quantiles(samples, scale):
    if not samples:
        return '-', '-'
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, math.ceil(len(ordered) * 0.99) - 1)]
    return ('%.*f' % (scale[1], statistics.median(ordered) * scale[0]),
            '%.*f' % (scale[1], p99 * scale[0]))


HEADER = ('mix', 'load', 'boots', 'rule', 'requests', 'placed',
          'refused-placement%', 'refused-card%', 'moved%', 'refusals-bf/ls',
          'event-p50-ms', 'event-p99-ms', 'real-p50-s', 'real-p99-s')


def cells(mix, load, boots, rule, row, ratio):
    accepted = row.placed + row.card
    return (mix, load, str(boots), rule,
            str(row.requests), str(row.placed),
            '%.2f' % percent(row.placement, row.requests),
            '%.2f' % percent(row.card, accepted),
            '%.2f' % percent(row.moved, accepted), ratio,
            *quantiles(row.seconds, (1000, 1)),
            *quantiles(row.estimated, (1, 2)))


def table(stack, args):
    """The rows, printed as each pair of rules ends; returns them."""
    rows = []
    for mix, load, boots in itertools.product(args.mixes, args.loads,
                                              args.boots):
        done = {}
        for rule in args.rules:
            done[rule] = run_row(stack, mix, load, boots, rule, args)
            row = done[rule]
            print('  %s %d%% boots %d %s: %d requests (and the warm-up) in '
                  '%.0f s, %d claims refused and tried elsewhere; refused '
                  'by Placement %d, by the card %d, moved %d, placed %d'
                  % (mix, round(100 * load), boots, rule, row.requests,
                     row.wall, row.conflicts, row.placement, row.card,
                     row.moved, row.placed), file=sys.stderr, flush=True)
        for rule in args.rules:
            row = done[rule]
            ratio = ''
            if rule == 'best-fit' and 'lowest-slot' in done:
                refused = {r: done[r].placement + done[r].card
                           for r in ('best-fit', 'lowest-slot')}
                ratio = ('%.2f' % (refused['best-fit']
                                   / refused['lowest-slot'])
                         if refused['lowest-slot'] else '-')
            rows.append((cells(mix, '%d%%' % round(100 * load), boots, rule,
                               row, ratio), row))
    return rows


def print_table(lines, out):
    widths = [max(len(line[i]) for line in lines)
              for i in range(len(HEADER))]
    for line in lines:
        print('  '.join(cell.ljust(width) if i < 4 else cell.rjust(width)
                        for i, (cell, width) in enumerate(
                            zip(line, widths, strict=True))).rstrip(),
              file=out)


def summed(rows, rule='all', boots='all'):
    """One Row of the rows of ``rule`` and ``boots`` ('all': any)."""
    total = Row()
    for cells_, row in rows:
        if rule in ('all', cells_[3]) and boots in ('all', cells_[2]):
            total.requests += row.requests
            total.placed += row.placed
            total.placement += row.placement
            total.card += row.card
            total.moved += row.moved
            total.seconds += row.seconds
            total.estimated += row.estimated
    return total


def ratio_of_refusals(rows, boots):
    refused = {rule: summed(rows, rule, boots) for rule in RULES}
    refused = {rule: row.placement + row.card
               for rule, row in refused.items()}
    if not refused['lowest-slot']:
        return '-'
    return '%.2f' % (refused['best-fit'] / refused['lowest-slot'])


def totals(rows):
    """Sums per boots and rule, then per rule, then of all rows."""
    rules = [r for r in RULES if any(c[3] == r for c, _ in rows)]
    boots = sorted({c[2] for c, _ in rows}, key=int)
    lines = []
    for each in boots + ['all']:
        for rule in rules + (['all'] if each == 'all' else []):
            ratio = ''
            if rule == 'best-fit' and len(rules) == 2:
                ratio = ratio_of_refusals(rows, each)
            lines.append(cells('total', '', each, rule,
                               summed(rows, rule, each), ratio))
    return lines


def aims(rows, out):
    """The figures the design aims at, from the totals."""
    for boots in sorted({c[2] for c, _ in rows}, key=int):
        for rule in RULES:
            row = summed(rows, rule, boots)
            if row.requests:
                print('card refusals, %s boot%s at a time, %s: %d of %d '
                      'accepted (%.2f %%; aim: %s)' % (
                          boots, '' if boots == '1' else 's', rule,
                          row.card, row.placed + row.card,
                          percent(row.card, row.placed + row.card),
                          '0' if boots == '1' else 'at most 1 %'), file=out)
        if all(summed(rows, rule, boots).requests for rule in RULES):
            print('refusals best-fit / lowest-slot, %s at a time: %s '
                  '(aim: at most 0.85)' % (boots, ratio_of_refusals(
                      rows, boots)), file=out)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--requests', type=int, default=700,
                        help='counted requests per row (default 700)')
    parser.add_argument('--warmup', type=float, default=3.0,
                        help='mean lifetimes of uncounted arrivals first')
    parser.add_argument('--seed', default='1')
    parser.add_argument('--cards', type=int, default=8)
    parser.add_argument('--boots', default='1,16',
                        help='requests served from one snapshot')
    parser.add_argument('--mixes', default=','.join(sim.MIXES))
    parser.add_argument('--loads', default='0.7,0.9',
                        help='offered loads, fractions of compute slices')
    parser.add_argument('--rules', default=','.join(RULES))
    parser.add_argument('--no-moves', action='store_true',
                        help='[conductor] mig_move_on_refusal off: a bind '
                        'its card refuses fails instead of moving to '
                        'another card of the host')
    parser.add_argument('--gpu-choice', choices=GPU_CHOICES,
                        default=_GPU_CHOICE.default,
                        help='[conductor] mig_gpu_choice of the best-fit '
                        'rows (default: the service\'s default)')
    parser.add_argument('--baseline-gpu-choice', choices=GPU_CHOICES,
                        default='scheduler',
                        help='[conductor] mig_gpu_choice of the '
                        'lowest-slot rows (default: scheduler, the GPU '
                        'Nova claimed)')
    parser.add_argument('--db', default='sqlite', choices=db_servers.ENGINES,
                        help='the engine of this service\'s and Placement\'s '
                        'databases (default sqlite; mysql is MariaDB)')
    parser.add_argument('--log-level', default='ERROR',
                        help='of the services\' logs on stderr (the '
                        'refusals are WARNING; default ERROR)')
    args = parser.parse_args(argv)
    args.boots = [int(b) for b in args.boots.split(',')]
    args.mixes = args.mixes.split(',')
    args.loads = [float(x) for x in args.loads.split(',')]
    args.rules = args.rules.split(',')
    for mix in args.mixes:
        if mix not in sim.MIXES:
            parser.error('unknown mix %s; mixes: %s'
                         % (mix, ', '.join(sim.MIXES)))
    for rule in args.rules:
        if rule not in RULES:
            parser.error('unknown rule %s; rules: %s'
                         % (rule, ', '.join(RULES)))
    if args.requests < 1 or args.warmup < 0 or not 0 < args.cards <= 9 \
            or min(args.boots) < 1:
        parser.error('--requests >= 1, --warmup >= 0, 1 <= --cards <= 9, '
                     '--boots >= 1')
    return args


def main(argv=None, out=None):
    """Run the table; returns the rows ([(cells, Row)]) when ``out`` is
    given (a test's stream), else the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stream = sys.stdout if out is None else out
    if out is None:
        logging.basicConfig(level=args.log_level.upper(),
                            format='%(levelname)s %(name)s: %(message)s')
    started = time.monotonic()
    print('%d x %s on one host, MIG instances on demand through the API, '
          'conductor, agent and a real Placement (NVML stand-in); seed %s; '
          '%d counted requests per row after %g mean lifetimes of warm-up; '
          'card refusals (binds failed) and moves (bound on another GPU of '
          'the host than Nova claimed) in %% of the requests Placement '
          'accepted; moves on refusal %s; GPU choice %s (best fit), %s '
          '(lowest slot); databases on %s'
          % (args.cards, CARD.name, args.seed, args.requests, args.warmup,
             'off' if args.no_moves else 'on', args.gpu_choice,
             args.baseline_gpu_choice, args.db),
          file=stream, flush=True)
    with tempfile.TemporaryDirectory(prefix='mig-churn-') as directory, \
            host_stack(directory, args.cards, args.db) as stack:
        rows = table(stack, args)
    print_table([HEADER] + [r[0] for r in rows] + totals(rows), stream)
    print('event-*: the bind\'s PATCH to Nova\'s event, this machine, the '
          'stand-in creating at once; real-*: plus %.1f s per creation '
          'queued on the bind\'s card in its batch (a real H100 takes about '
          '%.1f s to create a GPU instance, 1 s to destroy one)'
          % (REAL_CREATE_SECONDS, REAL_CREATE_SECONDS), file=stream)
    aims(rows, stream)
    print('run time %.0f s' % (time.monotonic() - started), file=stream,
          flush=True)
    return rows if out is not None else 0


if __name__ == '__main__':
    sys.exit(main())
