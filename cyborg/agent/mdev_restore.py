"""Putting back the mdevs (vGPUs) of Bound ARQs once the agent's host
restarted.

A host reboot removes every mediated device while their ARQs stay
Bound, and Nova starts the instances again expecting them. Before its
first inventory report the agent asks the conductor which Bound ARQs
hold an mdev on this host (``mdevs_of_host``) and has each driver that
makes mdevs (``restore_mdev``) make every one of them again with its
UUID (the handle's) and type on its parent function, under the handle's
lock: one still there (the agent restarted, the host did not) is kept.

One that cannot be made again (its type no longer offered, the kernel
refusing) is logged as an error and its GPU reported unhealthy in the
heartbeats (the driver's finding) until the ARQ is released: the
conductor quarantines it, with that reason. A conductor that does not
answer leaves the work to the next report.
"""

import threading

from oslo_log import log

from cyborg.accelerator.drivers import base
from cyborg.agent import restore_ask

LOG = log.getLogger(__name__)

MDEV = 'MDEV'


class MdevRestore:
    """The agent's restore of its mdevs, done once per process.

    ``lock_of(driver_name, attach_info)`` is the lock the agent's
    prepares and releases of that handle hold.
    """

    def __init__(self, host, drivers, conductor, context, lock_of,
                 timeout=None):
        self.host = host
        self.conductor = conductor
        self.context = context
        self.lock_of = lock_of
        self.timeout = timeout
        self._drivers = {d.name: d for d in drivers
                         if hasattr(d, 'restore_mdev')}
        self._lock = threading.Lock()
        self._pending = bool(self._drivers) and conductor is not None

    @property
    def pending(self):
        with self._lock:
            return self._pending

    def run(self, server=None):
        """Restore the host's mdevs unless done; True once done. Never
        raises: what fails is logged, and a conductor that did not
        answer is asked again at the next call."""
        if not self.pending:
            return True
        held = restore_ask.ask(
            lambda: self.conductor.mdevs_of_host(
                self.context, self.host, timeout=self.timeout,
                server=server), 'mdevs', self.timeout)
        if held is None:
            return False
        if held is restore_ask.CAPPED:
            held = []
        counts = {'kept': 0, 'made': 0, 'failed': 0}
        for arq in held:
            driver = self._drivers.get(arq['driver_name'])
            handle = arq['attach_handle']
            if driver is None or handle.get('attach_type') != MDEV:
                continue
            try:
                with self.lock_of(driver.name, handle['attach_info']):
                    done = driver.restore_mdev(handle['attach_info'],
                                               handle['uuid'])
            except base.DriverError as exc:
                counts['failed'] += 1
                LOG.error('Accelerator request %s: %s; its GPU is reported '
                          'unhealthy until the request is released',
                          arq['arq_uuid'], exc.message)
                continue
            counts[done] += 1
            if done == 'made':
                LOG.info('mdev %s of accelerator request %s made again '
                         'after the host restarted', handle['uuid'],
                         arq['arq_uuid'])
        if held:
            LOG.info('mdevs of Bound accelerator requests after the start: '
                     '%(kept)d there, %(made)d made again, %(failed)d '
                     'could not be', counts)
        with self._lock:
            self._pending = False
        return True
