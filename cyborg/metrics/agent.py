"""An agent's series, made at each scrape from what the agent knows last.

- ``cyborg_device_health``: every device of the last discovery, whatever
  its driver, and every device observed: one series per state
  (``healthy``, ``unknown``, ``degraded``, ``unhealthy``), 1 for the
  device's state and 0 for the others, so that a state change is one
  series going 0 -> 1 and ``== 1`` selects the devices in a state. A
  device discovered but not observed yet is ``unknown``. Labels:
  ``Hostname``, ``address`` (the control path, a PCI address for PCI
  devices), and when discovered ``driver``, ``device_type`` and
  ``vendor``.
- ``cyborg_device_observed_timestamp_seconds``: when each device was last
  observed, to tell stale figures.
- the GPU series of ``gpu.py`` for each GPU NVML identified.
- ``cyborg_device_binding``: 1 per accelerator request bound to a device
  (``instance_uuid``, ``project_id``), for joins.
- ``cyborg_mig_free_slices``: for each GPU whose MIG instances are made
  on demand, its free ``compute`` and ``memory`` slices and ``media``
  engines (``kind``), read from NVML at the scrape. Free slices are not
  what can be made: a fragmented card has free slices at no start a
  profile may take (the provider's traits say what can be made).

A device bound to instances carries ``instance_uuid`` and ``project_id``
on its series; a device shared by several (vGPUs of one GPU) carries
their sorted values joined by commas. The bindings come with the
conductor's answer to the last report; an older conductor sends none,
and the labels are absent.
"""

from prometheus_client import core

from cyborg.accelerator.drivers import health
from cyborg.metrics import gpu

# What ``mig_free_slices`` counts, in its order.
MIG_SLICE_KINDS = ('compute', 'memory', 'media')


def _binding_labels(bound):
    if not bound:
        return {}
    return {key: ','.join(sorted({str(b.get(key) or '') for b in bound}))
            for key in ('instance_uuid', 'project_id')}


def _discovered(device):
    found = {'device_type': device.type, 'vendor': device.vendor}
    drivers = sorted({d.driver_name for d in device.deployables
                      if d.driver_name})
    if drivers:
        found['driver'] = ','.join(drivers)
    return found


class AgentCollector:
    """A prometheus_client collector of one agent.

    ``source()`` returns the agent's ``AgentManager`` (None before it
    exists), read for ``last_inventory``, ``last_observations`` and
    ``bindings``.
    """

    def __init__(self, hostname, source):
        self.hostname = hostname
        self.source = source

    def describe(self):
        # Registering must not scrape: the agent may not be up yet.
        return []

    def collect(self):
        manager = self.source()
        if manager is None:
            return []
        observations = dict(getattr(manager, 'last_observations', None)
                            or {})
        snapshot = getattr(manager, 'last_inventory', None)
        bindings = dict(getattr(manager, 'bindings', None) or {})
        devices = {}  # address -> labels from the discovery
        for device in (snapshot.devices if snapshot is not None else ()):
            devices[device.address] = _discovered(device)
        for address in observations:
            devices.setdefault(address, {})
        state = core.GaugeMetricFamily(
            'cyborg_device_health', 'Health of each device as the agent '
            'last observed it: 1 for its state, 0 for the others.')
        observed = core.GaugeMetricFamily(
            'cyborg_device_observed_timestamp_seconds', 'When the agent '
            'last observed the device (seconds since the epoch).')
        bound = core.GaugeMetricFamily(
            'cyborg_device_binding', 'An accelerator request bound to the '
            'device: its instance and project.')
        gpus = []
        for address in sorted(devices):
            base = {'Hostname': self.hostname, 'address': address}
            by_instance = _binding_labels(bindings.get(address))
            labels = {**base, **devices[address], **by_instance}
            observation = observations.get(address)
            current = (observation.state if observation is not None
                       else health.UNKNOWN)
            for name in health.STATES:
                state.add_sample('cyborg_device_health',
                                 {**labels, 'state': name},
                                 1 if name == current else 0)
            if observation is None:
                continue
            observed.add_sample('cyborg_device_observed_timestamp_seconds',
                                labels, observation.observed_at)
            gpu_labels = gpu.labels(self.hostname, address,
                                    observation.usage)
            if gpu_labels is not None:
                gpus.append(({**gpu_labels, **by_instance},
                             observation.usage))
        for address in sorted(bindings):
            for binding in bindings[address] or ():
                bound.add_sample('cyborg_device_binding', {
                    'Hostname': self.hostname, 'address': address,
                    'instance_uuid': str(binding.get('instance_uuid') or ''),
                    'project_id': str(binding.get('project_id') or '')}, 1)
        return [state, observed, bound, *gpu.families(gpus),
                self._mig_free(manager)]

    def _mig_free(self, manager):
        family = core.GaugeMetricFamily(
            'cyborg_mig_free_slices', 'Free slices of a GPU whose MIG '
            'instances are made on demand, by kind (compute, memory, '
            'media), as NVML holds them now.')
        for driver in getattr(manager, 'drivers', None) or ():
            read = getattr(driver, 'mig_free_slices', None)
            if read is None:
                continue
            for address, counts in read().items():
                for kind, count in zip(MIG_SLICE_KINDS, counts, strict=True):
                    family.add_sample('cyborg_mig_free_slices', {
                        'Hostname': self.hostname, 'address': address,
                        'kind': kind}, count)
        return family
