"""Health and usage of a discovered device, cheap enough to read every
few seconds.

An ``Observation`` is what a driver says about one device at one moment:
a state (``HEALTHY``, ``DEGRADED``, ``UNHEALTHY`` or ``UNKNOWN``), the
reason for it, and usage figures. It is made of ``Finding``s, each a state
with its reason; the observation takes the worst state and names the
reasons of the findings in that state. ``UNKNOWN`` ranks between healthy
and degraded: a device whose vendor library is missing is not known to be
healthy, but a device known to be broken is worse.

``PCIHealth`` is the PCI level that every driver of PCI devices shares. It
reads only the few files of one function, never rescans the bus:

- the function's directory: gone means the device left the bus;
- the ``driver`` link, compared with what the last discovery saw:
  unbound is unhealthy, rebound to a VFIO driver is how a device is given
  whole to a VM (healthy), rebound to anything else is degraded;
- ``aer_dev_fatal`` / ``aer_dev_nonfatal``: counters that grew since the
  previous observation (the first observation of a device is the
  baseline; what happened before the agent started is not judged);
- ``current_link_width`` / ``current_link_speed`` against their
  ``max_link_*``: a link trained narrower or slower than the device can
  go is degraded. Devices that lower their link speed themselves to save
  power (GPUs) are judged on width only.
- below the function, what some classes of device add: ``hwmon``
  temperatures against their critical and maximum limits, the state of
  an NVMe controller, of a QAT endpoint and of a network interface.
"""

import dataclasses
import glob
import os
import threading
import time

from cyborg.accelerator.drivers import pci

HEALTHY = 'healthy'
UNKNOWN = 'unknown'
DEGRADED = 'degraded'
UNHEALTHY = 'unhealthy'
STATES = (HEALTHY, UNKNOWN, DEGRADED, UNHEALTHY)  # from best to worst
_RANK = {state: rank for rank, state in enumerate(STATES)}

# Drivers that take a device away from its host driver to give it to a VM.
VFIO_DRIVERS = ('vfio-pci', 'nvgrace_gpu_vfio_pci', 'mlx5_vfio_pci',
                'pci-stub')


@dataclasses.dataclass(frozen=True)
class Finding:
    state: str
    reason: str


@dataclasses.dataclass
class Observation:
    """One device, as it was at ``observed_at`` (seconds since the epoch).

    ``address`` is the device's control path (its PCI address). ``usage``
    holds plain numbers and strings, and, for vGPUs, a list of per-instance
    dictionaries each with the time stamp of its own sample.
    """

    address: str
    state: str
    reason: str
    observed_at: float
    usage: dict = dataclasses.field(default_factory=dict)
    findings: tuple[Finding, ...] = ()

    @classmethod
    def of(cls, address, findings, usage=None, observed_at=None):
        findings = tuple(findings)
        state = worst(f.state for f in findings)
        reasons = [f.reason for f in findings if f.state == state]
        if not reasons:
            reasons = ['no problem seen']
        return cls(address=address, state=state,
                   reason='; '.join(reasons),
                   observed_at=(time.time() if observed_at is None
                                else observed_at),
                   usage=dict(usage or {}), findings=findings)

    def to_dict(self):
        return {'address': self.address, 'state': self.state,
                'reason': self.reason, 'observed_at': self.observed_at,
                'usage': self.usage,
                'findings': [dataclasses.asdict(f) for f in self.findings]}


def worst(states):
    return max(states, key=_RANK.__getitem__, default=HEALTHY)


# A sysfs file's text, None when it cannot be read: as discovery reads it.
_read = pci.PCIReader._read


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def parse_aer(text):
    """``aer_dev_*`` file -> {error name: count}."""
    counters = {}
    for line in (text or '').splitlines():
        name, _, value = line.rpartition(' ')
        count = _int(value)
        if name and count is not None:
            counters[name.strip()] = count
    return counters


def _link_speed(text):
    """'16.0 GT/s PCIe' -> 16.0; None for 'Unknown' or a missing file."""
    try:
        return float(text.split()[0])
    except (AttributeError, IndexError, ValueError):
        return None


# How the AER counters that grew are judged, and how they are named.
AER_FILES = (('aer_dev_fatal', UNHEALTHY, 'fatal'),
             ('aer_dev_nonfatal', DEGRADED, 'non-fatal'))


