"""The device configuration rollout: each selected device taken from
pending to applied, on the hosts this conductor owns on the ring.

A pass moves every row of an owned host as far as it can go now, the
hosts side by side (as many at once as may drain), the devices of one
host one after another:

- pending: the device already holds what is wanted (the policy was
  renamed or its priority changed): applied at once. Otherwise it starts
  to drain, unless ``[conductor] config_drain_hosts`` other hosts of its
  policy are draining or applying (``device_config_status.start_drain``).
- draining: its providers are fully reserved in Placement (the host is
  synced at once), and no new bind takes one of its handles; it waits
  until none of its attach handles is in use and Placement holds the
  reservation, then goes to applying. A device in use is never touched.
- applying: the host's agent runs the teardown playbook with what was
  applied and the setup playbook with what is wanted, discovers again
  and reports, and answers. An FPGA base image is loaded instead the
  way an operator's program call loads one (``Binder.apply_base_image``:
  under the card's programming reservation, the image checked first);
  while a program or bind holds the card it waits for the next pass.
  Applied releases the device; failed keeps it out of scheduling, with
  the failed task and its message, until the operator changes the
  policy (which makes it pending again). An agent that does not answer
  (killed, restarting) is asked again at the next pass: an applied
  setting is a no-op the second time.

A device whose policy was deleted with ``restore_on_delete`` is put
back as discovered the same way, with nothing wanted: drained, then the
agent runs the teardown playbook alone with the settings that were
applied, discovers again and reports. Restored, the device loses its
status row and is released (its policy's row goes with the last one);
failed, it stays out of scheduling until the policy is deleted again
(which retries) or a new policy wins the device.

Every move is a compare-and-set of the row: a policy changed meanwhile
(the row pending again) wins over a move decided before it.

A device found on an owned host after the policies were written (a card
added, a host enrolled) is given at the start of a pass to the policy
that wins it, as if the policy had been written after it: it becomes
pending. One whose settings do not fit it is left alone, with a warning
once per conductor process.
"""

import concurrent.futures
import dataclasses
import functools
import logging

import oslo_messaging as messaging

from cyborg import exception
from cyborg.conductor import binding
from cyborg.db.api import device_config_policies as policies_db
from cyborg.db.api import device_config_status as config_db
from cyborg.db.api import host_sync_states as states_db
from cyborg.device_config import base_image
from cyborg.device_config import kinds
from cyborg.notifications import emit

LOG = logging.getLogger(__name__)

_STATES = (config_db.PENDING, config_db.DRAINING, config_db.APPLYING)
# A failed task's message as stored and shown.
_MESSAGE_CHARS = 2000


