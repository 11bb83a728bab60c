"""Applying again, once the agent's host restarted, the device
configuration that the host lost.

A reboot takes SR-IOV VFs back to none, drops driver bindings and
overrides and the vGPU type each VF held, and may bring an FPGA up on
its flash image, while the status rows still say applied. Before its
first inventory report, and before the mdevs and MIG instances of binds
are put back (they live on VFs that must exist first), the agent asks
the conductor what is applied on its host (``applied_configs_of_host``)
and reads what each of those devices holds now, read-only
(``device_state``; an FPGA's function from discovery). A device that
still holds its settings (the agent restarted, the host did not) is left
alone; one that does not is given them again the way the rollout gives
them (``device_config.apply`` with the applied settings: the setup
playbook, or the base image loaded), VF counts and driver bindings
before vGPU types.

One that cannot be given them again is logged as an error and reported
unhealthy in the heartbeats, with why, until the device's configuration
is applied again by the rollout: the conductor quarantines it. Kinds
without a reader of what the device holds (``mig_layout``, an operator's
``playbook``) are left to the operator. A conductor that does not answer
leaves the work to the next report; one pinned below the question
(``[upgrade_levels] conductor``) leaves it undone, logged as an error.
"""

import threading

from oslo_log import log

from cyborg.agent import restore_ask
from cyborg.device_config import kinds

LOG = log.getLogger(__name__)

# What is applied again, in this order on a host: the VFs a vGPU type
# lives on first.
ORDER = (kinds.SRIOV_VFS, kinds.DRIVER_BINDING, kinds.FPGA_BASE_IMAGE,
         kinds.VGPU_TYPE)


def holds(kind, settings, state):
    """Whether a function whose ``device_state.read`` is ``state`` still
    holds ``settings`` of ``kind`` (not FPGA base images)."""
    if state is None:
        return False
    if kind == kinds.SRIOV_VFS:
        return state.get('sriov_numvfs') == settings['num_vfs']
    if kind == kinds.DRIVER_BINDING:
        driver, override = state.get('driver'), state.get('driver_override')
        if settings['driver'] == 'own':
            return override is None and driver not in (None, 'vfio-pci')
        return driver == override == settings['driver']
    if kind == kinds.VGPU_TYPE:
        wanted = settings['mdev_type']
        if 'vf_vgpu_types' in state:
            # A reboot leaves every VF without a type.
            return wanted in state['vf_vgpu_types'].values()
        return wanted in state.get('mdev_types', ())
    raise ValueError(kind)


def failure(kind, settings, why):
    """The device's health reason when ``settings`` cannot be applied
    again."""
    return ('device configuration %s %s applied before the host restarted '
            'could not be applied again: %s' % (kind, settings, why))


class ConfigRestore:
    """The agent's restore of its applied device configuration, done once
    per process.

    ``restore(applied)`` takes one ``CONFIG_APPLIED`` item and answers
    'kept' (the device holds it), 'applied' (applied again), 'unknown'
    (cannot tell; left as it is), or raises ``Failed``.
    """

    def __init__(self, host, conductor, context, restore, timeout=None,
                 enabled=True):
        self.host = host
        self.conductor = conductor
        self.context = context
        self.restore = restore
        self.timeout = timeout
        self._lock = threading.Lock()
        self._pending = enabled and conductor is not None

    @property
    def pending(self):
        with self._lock:
            return self._pending

    def run(self, server=None):
        """Apply again what the host lost unless done; True once done.
        Never raises: what fails is logged, and a conductor that did not
        answer is asked again at the next call."""
        if not self.pending:
            return True
        applied = restore_ask.ask(
            lambda: self.conductor.applied_configs_of_host(
                self.context, self.host, timeout=self.timeout,
                server=server), 'device configuration', self.timeout)
        if applied is None:
            return False
        if applied is restore_ask.CAPPED:
            applied = []
        counts = dict.fromkeys(('kept', 'applied', 'unknown', 'failed'), 0)
        for item in sorted((a for a in applied if a['kind'] in ORDER),
                           key=lambda a: ORDER.index(a['kind'])):
            try:
                done = self.restore(item)
            except Failed as exc:
                counts['failed'] += 1
                LOG.error('Device %s: %s; it is reported unhealthy until '
                          'its configuration is applied again',
                          item['device_uuid'], exc)
                continue
            counts[done] += 1
            if done == 'applied':
                LOG.info('Device %s: %s settings %s applied again after '
                         'the host restarted', item['device_uuid'],
                         item['kind'], item['applied_settings'])
        if applied:
            LOG.info('Applied device configuration after the start: '
                     '%(kept)d held, %(applied)d applied again, %(failed)d '
                     'could not be, %(unknown)d could not be checked',
                     counts)
        with self._lock:
            self._pending = False
        return True


class Failed(Exception):
    """Settings that could not be applied again; the message says why,
    as the device's health reason."""
