"""Binding accelerator requests (ARQs) to attach handles, and undoing it.

The API has already moved the ARQs to BindStarted; the conductor that
gets the cast claims them (``bind_conductor``), then for each:

1. finds the deployable behind the resource provider Nova chose and
   checks that it is on the host Nova named and not disabled;
2. takes a free attach handle of it, atomically (``allocate_attach_handle``:
   never the same handle twice, whatever the number of conductors);
3. when the device profile group asks for a bitstream or a function,
   finds the image in Glance and has the host's agent program the FPGA;
   a vGPU handle has the agent create the mediated device;
4. moves the ARQ to Bound or BindFailed (freeing the handle), with
   Nova's event marked pending in the same transaction.

Then Nova gets one ``os-server-external-events`` call per instance, from
the conductor that finished the binds.

Ownership: a conductor claims the ARQs of its cast (``bind_conductor``),
each with a deadline ``[conductor] bind_timeout`` away, renewed as the
ARQ's own bind starts: ARQs bound one after another each get the whole
time. Recovery (``recovery.py``) fails a bind only once its deadline has
passed; a bind whose conductor is dead (its heartbeat expired) is taken
over at once by the ring owner of its host, which claims it by
compare-and-set and finishes it. A resumed bind repeats steps that
already happened (the handle is kept, an mdev that exists is taken as
it is, a card that holds the bitstream is not programmed again), so it
ends as the first attempt would have. Binds queued for a conductor that
has not claimed them yet are left alone.

FPGA programming holds a reservation of the deployable
(``reserve_deployable``), by a bind as by the operator's program call:
one program at a time per card, none while another handle of the card
is in use, and none when the card already holds the bitstream asked
for.
"""

import contextlib
import datetime
import json
import threading
import time
import uuid as uuidlib

from keystoneauth1 import exceptions as ks_exc
from oslo_log import log

from cyborg import exception
from cyborg import service
from cyborg import states
from cyborg.accelerator.drivers.gpu import mig_nvml
from cyborg.clients import placement as placement_client
from cyborg.conductor import bitstreams
from cyborg.conductor import membership as membership_module
from cyborg.conductor import mig
from cyborg.conductor import mig_move
from cyborg.db import models
from cyborg.db.api import arqs as db
from cyborg.db.api import device_config_status as config_db
from cyborg.db.api import device_health
from cyborg.device_config import base_image
from cyborg.device_config import mig as device_mig
from cyborg.metrics import conductor as conductor_metrics
from cyborg.notifications import emit
from cyborg.notifications import notifier as notifier_module
from cyborg.objects import inventory

LOG = log.getLogger(__name__)

# Tells this process's reservations from those of an earlier process of
# the same conductor (a crash or restart left them).
_PROCESS = uuidlib.uuid4().hex[:12]
# How often a bind that waits for a card's reservation looks again.
RESERVATION_POLL = 0.2
# Seconds after its start by which a conductor has received every cast
# that waited in its queue: a bind addressed to it before it started and
# still unclaimed then was received by its previous process, which died
# before claiming it.
LOST_CAST_GRACE = 10
# The most waiting binds a MIG bind tells its agent of (the agent's own
# limit, more than an H100 holds instances).
MAX_MIG_WAITING = 16


class BindRefused(exception.Conflict):
    """Why a device cannot be bound or programmed now (an ARQ then ends
    BindFailed)."""

    code = 'cyborg.arq.bind_failed'


class ProgramRefused(BindRefused):
    """Why an operator's programming of a deployable is refused."""

    code = 'cyborg.deployable.program_refused'


class CardBusy(ProgramRefused):
    """The card is reserved by another program or bind, or a handle of it
    is in use: a program that can wait asks again later."""


