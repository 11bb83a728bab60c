"""Putting back the MIG instances of binds once the agent's host restarted.

A GPU listed in ``[gpu_devices] mig_on_demand_addresses`` gets its MIG
instances at bind; a host reboot loses them all while their ARQs stay
Bound. Before its first inventory report the agent therefore asks the
conductor which ARQs own an instance on this host
(``mig_instances_of_host``) and, for each such GPU, has its privileged
helper (``cyborg.privsep.mig.restore_mig_instances``), under the card's
lock:

- keep every instance still there as its ARQ recorded it (the agent
  restarted, the host did not);
- make again, at its recorded profile and start, each instance of a
  Bound ARQ that is gone; it gets new GPU and compute instance ids and a
  new MIG UUID, which the ARQ then keeps instead of the old ones
  (``record_mig_instance``, a compare-and-set on the ARQ still Bound with
  that handle and the old identity), so that its unbind destroys the
  right instance; an ARQ unbound meanwhile gets nothing, and the
  instance is destroyed again;
- leave the instances of ARQs being bound or released, and those this
  agent process made for binds since it started;
- destroy every other instance (each is logged first).

A bind's instance that cannot be made again (another instance sits at
its start) is logged as an error, and the GPU is reported unhealthy in
the heartbeats (the driver's finding) until that ARQ is released: the
conductor quarantines it.

A conductor that does not answer (or a database that is down) leaves the
work to the next report; so does a GPU whose NVML fails. Only the GPUs of
this host listed for MIG on demand are touched.
"""

import threading

from oslo_log import log

from cyborg import service
from cyborg.accelerator.drivers.gpu import mig_nvml
from cyborg.agent import restore_ask
from cyborg.objects import inventory

LOG = log.getLogger(__name__)

MIG = 'MIG'
# The ARQs whose instance is made again when gone: a Bound ARQ's VM
# expects it. Those in other states are being bound or released; their
# instance is left where it is, never made again.
RESTORED_STATE = 'Bound'


def on_demand_gpus(drivers):
    """{(driver, GPU address)} of the GPUs whose MIG instances the
    drivers make on demand (``mig_on_demand``, a driver's set of
    PCIAddress; drivers without one have none)."""
    return {(driver, address) for driver in drivers
            for address in getattr(driver, 'mig_on_demand', ())}


def _gpu_of(held):
    info = held['attach_handle']['attach_info']
    try:
        return inventory.PCIAddress(info['domain'], info['bus'],
                                    info['device'], info['function'])
    except (KeyError, TypeError):
        return None


