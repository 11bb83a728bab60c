"""Benchmark the agent's side of a heartbeat: observing every device.

    python tools/bench/agent_observe.py [--passes 2000] [--warmup 5]
        [--trees h100-vm,u50-golden,mixed]

One observation pass is what the agent does for a heartbeat: every
driver's ``observe()`` over the devices its ``discover()`` returned. Each
tree is discovered once with every registered driver, then observed
``--warmup`` passes (the first observation of a device is the baseline of
its counters) and ``--passes`` timed passes. Printed per tree: the
drivers that found something, the devices, and the CPU time of this
process per pass (mean, p50, p99, max, and the mean per device), with the
mean wall time beside it and how many devices the last pass found in each
health state (the fake driver, which no real host runs, is left out).
CPU time hardly changes when other work shares the cores; wall time
does.

The trees, all in the repository (``tests/unit/drivers``):

- ``h100-vm``: the sysfs tree recorded on a VM with one H100, its GPU
  answered by the NVML stand-in (``nvml_standin.py``) replaying the NVML
  recording made on that machine, one sample further at each pass;
- ``u50-golden``: the tree of an Alveo U50 in its golden image, written
  in the layout of the recordings (``recorded/README.rst``): the PCI
  level only;
- ``mixed``: the multi-device host of the driver tests (``trees/hosts.py``:
  GPUs with vGPUs, FPGAs, QAT, NICs, an NVMe drive, NPUs), written as a
  sysfs tree, with the driver options that make its devices offer
  something; its NVIDIA GPUs replay the H100's NVML recording too.

CPU time is user and system time (sysfs reads included). The NVML
stand-in is Python where libnvidia-ml is C: its own work counts in the
NVIDIA figures, and what a real NVML spends in the NVIDIA kernel driver
does not.

Needs the test requirements (``nvidia-ml-py`` for the NVML bindings) and
nothing outside the checkout; no database, no services.
"""

import argparse
import collections
import math
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

import pytest  # noqa: E402  (its MonkeyPatch installs the NVML stand-in)

from cyborg.accelerator.drivers import pci  # noqa: E402
from cyborg.objects import inventory  # noqa: E402
from tests.unit.drivers import nvml_standin  # noqa: E402
from tests.unit.drivers.conftest import make_driver_conf  # noqa: E402
from tests.unit.drivers.test_contract import driver_classes  # noqa: E402
from tests.unit.drivers.trees import hosts  # noqa: E402
from tests.unit.drivers.trees import recorded  # noqa: E402
from tests.unit.drivers.trees import sysfs  # noqa: E402

NVML_RECORDING = recorded.recording('h100-vm', 'nvml-record.jsonl')


def h100_vm(directory):
    return recorded.unpack('h100-vm', os.path.join(directory, 'h100-vm'))


def u50_golden(directory):
    return recorded.unpack('u50-golden',
                           os.path.join(directory, 'u50-golden'))


def mixed(directory):
    return sysfs.build(os.path.join(directory, 'mixed'),
                       hosts.HOSTS['mixed'], pci_ids=hosts.PCI_IDS)


# name -> (writes the tree below a directory and returns its root,
#          driver options)
TREES = {
    'h100-vm': (h100_vm, {}),
    'u50-golden': (u50_golden, {}),
    'mixed': (mixed, hosts.MIXED_OPTIONS),
}


class ReplayedNVML:
    """The NVML recording, one sample further at each ``step()``, from
    the first again after the last."""

    def __init__(self, library):
        self.library = library

    def step(self):
        if not self.library.step():
            self.library.index = 0


def discover(root, options):
    """[(driver, devices)] of the drivers that found something; the fake
    driver, which no real host runs, left out."""
    reader = pci.PCIReader(root)
    conf = make_driver_conf(options)
    found = []
    for name, driver_class in driver_classes().items():
        if name == 'fake_driver':
            continue
        driver = driver_class(conf, reader)
        devices = driver.discover()
        if devices:
            found.append((driver, devices))
    return found


def observation_pass(found):
    """(CPU seconds, wall seconds, observations) of one pass."""
    cpu, wall = time.process_time(), time.perf_counter()
    observations = [observation for driver, devices in found
                    for observation in driver.observe(devices)]
    return (time.process_time() - cpu, time.perf_counter() - wall,
            observations)


def percentile(values, fraction):
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def measure(name, passes, warmup, directory, monkeypatch):
    write_tree, options = TREES[name]
    root = write_tree(directory)
    library = nvml_standin.RecordedNVML(NVML_RECORDING)
    found = discover(root, options)
    for driver, devices in found:
        if driver.name == 'nvidia_gpu_driver':
            for device in devices:
                address = inventory.PCIAddress(**device.controlpath_info)
                library.add_gpu(str(address))
    nvml_standin.install(monkeypatch, library)
    replay = ReplayedNVML(library)
    devices = sum(len(d) for _, d in found)
    for _ in range(warmup):
        observation_pass(found)
        replay.step()
    cpu, wall = [], []
    for _ in range(passes):
        cpu_s, wall_s, observations = observation_pass(found)
        cpu.append(cpu_s * 1000)
        wall.append(wall_s * 1000)
        replay.step()
    # What the last pass judged, to show the figures are of real work.
    states = collections.Counter(o.state for o in observations)
    return {
        'tree': name,
        'drivers': ','.join(driver.name for driver, _ in found),
        'devices': devices,
        'mean': statistics.fmean(cpu),
        'p50': percentile(cpu, 0.50),
        'p99': percentile(cpu, 0.99),
        'max': max(cpu),
        'per_device': statistics.fmean(cpu) / max(devices, 1),
        'wall': statistics.fmean(wall),
        'states': ' '.join('%s:%d' % item for item in sorted(states.items())),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--passes', type=int, default=2000,
                        help='timed observation passes per tree (2000)')
    parser.add_argument('--warmup', type=int, default=5,
                        help='untimed passes first (5)')
    parser.add_argument('--trees', default=','.join(TREES),
                        help='comma-separated, of: %s' % ', '.join(TREES))
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.trees.split(',') if n.strip()]
    unknown = set(names) - set(TREES)
    if unknown or args.passes < 1 or args.warmup < 0:
        parser.error('unknown trees: %s' % ', '.join(sorted(unknown))
                     if unknown else '--passes >= 1 and --warmup >= 0')

    print('Agent CPU per observation pass (every driver\'s observe() over '
          'the devices of one discovery), %d passes after %d warm-up; '
          'Python %s' % (args.passes, args.warmup, sys.version.split()[0]))
    print('%-11s %7s %9s %8s %8s %8s %8s %10s  %s' % (
        'tree', 'devices', 'cpu mean', 'p50', 'p99', 'max', 'per dev',
        'wall mean', 'last pass'))
    drivers = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix='agent-observe-') as tmp, \
                pytest.MonkeyPatch.context() as monkeypatch:
            row = measure(name, args.passes, args.warmup, tmp, monkeypatch)
        print('%-11s %7d %9.3f %8.3f %8.3f %8.3f %8.3f %10.3f  %s' % (
            row['tree'], row['devices'], row['mean'], row['p50'],
            row['p99'], row['max'], row['per_device'], row['wall'],
            row['states']))
        drivers.append('%s: %s' % (row['tree'], row['drivers']))
    print('(milliseconds)')
    print('Drivers that found devices:')
    for line in drivers:
        print('  ' + line)
    return 0


if __name__ == '__main__':
    sys.exit(main())