class _InFlight:
    """The ARQs whose bind a thread of this process is running.

    Shared by every Binder of the process: a reload builds a new one
    while the old one's threads may still be binding.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._uuids = set()

    def enter(self, uuids):
        """Mark those not yet in flight; returns them."""
        with self._lock:
            mine = {u for u in uuids if u not in self._uuids}
            self._uuids |= mine
        return mine

    def leave(self, uuids):
        with self._lock:
            self._uuids -= set(uuids)

    def __contains__(self, uuid):
        with self._lock:
            return uuid in self._uuids


_IN_FLIGHT = _InFlight()


class _CardLocks:
    """One lock per MIG-on-demand deployable: its instances are made or
    destroyed and its traits followed one bind or release at a time, so
    that the agent's answers are written in the order the card gave
    them. Without it, two binds on one card can write their
    ``creatable`` out of order and leave Placement offering profiles
    the card can no longer make."""

    def __init__(self):
        self._lock = threading.Lock()
        self._locks = {}

    def __call__(self, deployable_id):
        with self._lock:
            return self._locks.setdefault(deployable_id, threading.Lock())


_MIG_CARDS = _CardLocks()


def _usable_member(deployable):
    """Whether a new bind may take a handle of this pool member."""
    return (deployable['device_status'] == 'enabled'
            and deployable['missing_since'] is None
            and not device_health.quarantine_in_effect(
                deployable['quarantined'], deployable['health_override']))


def _mig_traits_count(card):
    """How many MIG profiles the GPU's provider says it can still
    create: fewer is fuller."""
    return sum(1 for trait in card['traits'] or ()
               if trait.startswith(mig.TRAIT_PREFIX))


def _same_host(a, b):
    # Nova may name the host by FQDN where the agent used the short name.
    return a == b or (a or '').split('.')[0] == (b or '').split('.')[0]


class Binder:
    """The conductor's part of the ARQ life cycle."""

    def __init__(self, conf, agent, nova=None, glance=None, owner=None,
                 membership=None, metrics=None, notifier=None, sync=None):
        self.conf = conf
        # HostSync: Placement follows a MIG bind's traits before Nova
        # hears of the bind.
        self.sync = sync
        self.metrics = (metrics if metrics is not None
                        else conductor_metrics.ConductorMetrics())
        self.agent = agent
        self.nova = nova
        self.glance = glance
        self.notifier = (notifier if notifier is not None
                         else notifier_module.DISABLED)
        self.owner = owner or conf.host
        self.membership = (membership if membership is not None
                           else membership_module.SoleMembership(self.owner))
        self.stopping = threading.Event()
        self.started_at = models.utcnow()

    @property
    def bind_timeout(self):
        return self.conf.conductor.bind_timeout

    # -- binding ---------------------------------------------------------

    def bind(self, context, arq_uuids):
        """Bind the BindStarted ARQs of ``arq_uuids`` (the API's cast)."""
        work = db.claim_binds(context, arq_uuids, self.owner,
                              self.bind_timeout)
        # Not models.utcnow(): the whole second of the start (the database
        # keeps no fraction) is compared with the time to the microsecond.
        now = datetime.datetime.now(datetime.timezone.utc).replace(
            tzinfo=None)
        for item in work:
            if item['bind_started_at'] is not None:
                self.metrics.bind_queue_wait.observe(max(0.0, (
                    now - item['bind_started_at']).total_seconds()))
        self._bind_all(context, work)

    def resume(self, context):
        """Finish the binds this conductor owns that no thread of this
        process is running: left by a crash, or by a stop or reload that
        did not wait for them. Runs on every recovery pass."""
        work = [item for item in db.unfinished_binds(context, self.owner)
                if item['uuid'] not in _IN_FLIGHT]
        if work:
            LOG.info('Resuming %d binds left unfinished by this conductor',
                     len(work))
            self._bind_all(context, work)

    def take_over(self, context):
        """Claim and finish the binds of dead conductors on the hosts this
        conductor owns on the ring, binds never claimed by anyone for
        longer than ``bind_timeout`` (their cast was lost), and binds
        addressed to this conductor before it started that it has not
        claimed ``LOST_CAST_GRACE`` seconds after (its previous process
        received the cast and died before claiming). Returns how many it
        took."""
        membership = self.membership.current()
        now = models.utcnow()
        cutoff = now - datetime.timedelta(seconds=self.bind_timeout)
        orphans = {}  # previous owner (None: nobody) -> [uuid]
        lost_before = (self.started_at if now >= self.started_at
                       + datetime.timedelta(seconds=LOST_CAST_GRACE)
                       else None)
        for row in db.binds_in_progress(context):
            owner = row.bind_conductor
            claimed = row.bind_deadline is not None
            if owner == self.owner and claimed:
                continue  # resume's
            if claimed and row.bind_deadline < now:
                continue  # overdue: fail_overdue's, not to be bound late
            if (owner == self.owner and lost_before is not None
                    and row.bind_started_at is not None
                    and row.bind_started_at < lost_before):
                pass  # its cast went to this conductor's previous process
            elif owner is None or owner == self.owner:
                # Queued for a conductor (this one, or whichever takes the
                # cast): its cast comes, unless it was lost long ago.
                if (not membership.owns(row.hostname or '')
                        or row.bind_started_at is None
                        or row.bind_started_at >= cutoff):
                    continue
            elif (membership.is_alive(owner)
                  or not membership.owns(row.hostname or '')):
                continue
            orphans.setdefault(owner, []).append(row.uuid)
        taken = 0
        for previous, uuids in orphans.items():
            work = db.take_over_binds(context, uuids, previous, self.owner,
                                      self.bind_timeout)
            work = [item for item in work if item['uuid'] not in _IN_FLIGHT]
            if not work:
                continue
            taken += len(work)
            if previous is None or previous == self.owner:
                LOG.warning('Taking over %d binds that no conductor claimed '
                            'within %d s: %s', len(work), self.bind_timeout,
                            ', '.join(i['uuid'] for i in work))
            else:
                LOG.warning('Taking over %d binds of conductor %s, which is '
                            'dead: %s', len(work), previous,
                            ', '.join(i['uuid'] for i in work))
            self._bind_all(context, work)
        return taken

    def stop(self):
        """The service is stopping: a bind that fails from now on is left
        BindStarted, for the next start to finish, instead of failed."""
        self.stopping.set()

    def _bind_all(self, context, work):
        mine = _IN_FLIGHT.enter([item['uuid'] for item in work])
        work = [item for item in work if item['uuid'] in mine]
        finished = []
        try:
            for index, item in enumerate(work):
                if index:
                    # This ARQ's bind starts now: it and those after it
                    # get bind_timeout from here (the claim stamped the
                    # first one).
                    db.renew_deadlines(
                        context, [i['id'] for i in work[index:]],
                        self.owner, self.bind_timeout)
                finished.append(self._bind_one(context, item))
        finally:
            _IN_FLIGHT.leave(mine)
        # One call per instance, once all its ARQs of this cast are done.
        self.notify(context, [f for f in finished if f is not None])

    def _bind_one(self, context, item):
        """Bind one ARQ; (instance, arq uuid, state) if this conductor
        finished it, None if someone else did (unbind, delete, recovery).
        """
        started = time.monotonic()
        try:
            handle, deployable = self._prepare(context, item)
            ok = True
        except db.BindLost:
            LOG.info('ARQ %s was unbound or deleted while being bound',
                     item['uuid'])
            self.metrics.bind('lost')
            return None
        except Exception as exc:
            if self.stopping.is_set():
                LOG.info('ARQ %s: bind interrupted by the service stopping '
                         '(%s); left for the next start',
                         item['uuid'], service.describe_error(exc))
                self.metrics.bind('interrupted')
                return None
            ok = False
            reason = (exc.message if isinstance(exc, exception.CyborgError)
                      else service.describe_error(exc))
        won = db.finish_binding(context, item['id'], ok)
        if ok and won:
            LOG.info('ARQ %s bound to %s handle %s of %s in %.3f s',
                     item['uuid'], handle['attach_type'], handle['uuid'],
                     deployable['name'], time.monotonic() - started)
        elif ok and db.holds_handle(context, item['id'], handle['id'],
                                    handle['uuid']):
            # Another bind of this same ARQ finished first (two conductors
            # under one host name): the device is the ARQ's; keep it.
            LOG.warning('ARQ %s was bound twice; the other bind finished '
                        'first', item['uuid'])
        elif ok:
            # Unbound, deleted or failed by another conductor meanwhile:
            # undo what was done on the host.
            LOG.info('ARQ %s left BindStarted while being bound; releasing '
                     'its device', item['uuid'])
            self._release_quietly(context, deployable['hostname'],
                                  deployable['driver_name'], handle,
                                  item['uuid'])
        elif won:
            LOG.warning('ARQ %s of instance %s failed to bind: %s',
                        item['uuid'], item['instance_uuid'], reason)
        if not won:
            self.metrics.bind('lost')
            return None
        self.metrics.bind('bound' if ok else 'failed', started)
        if ok:
            emit.arqs_bound(self.notifier, context, [dict(
                item, device_profile_name=item['profile_name'],
                attach_handle_type=handle['attach_type'],
                attach_handle_uuid=handle['uuid'])])
        else:
            emit.arqs_bind_failed(self.notifier, context, [dict(
                item, device_profile_name=item['profile_name'])], reason)
        return (item['instance_uuid'], item['uuid'],
                states.BOUND if ok else states.BIND_FAILED, won)

    def _prepare(self, context, item):
        members = db.deployables_for_binding(context, item['device_rp_uuid'])
        if not members:
            raise BindRefused('No deployable of this service has resource '
                              'provider %s.' % item['device_rp_uuid'])
        if not _same_host(members[0]['hostname'], item['hostname']):
            raise BindRefused(
                'Resource provider %s is on host %s, not on %s.'
                % (item['device_rp_uuid'], members[0]['hostname'],
                   item['hostname']))
        if len(members) > 1:
            return self._prepare_pooled(context, item, members)
        deployable = members[0]
        if deployable['device_status'] != 'enabled':
            raise BindRefused('The device of deployable %s is disabled.'
                              % deployable['name'])
        request = bitstreams.requested(item['group'])
        holder = None
        if request is not None:
            what = ('Device profile %s asks for a bitstream'
                    % item['profile_name'])
            self._check_programmable(deployable, what, BindRefused)
            # Before the handle is taken: binds of one card that all ask
            # for a bitstream take turns here instead of each seeing the
            # others' handles in use.
            holder = self._wait_for_reservation(context, deployable, item)
        try:
            handle = db.allocate_attach_handle(context, item['id'],
                                               [deployable['id']])
            if handle is None:
                raise BindRefused('Every attach handle of deployable %s on '
                                  '%s is in use.' % (deployable['name'],
                                                     deployable['hostname']))

            def program_or_check():
                # After the handle is taken: a drain that started before
                # counts it in use and waits; one that starts after it
                # is seen here.
                self._check_not_configuring(context, deployable)
                if holder is not None:
                    self._program_for_bind(context, item, deployable,
                                           handle, request)
                elif deployable['device_type'] == 'FPGA':
                    self._check_not_reserved(context, deployable)

            # A failed program releases the handle on the host as well.
            self._prepare_on_host(context, item, deployable, handle,
                                  before=program_or_check)
        finally:
            if holder is not None:
                db.release_deployable(context, deployable['id'], holder)
        return handle, deployable

    def _prepare_pooled(self, context, item, members):
        """Bind to a free handle of any usable member of a pooled provider.

        Placement counts the pool as a whole and reserves one unit per
        disabled, quarantined or missing member, so a bind takes a handle
        of the others only. Pools never hold FPGAs (``inventory.pool_key``):
        a bitstream request cannot be served by one.
        """
        if bitstreams.requested(item['group']) is not None:
            raise BindRefused(
                'Device profile %s asks for a bitstream, which the pooled '
                'resource provider %s cannot program.'
                % (item['profile_name'], item['device_rp_uuid']))
        usable = {m['id']: m for m in members if _usable_member(m)}
        if not usable:
            raise BindRefused(
                'Every member of pooled resource provider %s on %s is '
                'disabled, quarantined or missing.'
                % (item['device_rp_uuid'], item['hostname']))
        handle = db.allocate_attach_handle(context, item['id'], list(usable))
        if handle is None:
            raise BindRefused('Every attach handle of pooled resource '
                              'provider %s on %s is in use.'
                              % (item['device_rp_uuid'], item['hostname']))
        # A resumed bind keeps the handle it took, even of a member that
        # has been disabled since.
        deployable = usable.get(handle['deployable_id']) or next(
            m for m in members if m['id'] == handle['deployable_id'])
        self._prepare_on_host(context, item, deployable, handle)
        return handle, deployable

    def _prepare_on_host(self, context, item, deployable, handle,
                         before=None):
        """Run ``before``, then have the agent prepare ``handle`` if its
        type is prepared on the host (MDEV).

        If either fails, the handle is released on the host and the error
        raised: finish_binding(ok=False) frees it only in the database.
        """
        try:
            if before is not None:
                before()
            if handle['attach_type'] == MIG:
                deployable, handle = self._make_mig_instance(
                    context, item, deployable, handle)
            elif handle['attach_type'] in db.PREPARED_ON_HOST:
                self.agent.prepare_attach_handle(
                    context, deployable['hostname'],
                    deployable['driver_name'], _handle_payload(handle),
                    item['uuid'])
        except Exception:
            if handle['attach_type'] in db.PREPARED_ON_HOST:
                self._release_quietly(context, deployable['hostname'],
                                      deployable['driver_name'], handle,
                                      item['uuid'])
            raise
        return deployable, handle

    def _make_mig_instance(self, context, item, deployable, handle):
        """Have the agent make the MIG instance the ARQ asks for, keep
        its identity on the ARQ (``handle['attach_details']`` too, for a
        release), and have Placement follow what the GPU can still
        create. A GPU that refuses (too fragmented) hands the request to
        another GPU of the host that can place it (``mig_move``).
        Returns the deployable and handle the instance was made on."""
        try:
            profile = mig.profile_asked(item['group'])
        except mig.NotAMIGRequest as exc:
            raise BindRefused(str(exc))
        if item.get('attach_handle_id') is not None:
            # Resumed: its move may be in Placement and not yet here.
            deployable, handle = self._follow_moved(context, item,
                                                    deployable, handle)
        first = handle
        tried = set()
        if (item.get('attach_handle_id') is None
                and self.conf.conductor.mig_gpu_choice != 'scheduler'):
            deployable, handle = self._pack_mig_request(
                context, item, deployable, handle, profile, tried)
        while True:
            tried.add(deployable['id'])
            try:
                with _MIG_CARDS(deployable['id']):
                    made = self._make_mig_instance_locked(
                        context, item, deployable, handle, profile)
                break
            except mig_nvml.MIGRefused as refusal:
                moved = self._move_mig_request(context, item, deployable,
                                               handle, profile, tried)
                if moved is None:
                    self.metrics.mig_instances.labels('refused').inc()
                    if len(tried) > 1:
                        raise mig_nvml.MIGRefused(
                            '%s Neither could %d other GPUs of %s.' % (
                                refusal.message, len(tried) - 1,
                                deployable['hostname'])) from refusal
                    raise
                deployable, handle = moved
            except Exception:
                if handle is not first:
                    # The caller releases the handle it gave.
                    self._release_quietly(context, deployable['hostname'],
                                          deployable['driver_name'], handle,
                                          item['uuid'])
                raise
        handle['attach_details'] = made
        return deployable, handle

    def _placement(self):
        return self.sync.client if self.sync is not None else None

    def _mig_cards(self, context, deployable, profile, tried, cards=None):
        """The other usable GPUs of the host (of ``cards``, else read)
        that say they can place ``profile`` now, fullest first (their
        traits list fewer profiles): larger holes are kept for larger
        profiles."""
        if cards is None:
            cards = db.mig_cards_of_host(context, deployable['hostname'])
        trait = mig.profile_trait(profile)
        cards = [card for card in cards
                 if card['id'] not in tried and _usable_member(card)
                 and card['driver_name'] == deployable['driver_name']
                 and trait in (card['traits'] or ())]
        return sorted(cards, key=lambda card: (_mig_traits_count(card),
                                               card['id']))

    def _pack_mig_request(self, context, item, deployable, handle,
                          profile, tried):
        """``[conductor] mig_gpu_choice`` ``fullest`` (and
        ``fullest-when-alone`` while no other MIG bind of the host is
        under way): move the request to the GPU of the host that offers
        the fewest profiles among those that offer this one, where that
        is fuller than the GPU Nova's claim names and Placement gives it
        the room. ``(deployable, handle)`` the bind goes on with."""
        placement = self._placement()
        if placement is None:
            return deployable, handle
        cards = db.mig_cards_of_host(context, deployable['hostname'])
        own = next((card for card in cards
                    if card['id'] == deployable['id']), None)
        if own is None:
            return deployable, handle
        if (self.conf.conductor.mig_gpu_choice == 'fullest-when-alone'
                and db.binds_under_way(
                    context, [card['rp_uuid'] for card in cards],
                    item['id'])):
            # Racing binds packed on one GPU would wait for each other
            # on its card, one creation at a time.
            return deployable, handle
        fuller = [card for card in self._mig_cards(
                      context, deployable, profile, {own['id']}, cards)
                  if _mig_traits_count(card) < _mig_traits_count(own)]
        moved = self._move_to_first(context, item, deployable, handle,
                                    profile, fuller, tried, 'packed')
        return moved if moved is not None else (deployable, handle)

    def _move_mig_request(self, context, item, deployable, handle, profile,
                          tried):
        """Move the request to the first other GPU of the host whose
        provider Placement gives the room: ``(deployable, handle)`` of
        that GPU, or None when no GPU takes it (or moves are off)."""
        if not self.conf.conductor.mig_move_on_refusal:
            return None
        return self._move_to_first(
            context, item, deployable, handle, profile,
            self._mig_cards(context, deployable, profile, tried), tried,
            'moved')

    def _move_to_first(self, context, item, deployable, handle, profile,
                       cards, tried, outcome):
        """Move the request to the first of ``cards`` whose provider
        Placement gives the room; counted as ``outcome``."""
        placement = self._placement()
        if placement is None:
            return None
        resources = inventory.resources_asked(item['group'])
        for card in cards:
            tried.add(card['id'])
            try:
                mig_move.move(placement, item['instance_uuid'], resources,
                              item['device_rp_uuid'], card['rp_uuid'])
            except mig_move.NoRoom as exc:
                LOG.info('ARQ %s: Placement gives %s no room for %s: %s',
                         item['uuid'], card['name'], profile, exc)
                continue
            except (ValueError, placement_client.PlacementError) as exc:
                LOG.warning('ARQ %s: its allocation could not be moved to '
                            '%s: %s', item['uuid'], card['name'], exc)
                return None
            new = db.move_bind(context, item['id'], handle['id'],
                               card['id'], card['rp_uuid'])
            if new is None:
                # Placement had room the database has no handle for: the
                # allocation goes back where the ARQ still is.
                mig_move.move(placement, item['instance_uuid'], resources,
                              card['rp_uuid'], item['device_rp_uuid'])
                continue
            if outcome == 'moved':
                LOG.info('ARQ %s: %s is too fragmented for %s; moved to %s '
                         'of the same host', item['uuid'], deployable['name'],
                         profile, card['name'])
            else:
                LOG.info('ARQ %s: %s moved to %s, the fullest GPU of the '
                         'host that offers it', item['uuid'], profile,
                         card['name'])
            self.metrics.mig_instances.labels(outcome).inc()
            item['device_rp_uuid'] = card['rp_uuid']
            return card, new
        return None

    def _follow_moved(self, context, item, deployable, handle):
        """A bind resumed after its conductor died between a move's
        Placement write and its database write: the ARQ follows the
        allocation."""
        placement = self._placement()
        if placement is None or db.attach_details_of(context, item['id']):
            return deployable, handle  # nothing to follow, or made already
        cards = {card['rp_uuid']: card for card in db.mig_cards_of_host(
            context, deployable['hostname'])}
        allocations = placement.get_allocations(
            item['instance_uuid']).get('allocations') or {}
        rp = mig_move.placed_on(
            allocations, db.instance_requests(context, item['instance_uuid']),
            item, list(cards))
        if rp == item['device_rp_uuid']:
            return deployable, handle
        new = db.move_bind(context, item['id'], handle['id'], cards[rp]['id'],
                           rp)
        if new is None:
            raise BindRefused('The allocation of ARQ %s was moved to %s, '
                              'which has no free attach handle.'
                              % (item['uuid'], cards[rp]['name']))
        LOG.info('ARQ %s follows its allocation, moved to %s before a '
                 'restart', item['uuid'], cards[rp]['name'])
        item['device_rp_uuid'] = rp
        return cards[rp], new

    def _make_mig_instance_locked(self, context, item, deployable, handle,
                                  profile):
        # A bind resumed after a crash finds the instance it made.
        made = db.attach_details_of(context, item['id'])
        if made is None:
            answer = self.agent.prepare_attach_handle(
                context, deployable['hostname'],
                deployable['driver_name'], _handle_payload(handle),
                item['uuid'], request={
                    'mig_profile': profile,
                    'placement_rule':
                        self.conf.conductor.mig_placement_rule,
                    'waiting': self._mig_waiting(context, deployable, item)})
            self.metrics.mig_instances.labels('created').inc()
            try:
                made = mig.kept_details(answer)
            except ValueError as exc:
                raise BindRefused(str(exc))
            handle['attach_details'] = made
            if not db.record_attach_details(context, item['id'],
                                            handle['id'], made):
                raise db.BindLost(item['id'])
            self._follow_mig_traits(context, deployable,
                                    answer.get('creatable'),
                                    answer.get('stranded'))
        return made

    def _mig_waiting(self, context, deployable, item):
        """The profiles of the other requests given this GPU that nothing
        was made for yet: best fit leaves them room. Boots served from
        one snapshot of the traits arrive together, and the first bind on
        a card may come before the others' requests do. The database
        knows the requests whose binds reached this service (the other
        ARQs of this ARQ's instance included); Placement's allocations on
        the GPU's provider know the other instances as well, each by its
        slices there."""
        requests = db.requests_on_provider(context, item['device_rp_uuid'])
        waiting = []
        for other in requests:
            if other['made'] or other['id'] == item['id']:
                continue
            try:
                waiting.append(mig.profile_asked(other['group']))
            except mig.NotAMIGRequest:
                continue  # its own bind refuses it
        known = {other['instance_uuid'] for other in requests}
        waiting += self._mig_claims_waiting(context, deployable, item, known)
        return waiting[:MAX_MIG_WAITING]

    def _mig_claims_waiting(self, context, deployable, item, known):
        """The profiles of the instances Placement gave this GPU whose
        binds did not reach this service yet (not in ``known``), each
        named by the slices it holds there; none when Placement cannot
        be read."""
        placement = self._placement()
        card = device_mig.card_of(
            *(str((deployable['std_board_info'] or {}).get(key) or '')
              for key in ('vendor_id', 'product_id')))
        if placement is None or card is None:
            return []
        try:
            claims = placement.get_provider_allocations(
                item['device_rp_uuid'])
        except (placement_client.PlacementError, ks_exc.ClientException,
                ValueError) as exc:
            LOG.warning('ARQ %s: the allocations on %s could not be read, '
                        'best fit weighs only the binds under way: %s',
                        item['uuid'], deployable['name'], exc)
            return []
        waiting = (mig.profile_of_slices(card, resources)
                   for consumer, resources in sorted(claims.items())
                   if consumer not in known)
        return [name for name in waiting if name]

    def _follow_mig_traits(self, context, deployable, creatable,
                           stranded=None):
        """The GPU's provider says what it can still create, and holds
        back the slices no placement can use, in the database and,
        before any Nova event, in Placement."""
        if creatable is None:
            return
        traits = mig.traits_with(db.deployable_traits(context,
                                                      deployable['id']),
                                 creatable)
        if (db.set_deployable_traits(context, deployable['id'], traits,
                                     held_back=mig.held_back(stranded))
                and self.sync is not None):
            self.sync.sync_host(context, deployable['hostname'])

    # -- FPGA reservations and programming -------------------------------

    @property
    def _reservation_lifetime(self):
        # A reservation outlives no bind: older ones were left by a
        # conductor that died while it held one.
        return self.bind_timeout

    def _holder(self):
        return '%s %s %s' % (self.owner, _PROCESS, uuidlib.uuid4().hex[:8])

    def _breakable(self, holder):
        """Whether a reservation was left by a process that is gone: an
        earlier process of this conductor, or a dead conductor."""
        try:
            conductor, process, _ = holder.split(' ')
        except (AttributeError, ValueError):
            return False
        if conductor == self.owner:
            return process != _PROCESS
        return not self.membership.is_alive(conductor)

    def _reserve(self, context, deployable, holder):
        """One attempt; who holds it instead, or None if taken."""
        current = db.reservation_of(context, deployable['id'],
                                    self._reservation_lifetime)
        if current is not None and not self._breakable(current):
            return current
        if db.reserve_deployable(context, deployable['id'], holder,
                                 self._reservation_lifetime,
                                 expected=current):
            return None
        return db.reservation_of(context, deployable['id'],
                                 self._reservation_lifetime) or 'another'

    def _wait_for_reservation(self, context, deployable, item):
        """Reserve the card for this bind, waiting for a program that
        holds it to end (at most ``agent_program_timeout``)."""
        holder = self._holder()
        waited_until = (time.monotonic()
                        + self.conf.conductor.agent_program_timeout)
        while True:
            other = self._reserve(context, deployable, holder)
            if other is None:
                break
            if time.monotonic() >= waited_until or self.stopping.is_set():
                raise BindRefused(
                    'Deployable %s is being programmed (reserved by %s) and '
                    'was not released within %d s.'
                    % (deployable['name'], other.split(' ')[0],
                       self.conf.conductor.agent_program_timeout))
            time.sleep(RESERVATION_POLL)
        # The bind really starts now: its deadline counts from here.
        db.renew_deadlines(context, [item['id']], self.owner,
                           self.bind_timeout)
        return holder

    def _check_not_configuring(self, context, deployable):
        """No new bind on a device whose configuration is changing (or
        failed to): what it offers is about to change."""
        with context.db.read_connection(context) as connection:
            state = config_db.state_of_deployable(connection,
                                                  deployable['id'])
        if state in config_db.HELD:
            raise BindRefused('The device of deployable %s is out of '
                              'scheduling: its configuration is %s.'
                              % (deployable['name'], state))

    def _check_not_reserved(self, context, deployable):
        """A bind that programs nothing may not take a handle of a card
        being programmed: its function is about to change."""
        other = db.reservation_of(context, deployable['id'],
                                  self._reservation_lifetime)
        if other is not None and not self._breakable(other):
            raise BindRefused('Deployable %s is being programmed; its '
                              'function is about to change.'
                              % deployable['name'])

    def _program_for_bind(self, context, item, deployable, handle, request):
        # Read again under the reservation: a program that held it
        # before may have changed what the card holds.
        deployable = db.deployable_for_binding(context,
                                               uuid=deployable['uuid'])
        attributes, in_use = db.programming_facts(
            context, deployable['id'], except_handle=handle['id'],
            same_request=(item.get('device_profile_id'),
                          item['device_profile_group_id']))
        facts = bitstreams.FPGAFacts.from_device(deployable, attributes)
        image = bitstreams.choose_bitstream(self.glance, request, facts)
        if holds(deployable, attributes, image):
            LOG.info('Deployable %s already holds bitstream %s; ARQ %s '
                     'needs no programming', deployable['name'],
                     _bitstream_id(image), item['uuid'])
            return
        if in_use:
            raise BindRefused(
                'Device profile %s asks for bitstream %s, but deployable %s '
                'holds another and %d of its other accelerators are in use; '
                'programming it would pull them from under their '
                'instances.' % (item['profile_name'], _bitstream_id(image),
                                deployable['name'], in_use))
        self._program(context, deployable, image, 'ARQ %s' % item['uuid'])

    def program_deployable(self, context, deployable_uuid, image_uuid):
        """An operator's request: load Glance image ``image_uuid`` into
        the FPGA deployable, which must have no accelerator in use."""
        deployable = db.deployable_for_binding(context, uuid=deployable_uuid)
        if deployable is None:
            raise exception.NotFound('No deployable with uuid %s exists.'
                                     % deployable_uuid)
        self._check_programmable(deployable, 'Programming was asked',
                                 ProgramRefused)
        with self._reserved_idle(context, deployable) as attributes:
            image = self._fitting_image(deployable, attributes, image_uuid)
            return self._program(context, deployable, image, 'the operator')

    def apply_base_image(self, context, device_id, image_uuid, apply):
        """An FPGA base image of device configuration, run the way an
        operator's program call runs: under the card's reservation, with
        no handle of it in use and the image checked to exist and fit,
        ``apply(timeout=...)`` has the agent load it (its
        ``apply_device_config``), and the card's bitstream is recorded
        once applied. Returns the agent's result, or a failed one that
        names the step (``base_image``) that refused; raises CardBusy
        while another program or bind holds the card or a handle of it
        is in use."""
        # FPGA drivers make one deployable per card.
        found = db.deployables_of_device(context, device_id)
        if not found or found[0]['device_type'] != 'FPGA':
            return base_image.failed(
                base_image.FIND_FPGA, 'The device offers no FPGA deployable '
                'to program: it is not an FPGA, or its driver finds no '
                'FPGA region on it (is the FPGA\'s kernel driver loaded?).')
        deployable = found[0]
        if self.glance is None:
            return base_image.failed(
                base_image.FIND_IMAGE, 'No image service is configured '
                '([glance]) on conductor %s.' % self.owner)
        with self._reserved_idle(context, deployable) as attributes:
            try:
                image = self._fitting_image(deployable, attributes,
                                            image_uuid)
            except ProgramRefused as exc:
                return base_image.failed(base_image.CHECK_IMAGE, exc.message)
            except exception.CyborgError as exc:
                return base_image.failed(base_image.FIND_IMAGE, exc.message)
            LOG.info('Loading base image %s into %s on %s', image['id'],
                     deployable['name'], deployable['hostname'])
            result = apply(
                timeout=self.conf.conductor.agent_program_timeout)
            if result.get('state') == config_db.APPLIED:
                db.record_bitstream(context, deployable['id'],
                                    _bitstream_id(image))
            return result

    @contextlib.contextmanager
    def _reserved_idle(self, context, deployable):
        """The card's reservation, held while no handle of it is in use;
        CardBusy if another holds it or a handle is in use. Yields the
        deployable's attributes."""
        holder = self._holder()
        other = self._reserve(context, deployable, holder)
        if other is not None:
            raise CardBusy(
                'Deployable %s is being programmed or bound by conductor '
                '%s; try again once it is done.'
                % (deployable['name'], other.split(' ')[0]))
        try:
            # Counted under the reservation: a bind that takes a handle
            # from now on sees the reservation and backs off.
            attributes, in_use = db.programming_facts(context,
                                                      deployable['id'])
            if in_use:
                raise CardBusy(
                    'Deployable %s has %d accelerators in use; programming '
                    'it would pull them from under their instances.'
                    % (deployable['name'], in_use))
            yield attributes
        finally:
            db.release_deployable(context, deployable['id'], holder)

    def _fitting_image(self, deployable, attributes, image_uuid):
        """Glance image ``image_uuid``; ProgramRefused with the rule it
        breaks if it does not fit the card."""
        image = self.glance.get_bitstream(image_uuid)
        facts = bitstreams.FPGAFacts.from_device(deployable, attributes)
        reason = bitstreams.mismatch(image, facts)
        if reason:
            raise ProgramRefused('Image %s does not fit deployable %s: it %s.'
                                 % (image_uuid, deployable['name'], reason))
        return image

    def _check_programmable(self, deployable, what, error):
        if deployable['device_type'] != 'FPGA':
            raise error('%s, but deployable %s is not an FPGA.'
                        % (what, deployable['name']))
        if self.glance is None:
            raise error('%s, but no image service is configured '
                        '([glance]).' % what)

    def _program(self, context, deployable, image, for_whom):
        controlpath = deployable['controlpath_info']
        if isinstance(controlpath, str):
            controlpath = json.loads(controlpath)
        LOG.info('Programming %s on %s with image %s for %s',
                 deployable['name'], deployable['hostname'], image['id'],
                 for_whom)
        result = self.agent.program(
            context, deployable['hostname'], deployable['driver_name'],
            controlpath, {'image_id': image['id'],
                          'properties': image['properties']})
        db.record_bitstream(context, deployable['id'], _bitstream_id(image))
        return result

    def _release_quietly(self, context, host, driver_name, handle,
                         arq_uuid):
        if handle is None or handle['attach_type'] not in db.PREPARED_ON_HOST:
            return
        try:
            self._release(context, host, driver_name, handle, arq_uuid,
                          handle.get('attach_details'))
        except Exception as exc:
            LOG.warning('Could not release handle %s of ARQ %s on %s: %s',
                        handle['uuid'], arq_uuid, host,
                        service.describe_error(exc))

    # -- Nova ------------------------------------------------------------

    def notify(self, context, events):
        """Tell Nova of ``events``, (instance, arq uuid, state, the
        ``updated_at`` seen) of ARQs moved to Bound or BindFailed: one
        call per instance, each claimed right before it is sent
        (``db.claim_events``), so that a recovery pass or another
        conductor never sends the same event too; the call ends within
        ``nova_event_retry_after``, while the claim holds. What Nova got,
        or refused for good, is no longer pending; the rest is sent again
        by a later recovery pass. Returns the uuids of the ARQs still
        pending or claimed by another sender."""
        if not events:
            return set()
        if self.nova is None:
            # No compute service to tell (the single-machine mode).
            db.events_delivered(context, [e[1] for e in events])
            return set()
        from cyborg.clients import nova as nova_client
        seen = {arq: (instance, arq, state, stamp)
                for instance, arq, state, stamp in events}
        claimed = set()

        def claim(instance_uuid, instance_events):
            won = {arq for _, arq, _ in db.claim_events(
                context, [seen[e.arq_uuid] for e in instance_events])}
            claimed.update(won)
            return [e for e in instance_events if e.arq_uuid in won]

        window = max(1.0, self.conf.conductor.nova_event_retry_after - 2)
        results = self.nova.notify_bound(
            [nova_client.BoundEvent(instance, arq, state == states.BOUND)
             for instance, arq, state, _ in events],
            claim=claim, window=window)
        done, pending = [], set()
        for instance, arq, _, _ in events:
            if arq in claimed and _settled(results.get(instance), instance,
                                           arq):
                done.append(arq)
            else:
                pending.add(arq)
        if done:
            db.events_delivered(context, done)
        return pending

    # -- unbinding and deleting -----------------------------------------

    def unbind(self, context, arq_uuids):
        """Release what the agents made of these ARQs' handles, then
        unbind them; UnbindFailed if a host could not release."""
        failed = self._release_all(context, arq_uuids)
        if failed:
            db.fail_unbind(context, failed)
            raise BindRefused('Could not release the devices of accelerator '
                              'requests %s; they are UnbindFailed.'
                              % ', '.join(sorted(failed)))
        emit.arqs_unbound(self.notifier, context, db.unbind(
            context, arq_uuids, describe=self.notifier.enabled))

    def finish_deleting(self, context, arq_uuids):
        """Release and remove ARQs that the API moved to Deleting."""
        failed = self.try_deleting(context, arq_uuids)
        if failed:
            raise BindRefused('Could not release the devices of accelerator '
                              'requests %s; they stay Deleting and are '
                              'tried again later.' % ', '.join(sorted(failed)))

    def try_deleting(self, context, arq_uuids):
        """``finish_deleting`` that returns the uuids it could not release
        (they stay Deleting) instead of raising."""
        failed = self._release_all(context, arq_uuids)
        removed = db.finish_deleting(
            context, [u for u in arq_uuids if u not in failed],
            describe=self.notifier.enabled)
        emit.arqs_deleted(self.notifier, context, removed)
        return failed

    def _release_all(self, context, arq_uuids):
        failed = set()
        for row in db.handles_of(context, uuids=arq_uuids):
            if row['attach_type'] not in db.PREPARED_ON_HOST:
                continue
            handle = {'uuid': row['handle_uuid'],
                      'attach_type': row['attach_type'],
                      'attach_info': row['attach_info']}
            try:
                self._release(context, row['device_hostname'],
                              row['driver_name'], handle, row['uuid'],
                              row['attach_details'])
            except Exception as exc:
                LOG.warning('Could not release handle %s of ARQ %s on %s: '
                            '%s', handle['uuid'], row['uuid'],
                            row['device_hostname'],
                            service.describe_error(exc))
                failed.add(row['uuid'])
        return failed

    def _release(self, context, host, driver_name, handle, arq_uuid,
                 details):
        """Have the agent undo what it made for ``handle``'s bind: a MIG
        instance by the identity the bind kept (none kept: nothing was
        made), then Placement follows what the GPU can create again."""
        if handle['attach_type'] != MIG:
            self.agent.release_attach_handle(context, host, driver_name,
                                             _handle_payload(handle),
                                             arq_uuid)
            return
        if not details:
            return
        deployable = db.deployable_of_handle(context, handle['uuid'])
        with _MIG_CARDS(None if deployable is None else deployable['id']):
            answer = self.agent.release_attach_handle(
                context, host, driver_name, _handle_payload(handle),
                arq_uuid, details=details)
            self.metrics.mig_instances.labels('destroyed').inc()
            if deployable is not None and isinstance(answer, dict):
                self._follow_mig_traits(context, deployable,
                                        answer.get('creatable'),
                                        answer.get('stranded'))

    # -- recovery (each step run by its own worker, recovery.py) ------

    def fail_overdue(self, context):
        """Fail the binds whose own deadline has passed on the hosts this
        conductor owns; tell Nova. Returns the failed ARQs."""
        membership = self.membership.current()
        owned = [h for h in db.overdue_bind_hosts(context)
                 if membership.owns(h or '')]
        failed = db.fail_overdue_binds(context, hostnames=owned) \
            if owned else []
        if failed:
            self.metrics.binds.labels('overdue').inc(len(failed))
        for arq in failed:
            LOG.warning('ARQ %s of instance %s: bind did not finish within '
                        '%d s; failed', arq['uuid'], arq['instance_uuid'],
                        self.bind_timeout)
        if failed:
            emit.arqs_bind_failed(
                self.notifier, context,
                lambda: db.list_arqs(context,
                                     uuids=[a['uuid'] for a in failed]),
                'The bind did not finish within %d s.' % self.bind_timeout)
        self.notify(context, [(a['instance_uuid'], a['uuid'],
                               states.BIND_FAILED, a['updated_at'])
                              for a in failed])
        return failed


