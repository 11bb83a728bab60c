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
the conductor that finished the binds. An event Nova did not get stays
pending; ``recover`` sends it again once it is older than ``[conductor]
nova_event_retry_after`` (claimed first, so that no two conductors send
it), fails binds that outlived ``[conductor] bind_timeout`` (their
conductor died) and finishes deletions left half done. Each recovery
pass first resumes this conductor's binds that no thread of the process
is running: those a crash or a reload cut short.
"""

import json
import threading
import time

from oslo_log import log

from cyborg import exception
from cyborg import service
from cyborg import states
from cyborg.conductor import bitstreams
from cyborg.db.api import arqs as db

LOG = log.getLogger(__name__)

class BindRefused(exception.Conflict):
    """Why a device cannot be bound or programmed now (an ARQ then ends
    BindFailed)."""

    code = 'cyborg.arq.bind_failed'


class ProgramRefused(BindRefused):
    """Why an operator's programming of a deployable is refused."""

    code = 'cyborg.deployable.program_refused'


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


def _same_host(a, b):
    # Nova may name the host by FQDN where the agent used the short name.
    return a == b or (a or '').split('.')[0] == (b or '').split('.')[0]


class Binder:
    """The conductor's part of the ARQ life cycle."""

    def __init__(self, conf, agent, nova=None, glance=None, owner=None,
                 membership=None):
        self.conf = conf
        self.membership = membership
        self.agent = agent
        self.nova = nova
        self.glance = glance
        self.owner = owner or conf.host
        self.stopping = threading.Event()

    # -- binding ---------------------------------------------------------

    def bind(self, context, arq_uuids):
        """Bind the BindStarted ARQs of ``arq_uuids`` (the API's cast)."""
        work = db.claim_binds(context, arq_uuids, self.owner)
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

    def stop(self):
        """The service is stopping: a bind that fails from now on is left
        BindStarted, for the next start to finish, instead of failed."""
        self.stopping.set()

    def _bind_all(self, context, work):
        mine = _IN_FLIGHT.enter([item['uuid'] for item in work])
        try:
            finished = [self._bind_one(context, item) for item in work
                        if item['uuid'] in mine]
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
            return None
        except Exception as exc:
            if self.stopping.is_set():
                LOG.info('ARQ %s: bind interrupted by the service stopping '
                         '(%s); left for the next start',
                         item['uuid'], service.describe_error(exc))
                return None
            ok = False
            reason = (exc.message if isinstance(exc, exception.CyborgError)
                      else service.describe_error(exc))
        won = db.finish_binding(context, item['id'], ok)
        if ok and won:
            LOG.info('ARQ %s bound to %s handle %s of %s in %.3f s',
                     item['uuid'], handle['attach_type'], handle['uuid'],
                     deployable['name'], time.monotonic() - started)
        elif ok and db.holds_handle(context, item['id'], handle['id']):
            # Another bind of this same ARQ finished first (two conductors
            # under one host name): the device is the ARQ's; keep it.
            LOG.warning('ARQ %s was bound twice; the other bind finished '
                        'first', item['uuid'])
        elif ok:
            # Unbound, deleted or failed by another conductor meanwhile:
            # undo what was done on the host.
            LOG.info('ARQ %s left BindStarted while being bound; releasing '
                     'its device', item['uuid'])
            self._release_quietly(context, item['hostname'],
                                  deployable['driver_name'], handle,
                                  item['uuid'])
        elif won:
            LOG.warning('ARQ %s of instance %s failed to bind: %s',
                        item['uuid'], item['instance_uuid'], reason)
        if not won:
            return None
        return (item['instance_uuid'], item['uuid'],
                states.BOUND if ok else states.BIND_FAILED)

    def _prepare(self, context, item):
        deployable = db.deployable_for_binding(context,
                                               item['device_rp_uuid'])
        if deployable is None:
            raise BindRefused('No deployable of this service has resource '
                              'provider %s.' % item['device_rp_uuid'])
        if not _same_host(deployable['hostname'], item['hostname']):
            raise BindRefused(
                'Resource provider %s is on host %s, not on %s.'
                % (item['device_rp_uuid'], deployable['hostname'],
                   item['hostname']))
        if deployable['device_status'] != 'enabled':
            raise BindRefused('The device of deployable %s is disabled.'
                              % deployable['name'])
        handle = db.allocate_attach_handle(context, item['id'],
                                           deployable['id'])
        if handle is None:
            raise BindRefused('Every attach handle of deployable %s on %s '
                              'is in use.' % (deployable['name'],
                                              deployable['hostname']))
        try:
            self._program_if_asked(context, item, deployable)
            if handle['attach_type'] in db.PREPARED_ON_HOST:
                self.agent.prepare_attach_handle(
                    context, deployable['hostname'],
                    deployable['driver_name'], _handle_payload(handle),
                    item['uuid'])
        except Exception:
            # finish_binding(ok=False) frees the handle in the database;
            # whatever the agent made of it goes too.
            if handle['attach_type'] in db.PREPARED_ON_HOST:
                self._release_quietly(context, deployable['hostname'],
                                      deployable['driver_name'], handle,
                                      item['uuid'])
            raise
        return handle, deployable

    def _program_if_asked(self, context, item, deployable):
        request = bitstreams.requested(item['group'])
        if request is None:
            return
        what = 'Device profile %s asks for a bitstream' % item['profile_name']
        self._check_programmable(deployable, what, BindRefused)
        attributes, _ = db.programming_facts(context, deployable['id'])
        facts = bitstreams.FPGAFacts.from_device(deployable, attributes)
        image = bitstreams.choose_bitstream(self.glance, request, facts)
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
        attributes, in_use = db.programming_facts(context, deployable['id'])
        if in_use:
            raise ProgramRefused(
                'Deployable %s has %d accelerators in use; programming it '
                'would pull them from under their instances.'
                % (deployable['name'], in_use))
        image = self.glance.get_bitstream(image_uuid)
        facts = bitstreams.FPGAFacts.from_device(deployable, attributes)
        reason = bitstreams.mismatch(image, facts)
        if reason:
            raise ProgramRefused(
                'Image %s does not fit deployable %s: it %s.'
                % (image_uuid, deployable['name'], reason))
        return self._program(context, deployable, image, 'the operator')

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
        db.record_bitstream(context, deployable['id'],
                            image['properties'].get('bs-uuid') or image['id'])
        return result

    def _release_quietly(self, context, host, driver_name, handle,
                         arq_uuid):
        if handle is None or handle['attach_type'] not in db.PREPARED_ON_HOST:
            return
        try:
            self.agent.release_attach_handle(context, host, driver_name,
                                             _handle_payload(handle),
                                             arq_uuid)
        except Exception as exc:
            LOG.warning('Could not release handle %s of ARQ %s on %s: %s',
                        handle['uuid'], arq_uuid, host,
                        service.describe_error(exc))

    # -- Nova ------------------------------------------------------------

    def notify(self, context, events):
        """Tell Nova of ``events``, (instance, arq uuid, state) of ARQs
        this conductor moved to Bound or BindFailed: one call per
        instance. What Nova got is no longer pending; the rest is sent
        again by a later recovery pass."""
        if not events:
            return
        if self.nova is None:
            # No compute service to tell (the single-machine mode).
            db.events_delivered(context, [arq for _, arq, _ in events])
            return
        from cyborg.clients import nova as nova_client
        results = self.nova.notify_bound(
            [nova_client.BoundEvent(instance, arq, state == states.BOUND)
             for instance, arq, state in events])
        delivered = [arq for instance, arq, _ in events
                     if _delivered(results.get(instance))]
        if delivered:
            db.events_delivered(context, delivered)

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
        db.unbind(context, arq_uuids)

    def finish_deleting(self, context, arq_uuids):
        """Release and remove ARQs that the API moved to Deleting."""
        failed = self._release_all(context, arq_uuids)
        done = [u for u in arq_uuids if u not in failed]
        db.finish_deleting(context, done)
        if failed:
            raise BindRefused('Could not release the devices of accelerator '
                              'requests %s; they stay Deleting and are '
                              'tried again later.' % ', '.join(sorted(failed)))

    def _release_all(self, context, arq_uuids):
        failed = set()
        for row in db.handles_of(context, uuids=arq_uuids):
            if row['attach_type'] not in db.PREPARED_ON_HOST:
                continue
            handle = {'uuid': row['handle_uuid'],
                      'attach_type': row['attach_type'],
                      'attach_info': row['attach_info']}
            try:
                self.agent.release_attach_handle(
                    context, row['hostname'], row['driver_name'], handle,
                    row['uuid'])
            except Exception as exc:
                LOG.warning('Could not release handle %s of ARQ %s on %s: '
                            '%s', handle['uuid'], row['uuid'],
                            row['hostname'], service.describe_error(exc))
                failed.add(row['uuid'])
        return failed

    # -- recovery --------------------------------------------------------

    def recover(self, context):
        """Fail binds whose conductor is gone, finish stale deletions and
        resend Nova's pending events. Safe on every conductor at once:
        each step is a compare-and-set."""
        conductor = self.conf.conductor
        failed = db.fail_stale_binds(context, conductor.bind_timeout)
        for arq in failed:
            LOG.warning('ARQ %s of instance %s: bind did not finish within '
                        '%d s; failed', arq['uuid'], arq['instance_uuid'],
                        conductor.bind_timeout)
        self.notify(context, [(a['instance_uuid'], a['uuid'],
                               states.BIND_FAILED) for a in failed])
        stale = db.stale_deletions(context, conductor.bind_timeout)
        if stale:
            try:
                self.finish_deleting(context, stale)
            except BindRefused as exc:
                LOG.warning('%s', exc.message)
        unsent = db.claim_events(context, db.stale_events(
            context, conductor.nova_event_retry_after))
        if unsent:
            LOG.info('Sending Nova %d events again', len(unsent))
            self.notify(context, unsent)


def _delivered(result):
    return result is not None and getattr(result, 'delivered', False)


def _handle_payload(handle):
    return {'uuid': handle['uuid'], 'attach_type': handle['attach_type'],
            'attach_info': handle['attach_info']}