class PCIHealth:
    """The PCI-level health of the functions of one driver.

    It remembers, per function, the AER counters of the previous
    observation. ``reader`` is the ``pci.PCIReader`` the driver discovers
    with: the root of the tree and the kernel driver discovery saw.
    """

    def __init__(self, reader):
        self.reader = reader
        self._lock = threading.Lock()
        self._aer = {}  # address -> {file: {name: count}}

    def present(self, address):
        return _read(os.path.join(self.reader.function_dir(address),
                                  'vendor')) is not None

    def findings(self, address, judge_link_speed=True):
        """What the PCI level says about the function at ``address``."""
        base = self.reader.function_dir(address)
        if not self.present(address):
            with self._lock:
                self._aer.pop(str(address), None)
            return [Finding(UNHEALTHY, '%s is gone from the PCI bus'
                            % address)]
        found = [self._driver(address, base)]
        found += self._aer_findings(address, base)
        found += self._link(address, base, judge_link_speed)
        return [f for f in found if f]

    def kernel_driver(self, address):
        """The kernel driver bound to the function now, or None."""
        path = os.path.join(self.reader.function_dir(address), 'driver')
        try:
            return os.path.basename(os.readlink(path))
        except OSError:
            return None

    def _driver(self, address, base):
        now = self.kernel_driver(address)
        seen, before = self.reader.discovered_driver(address)
        if not seen or now == before:
            return None
        if now is None:
            return Finding(UNHEALTHY, 'kernel driver %s was unbound from %s'
                           % (before, address))
        if now in VFIO_DRIVERS:
            return Finding(HEALTHY, '%s is bound to %s, as for a VM'
                           % (address, now))
        return Finding(DEGRADED, 'kernel driver of %s changed from %s to %s'
                       % (address, before or 'none', now))

    def _aer_findings(self, address, base):
        current = {}
        for name, _, _ in AER_FILES:
            text = _read(os.path.join(base, name))
            if text is not None:
                current[name] = parse_aer(text)
        with self._lock:
            previous = self._aer.get(str(address))
            self._aer[str(address)] = current
        if previous is None:
            return []  # the baseline
        found = []
        for name, state, label in AER_FILES:
            before, now = previous.get(name, {}), current.get(name, {})
            grew = ['%s +%d' % (error, count - before.get(error, 0))
                    for error, count in sorted(now.items())
                    if count > before.get(error, 0)
                    and not error.startswith('TOTAL_')]
            if grew:
                found.append(Finding(state, 'PCIe AER %s errors on %s: %s'
                                     % (label, address, ', '.join(grew))))
        return found

    def _link(self, address, base, judge_speed):
        def attribute(name):
            return _read(os.path.join(base, name))
        found = []
        width, max_width = (_int(attribute('current_link_width')),
                            _int(attribute('max_link_width')))
        # A width of 0 is a link that is down, or a device powered off.
        if width is not None and max_width and width < max_width:
            found.append(Finding(DEGRADED, 'PCIe link of %s trained at x%d, '
                                 'below its maximum x%d'
                                 % (address, width, max_width)))
        speed, max_speed = (_link_speed(attribute('current_link_speed')),
                            _link_speed(attribute('max_link_speed')))
        if judge_speed and speed and max_speed and speed < max_speed:
            found.append(Finding(DEGRADED, 'PCIe link of %s trained at %s '
                                 'GT/s, below its maximum %s GT/s'
                                 % (address, speed, max_speed)))
        return found

    def link_usage(self, address):
        """The link as it is trained now, for the usage figures."""
        base = self.reader.function_dir(address)
        usage = {}
        speed = _link_speed(_read(os.path.join(base, 'current_link_speed')))
        width = _int(_read(os.path.join(base, 'current_link_width')))
        if speed:
            usage['pcie_link_gts'] = speed
        if width:
            usage['pcie_link_width'] = width
        return usage

    def class_extras(self, address):
        """(findings, usage) from what the class of device adds below the
        function: hwmon sensors, NVMe, QAT and network state."""
        base = self.reader.function_dir(address)
        found, usage = [], {}
        _hwmon(base, found, usage)
        _nvme(base, address, found, usage)
        _qat(base, address, found)
        _net(base, usage)
        return found, usage


def _hwmon(base, found, usage):
    """Temperatures of the hwmon devices of the function (NICs, amdgpu)
    and of its NVMe controllers."""
    pattern_dirs = (os.path.join(base, 'hwmon', 'hwmon*'),
                    os.path.join(base, 'nvme', 'nvme*', 'hwmon*'))
    for pattern in pattern_dirs:
        for hwmon in sorted(glob.glob(pattern)):
            for sensor in sorted(glob.glob(os.path.join(hwmon,
                                                        'temp*_input'))):
                prefix = sensor[:-len('input')]
                value = _int(_read(sensor))
                if value is None:
                    continue
                label = (_read(prefix + 'label')
                         or os.path.basename(prefix)[:-1])
                celsius = value / 1000
                usage.setdefault('temperature_c', celsius)
                usage['temperature_c'] = max(usage['temperature_c'],
                                             celsius)
                crit = _int(_read(prefix + 'crit'))
                high = _int(_read(prefix + 'max'))
                if crit and value >= crit:
                    found.append(Finding(UNHEALTHY, '%s at %g °C, at or '
                                         'above its critical %g °C'
                                         % (label, celsius, crit / 1000)))
                elif high and value >= high:
                    found.append(Finding(DEGRADED, '%s at %g °C, at or '
                                         'above its maximum %g °C'
                                         % (label, celsius, high / 1000)))


def _nvme(base, address, found, usage):
    for controller in sorted(glob.glob(os.path.join(base, 'nvme', 'nvme*'))):
        state = _read(os.path.join(controller, 'state'))
        if state is None:
            continue
        name = os.path.basename(controller)
        usage['nvme_state'] = state
        if state == 'dead':
            found.append(Finding(UNHEALTHY, 'NVMe controller %s of %s is '
                                 'dead' % (name, address)))
        elif state != 'live':
            found.append(Finding(DEGRADED, 'NVMe controller %s of %s is %s'
                                 % (name, address, state)))


def _qat(base, address, found):
    # qat_4xxx and later drivers: qat/state is "up" or "down".
    state = _read(os.path.join(base, 'qat', 'state'))
    if state is not None and state != 'up':
        found.append(Finding(DEGRADED, 'QAT endpoint %s is %s'
                             % (address, state)))


def _net(base, usage):
    for interface in sorted(glob.glob(os.path.join(base, 'net', '*'))):
        state = _read(os.path.join(interface, 'operstate'))
        if state is not None:
            usage.setdefault('net', {})[os.path.basename(interface)] = state