class Rollout:
    """See the module's docstring. ``agent`` is an ``AgentAPI``;
    ``binder`` (the conductor's ``Binder``) programs FPGA base images."""

    def __init__(self, sync, agent, drain_hosts=1, notifier=None,
                 binder=None):
        self.sync = sync
        self.agent = agent
        self.binder = binder
        self.drain_hosts = drain_hosts
        self.notifier = notifier
        self._unfit = set()  # ids of found devices warned of as unfit

    def run_pass(self, context, membership=None):
        """Advance every row of the hosts ``membership`` owns (all of
        them without one), after selecting the devices found there."""
        self._select_found_devices(context, membership)
        self._forget_restored(context)
        with context.db.read_connection(context) as connection:
            hosts = [h for h in config_db.hosts_of(connection)
                     if membership is None or membership.owns(h)]
            work = config_db.work_of_hosts(connection, hosts, _STATES)
        by_host = {}
        for item in work:
            by_host.setdefault(item.hostname, []).append(item)
        if not by_host:
            return
        # Hosts side by side, as many as may drain at once; the devices
        # of one host one after another.
        workers = max(1, min(len(by_host), self.drain_hosts))
        with concurrent.futures.ThreadPoolExecutor(
                workers, thread_name_prefix='device-config') as pool:
            for future in [pool.submit(self._advance_host, context, items)
                           for items in by_host.values()]:
                future.result()

    def _select_found_devices(self, context, membership):
        with context.db.read_connection(context) as connection:
            hosts = [h for h in config_db.hosts_with_devices(connection)
                     if membership is None or membership.owns(h)]
        changes, unfit = policies_db.select_found_devices(
            context, hosts, skip=frozenset(self._unfit))
        for device, policy, why in unfit:
            self._unfit.add(device.id)
            LOG.warning('Device %s on %s: found after policy %s, whose '
                        'settings do not fit it; it is left as it is: %s',
                        device.uuid, device.hostname, policy.name, why)
        if changes:
            LOG.info('%d device(s) found after their policies were '
                     'written are now pending', len(changes))
            if self.notifier is not None:
                emit.config_status_changed(self.notifier, context, changes)

    def _forget_restored(self, context):
        """Delete the deleted policies left with nothing to restore (their
        last devices removed, or won by a new policy)."""
        with context.db.read_connection(context) as connection:
            done = config_db.restored_policies(connection)
        for policy_id in done:
            with context.db.writer(context) as session:
                config_db.forget_restored(session.connection(), policy_id)

    def _advance_host(self, context, items):
        for item in items:
            try:
                self.advance(context, item)
            except Exception:  # one device does not stop the others
                LOG.exception('Device %s on %s: the configuration rollout '
                              'failed at %s; the next pass tries again',
                              item.device_uuid, item.hostname, item.state)

    def advance(self, context, item):
        """Move ``item`` (a ``device_config_status.Work``) as far as it
        can go now."""
        if item.state == config_db.PENDING:
            item = self._start(context, item)
        if item is not None and item.state == config_db.DRAINING:
            item = self._drained(context, item)
        if item is not None and item.state == config_db.APPLYING:
            self._apply(context, item)

    def _move(self, context, item, to_state, **values):
        with context.db.writer(context) as session:
            moved = config_db.move(session.connection(), item, item.state,
                                   to_state, **values)
        if not moved:
            return None
        self._announce(context, item, to_state)
        return dataclasses.replace(item, state=to_state)

    def _start(self, context, item):
        if (not item.restoring
                and item.applied_settings == item.wanted_settings):
            self._move(context, item, config_db.APPLIED, failed_task=None,
                       message=None)
            return None
        with context.db.writer(context) as session:
            started = config_db.start_drain(session.connection(), item,
                                            self.drain_hosts)
        if not started:
            return None
        LOG.info('Device %s on %s: draining %s policy %s',
                 item.device_uuid, item.hostname,
                 'to put it back as discovered, for the deleted'
                 if item.restoring else 'for', item.policy_name)
        self._announce(context, item, config_db.DRAINING)
        self.sync.sync_host(context, item.hostname)
        return dataclasses.replace(item, state=config_db.DRAINING)

    def _drained(self, context, item):
        with context.db.read_connection(context) as connection:
            in_use = config_db.handles_in_use(connection, item.device_id)
        if in_use:
            LOG.info('Device %s on %s: %d attach handle(s) in use; its '
                     'configuration waits', item.device_uuid, item.hostname,
                     in_use)
            return None
        if not self._placement_reserves(context, item.hostname):
            return None
        return self._move(context, item, config_db.APPLYING)

    def _placement_reserves(self, context, hostname):
        """Whether Placement holds the host as the database wants it (the
        drain's reservation included), syncing it once if not."""
        for attempt in range(2):
            with context.db.read_connection(context) as connection:
                row = states_db.read(connection, hostname)
            if row is not None and states_db.in_sync(row):
                return True
            if attempt == 0:
                self.sync.sync_host(context, hostname)
        LOG.info('Host %s: Placement does not hold its drain yet; the '
                 'configuration waits', hostname)
        return False

    def _apply(self, context, item):
        if item.controlpath_info is None:
            self._move(context, item, config_db.FAILED,
                       failed_task='find the device',
                       message='The device has no PCI address to '
                               'configure.')
            return
        # Restoring: nothing wanted, the teardown alone.
        wanted = None if item.restoring else item.wanted_settings
        ask = functools.partial(
            self.agent.apply_device_config, context, item.hostname,
            item.controlpath_info, item.kind, item.applied_settings,
            wanted)
        try:
            if item.kind == kinds.FPGA_BASE_IMAGE and not item.restoring:
                result = self._load_base_image(context, item, ask)
            else:
                result = ask()
        except binding.CardBusy as exc:
            LOG.info('Device %s on %s: its base image waits: %s',
                     item.device_uuid, item.hostname, exc.message)
            return
        except messaging.MessagingTimeout:
            LOG.warning('Device %s on %s: its agent did not answer the '
                        'configuration in time; asking again at the next '
                        'pass', item.device_uuid, item.hostname)
            return
        except exception.CyborgError as exc:
            result = {'state': config_db.FAILED,
                      'failed_task': 'apply on %s' % item.hostname,
                      'message': str(exc)}
        if result.get('state') == config_db.APPLIED and item.restoring:
            moved = self._restored(context, item)
        elif result.get('state') == config_db.APPLIED:
            moved = self._move(context, item, config_db.APPLIED,
                               applied_settings=item.wanted_settings,
                               failed_task=None, message=None)
            LOG.info('Device %s on %s: %s applied (policy %s)',
                     item.device_uuid, item.hostname, item.kind,
                     item.policy_name)
        else:
            moved = self._move(
                context, item, config_db.FAILED,
                failed_task=(result.get('failed_task') or '')[:255] or None,
                message=(result.get('message') or '')[-_MESSAGE_CHARS:])
            LOG.warning('Device %s on %s: %s failed at %r: %s',
                        item.device_uuid, item.hostname, item.kind,
                        result.get('failed_task'), result.get('message'))
        if moved is not None:
            self.sync.sync_host(context, item.hostname)

    def _restored(self, context, item):
        with context.db.writer(context) as session:
            gone = config_db.finish_restore(session.connection(), item)
        if not gone:
            return None
        LOG.info('Device %s on %s: %s restored as discovered (policy %s '
                 'deleted)', item.device_uuid, item.hostname, item.kind,
                 item.policy_name)
        self._announce(context, item, None)
        return item

    def _load_base_image(self, context, item, ask):
        if self.binder is None:
            return base_image.failed(base_image.FIND_FPGA, 'This conductor '
                                     'does not program FPGAs.')
        return self.binder.apply_base_image(
            context, item.device_id, item.wanted_settings['bitstream_uuid'],
            ask)

    def _announce(self, context, item, state):
        if self.notifier is None:
            return
        emit.config_status_changed(self.notifier, context, [
            config_db.Change(device_uuid=item.device_uuid,
                             hostname=item.hostname,
                             policy_uuid=item.policy_uuid,
                             policy_name=item.policy_name,
                             old_state=item.state, state=state,
                             wanted_settings=None if item.restoring
                             else item.wanted_settings)])