class MIGRestore:
    """The agent's restore of its on-demand GPUs, done once per process.

    ``lock_of(driver_name, address)`` is the lock the agent's prepares
    and releases of that GPU's MIG handles hold: a restore holds it too,
    so that it never sees half a bind of this process.
    """

    def __init__(self, host, drivers, conductor, context, lock_of,
                 timeout=None):
        self.host = host
        self.conductor = conductor
        self.context = context
        self.lock_of = lock_of
        self.timeout = timeout
        self._left = on_demand_gpus(drivers)
        self._lock = threading.Lock()
        # {(driver name, GPU address): [identity]} made by this process's
        # binds while the restore is pending: never orphans.
        self._made_here = {}

    @property
    def pending(self):
        with self._lock:
            return bool(self._left)

    def made(self, driver_name, gpu, identity):
        """A bind of this process made ``identity`` on ``gpu``; called
        under ``lock_of`` the GPU."""
        with self._lock:
            if any(driver.name == driver_name and address == gpu
                   for driver, address in self._left):
                self._made_here.setdefault((driver_name, gpu), []).append(
                    dict(identity))

    def run(self, server=None):
        """Restore every GPU not restored yet; True once all are. Never
        raises: what fails is logged and tried again at the next call.
        ``server`` names the conductor to ask (the host's owner)."""
        with self._lock:
            left = sorted(self._left, key=lambda g: (g[0].name, str(g[1])))
        if not left:
            return True
        held = restore_ask.ask(
            lambda: self.conductor.mig_instances_of_host(
                self.context, self.host, timeout=self.timeout,
                server=server), 'MIG instances', self.timeout)
        if held is restore_ask.CAPPED:
            with self._lock:
                self._left.clear()
            return True
        if held is None:
            return False
        for driver, gpu in left:
            mine = [h for h in held if h['driver_name'] == driver.name
                    and _gpu_of(h) == gpu]
            try:
                with self.lock_of(driver.name, gpu):
                    done = self._restore(driver, gpu, mine, server)
            except Exception as exc:
                LOG.warning('cyborg-agent: cannot restore the MIG '
                            'instances of the GPU at %s: %s; trying again '
                            'at the next report', gpu,
                            service.describe_error(exc))
                continue
            if done:
                with self._lock:
                    self._left.discard((driver, gpu))
                    self._made_here.pop((driver.name, gpu), None)
        return not self.pending

    def _restore(self, driver, gpu, mine, server):
        """One GPU, under its lock; True when nothing is left to do."""
        wanted = [h for h in mine if h['state'] == RESTORED_STATE]
        with self._lock:
            spared = [h['attach_details'] for h in mine
                      if h['state'] != RESTORED_STATE]
            spared += self._made_here.get((driver.name, gpu), [])
        try:
            done = driver.restore_mig_instances(
                gpu, [h['attach_details'] for h in wanted], spared)
        except mig_nvml.MIGUnavailable as exc:
            if wanted:
                raise
            # No bind to put back, and no instance NVML could show.
            LOG.info('No MIG instance to restore on the GPU at %s: %s',
                     gpu, exc)
            return True
        for gone in done['destroyed']:
            LOG.info('Destroyed MIG instance %s at start %s (%s) on the GPU '
                     'at %s: no accelerator request owned it',
                     gone['mig_profile'], gone['start'], gone['mig_uuid'],
                     gpu)
        for kept in done['not_destroyed']:
            LOG.error('MIG instance %s at start %s on the GPU at %s is owned '
                      'by no accelerator request but could not be '
                      'destroyed: %s', kept['identity']['mig_profile'],
                      kept['identity']['start'], gpu, kept['reason'])
        by_uuid = {h['attach_details']['mig_uuid']: h for h in wanted}
        for failed in done['failed']:
            arq = by_uuid.get(failed['identity']['mig_uuid'])
            LOG.error('MIG instance %s at start %s of accelerator request %s '
                      'could not be made again on the GPU at %s after the '
                      'host restarted: %s; the GPU is reported unhealthy '
                      'until the request is released',
                      failed['identity']['mig_profile'],
                      failed['identity']['start'],
                      arq['arq_uuid'] if arq else '?', gpu, failed['reason'])
        complete = True
        for remade in done['made']:
            arq = by_uuid[remade['was']['mig_uuid']]
            complete &= self._record(driver, gpu, arq, remade['now'],
                                     server)
        if done['kept']:
            LOG.info('%d MIG instances of accelerator requests on the GPU '
                     'at %s are there as recorded', len(done['kept']), gpu)
        return complete

    def _record(self, driver, gpu, arq, now, server):
        """Have the ARQ keep the identity of its instance made again;
        False when the conductor did not say (tried again later: the
        instance is then an orphan, destroyed, and made anew)."""
        new = {name: str(now[name]) for name in now}
        try:
            kept = self.conductor.record_mig_instance(
                self.context, arq['arq_uuid'], arq['attach_handle']['uuid'],
                arq['attach_details'], new, timeout=self.timeout,
                server=server)
        except Exception as exc:
            LOG.warning('cyborg-agent: could not record the MIG instance '
                        '%s made again for accelerator request %s: %s; '
                        'trying again at the next report', new['mig_uuid'],
                        arq['arq_uuid'], service.describe_error(exc))
            return False
        if kept:
            LOG.info('MIG instance %s at start %s of accelerator request %s '
                     'made again on the GPU at %s: %s (was %s)',
                     new['mig_profile'], new['start'], arq['arq_uuid'], gpu,
                     new['mig_uuid'], arq['attach_details']['mig_uuid'])
            return True
        LOG.info('Accelerator request %s was released meanwhile: destroying '
                 'MIG instance %s made again for it on the GPU at %s',
                 arq['arq_uuid'], new['mig_uuid'], gpu)
        driver.destroy_mig_instance(gpu, new, arq['arq_uuid'])
        return True
