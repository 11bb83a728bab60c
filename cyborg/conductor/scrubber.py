"""Scrubbing released attach handles before anyone gets them again.

Every ``[scrub] interval`` seconds each conductor looks for dirty
handles on the hosts it owns (``cyborg.db.api.scrubs.due``): released
ones, those whose last scrub failed ``[scrub] retry_interval`` ago, and
those left ``scrubbing`` past their time by a conductor or agent that
died (at once for those it started itself before a restart). For
each it wins the compare-and-set to ``scrubbing``, asks the
host's agent to scrub and verify it (``scrub_attach_handle``, bounded by
the method's ``[scrub] timeouts``), and records the result:

- verified: the handle is free, its unit is offered in Placement again;
- failed, or no answer in time: the handle stays dirty, and the device
  is marked unhealthy through the health path (reason ``scrub failed
  at <step>: ...``): quarantined, its whole inventory reserved, a
  ``device.health_change`` notification sent. It stays quarantined until
  a later scrub of the handle passes. An ``attach_handle.scrub.error``
  notification names the handle, the step and why.

One handle at a time per conductor: the pass runs on its own thread.
"""

import logging
import time

import oslo_messaging as messaging

from cyborg import exception
from cyborg import service
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import health as device_states
from cyborg.accelerator.drivers.fpga import scrub as fpga_scrub
from cyborg.conf import scrub as scrub_conf
from cyborg.db import models
from cyborg.db.api import device_config_status as config_status_db
from cyborg.db.api import device_health as health_db
from cyborg.db.api import scrubs
from cyborg.notifications import emit
from cyborg.notifications import notifier as notifier_module

LOG = logging.getLogger(__name__)

# Seconds past its own timeout after which a scrub left ``scrubbing`` is
# taken over: the conductor that ran it stopped waiting by then.
TAKEOVER_GRACE = 30
# The agent RPC version that scrubs.
SCRUB_VERSION = '1.5'


class Scrubber:
    """The scrubs of one conductor.

    ``agent`` is the agents' RPC API, ``health`` the conductor's
    ``DeviceHealth`` (failures go through it), ``sync`` its ``HostSync``.
    """

    def __init__(self, conf, agent, health, sync, owner, metrics=None,
                 notifier=None):
        self.conf = conf
        self.agent = agent
        self.health = health
        self.sync = sync
        self.owner = owner
        self.metrics = metrics
        self.notifier = (notifier if notifier is not None
                         else notifier_module.DISABLED)
        # Whole seconds, as the database keeps scrub_started_at.
        self.started = models.utcnow()

    def _due_now(self, row, now):
        """A dirty handle is; a scrubbing one once its scrub's time and
        the grace are up, or at once if this conductor started it before
        it restarted: no thread of this process waits for it."""
        if row.state != scrubs.SCRUBBING or row.scrub_started_at is None:
            return True
        if (row.scrub_conductor == self.owner
                and row.scrub_started_at < self.started):
            return True
        age = (now - row.scrub_started_at).total_seconds()
        return age >= (scrub_conf.timeout_of(self.conf, row.method)
                       + TAKEOVER_GRACE)

    def run_pass(self, context, membership):
        """Scrub what is due on the hosts ``membership`` gives this
        conductor; returns ``{handle uuid: 'passed' | 'failed'}``."""
        if not self.agent.can_send_version(SCRUB_VERSION):
            # Agents new enough to report scrub methods, a cap that lets
            # none be asked to scrub: their dirty handles wait.
            LOG.warning('[upgrade_levels] agent keeps scrubs (agent RPC %s) '
                        'from being sent: dirty attach handles wait',
                        SCRUB_VERSION)
            return {}
        now = models.utcnow()
        due = scrubs.due(context, retry_after=self.conf.scrub.retry_interval,
                         now=now)
        results = {}
        for row in due:
            if not (membership.owns(row.hostname)
                    and self._due_now(row, now)):
                continue
            if not scrubs.start(context, row, self.owner):
                continue  # another conductor took it
            results[row.uuid] = self._scrub(context, row)
        return results

    def _scrub(self, context, row):
        timeout = scrub_conf.timeout_of(self.conf, row.method)
        handle = {'uuid': row.uuid, 'attach_type': row.attach_type,
                  'attach_info': row.attach_info}
        extra = {}
        if row.method == fpga_scrub.FPGA_BASE_IMAGE:
            # The agent keeps no configuration: the image to load again
            # comes from here (none: the agent fails the scrub, saying so).
            applied = config_status_db.applied_base_image(
                context, row.device_id) or {}
            extra['base_image'] = applied.get('bitstream_uuid')
            extra['clear_image'] = applied.get('clear_bitstream_uuid')
        started = time.monotonic()
        step = message = None
        try:
            answer = self.agent.scrub_attach_handle(
                context, row.hostname, row.driver_name, handle, row.method,
                timeout, **extra)
            seconds = float(answer['seconds'])
        except base.ScrubFailed as e:
            step, message = e.step, e.reason
        except messaging.MessagingTimeout:
            step, message = 'timeout', ('no answer from the agent of %s '
                                        'within %d s' % (row.hostname,
                                                         timeout))
        except (exception.CyborgError, messaging.MessagingException) as e:
            step, message = 'scrub', service.describe_error(e)
        passed = step is None
        if not passed:
            seconds = time.monotonic() - started
        recorded = scrubs.finish(context, row.id, self.owner, passed,
                                 round(seconds, 3), step, message)
        result = scrubs.PASSED if passed else scrubs.FAILED
        if self.metrics is not None:
            self.metrics.scrubbed(row.method, result, seconds)
        if not recorded:
            LOG.info('Attach handle %s: its scrub was taken over by another '
                     'conductor; this result (%s) is dropped', row.uuid,
                     result)
            return result
        if passed:
            LOG.info('Attach handle %s (%s) on %s scrubbed by %s in %.1f s',
                     row.uuid, row.attach_type, row.hostname, row.method,
                     seconds)
            self.sync.sync_host(context, row.hostname)
        else:
            self._quarantine(context, row, step, message)
            emit.scrub_failed(self.notifier, context, row, step, message,
                              round(seconds, 3))
        return result

    def _quarantine(self, context, row, step, message):
        reason = 'scrub failed at %s: %s' % (step, message)
        LOG.warning('Attach handle %s (%s) on %s: %s; device %s '
                    'quarantined, the handle stays dirty', row.uuid,
                    row.attach_type, row.hostname, reason, row.device_uuid)
        address = health_db.pci_address(row.cpid_info)
        if address is None:
            return
        self.health.record(context, row.hostname, {
            address: (device_states.UNHEALTHY,
                      reason[:health_db.MAX_REASON])})