def _settled(result, instance, arq):
    """Whether Nova's answer ends the retries of one ARQ's event: it got
    the event, or refused it in a way that a retry cannot change."""
    from cyborg.clients import nova as nova_client
    if result is None:
        return False
    if result.delivered:
        # 422: the instance is not on a host yet; it may be later.
        return result.event_codes.get(arq) != nova_client.EVENT_NO_HOST
    if result.status == nova_client.EVENT_UNKNOWN_INSTANCE:
        LOG.warning('Nova does not know instance %s (404); the bind event '
                    'of accelerator request %s is dropped', instance, arq)
        return True
    return False


def _bitstream_id(image):
    return image['properties'].get('bs-uuid') or image['id']


def holds(deployable, attributes, image):
    """Whether the card already holds ``image``: the conductor recorded
    loading it last, and what the agent reports since does not say the
    card runs another function (it was reprogrammed or power-cycled)."""
    if not _same_text(deployable.get('bitstream_id'), _bitstream_id(image)):
        return False
    wanted = image['properties'].get('function_uuid')
    reported = (attributes or {}).get('function_uuid')
    if not wanted or not reported:
        return True
    wanted = bitstreams.uuid_hex(wanted) or wanted.strip().lower()
    return any((bitstreams.uuid_hex(f) or f.strip().lower()) == wanted
               for f in reported.split(','))


def _same_text(left, right):
    if not left or not right:
        return False
    return (bitstreams.uuid_hex(left) or left) == (
        bitstreams.uuid_hex(right) or right)


MIG = 'MIG'


def _handle_payload(handle):
    return {'uuid': handle['uuid'], 'attach_type': handle['attach_type'],
            'attach_info': handle['attach_info']}
