"""Benchmark the agents' heartbeats: the conductor's SQL and CPU per
heartbeat at fleet scale, and the agent's CPU per heartbeat.

    python tools/bench/heartbeat.py [--hosts 1000] [--devices 8]
        [--rounds 3] [--quarantine-hosts 20] [--agent-beats 200]

1. The conductor, on MariaDB: a fresh database migrated to head
   (``tests/db_servers.py``), dropped at the end, holding ``--hosts``
   simulated hosts of ``--devices`` passthrough GPUs each (the report of
   ``tools/bench/inventory_report.py``, applied as their first reports).
   Each heartbeat is what the RPC server hands the conductor's endpoint
   (``ConductorManager.agent_heartbeat``): the agent's health and usage
   after a JSON round trip, as the message bus delivers them. Phases, one
   heartbeat per host each round, one host after another, as one conductor
   takes them:

   - first: the conductor has no digest (just started): it reads each
     host once, and writes the health of its devices (unknown -> healthy);
   - unchanged: ``--rounds`` rounds in which nothing changed;
   - restarted: a new conductor object (its memory empty), nothing changed;
   - one changed: one device of each host turns degraded (no quarantine,
     no Placement);
   - quarantine: on ``--quarantine-hosts`` hosts with compute nodes in a
     real Placement (openstack-placement's WSGI app on SQLite in this
     process) one device turns unhealthy: the device, its quarantine and
     the host's Placement sync (reserved = total on its provider).

   Per heartbeat: SQL statements (not BEGIN/COMMIT), CPU ms of this
   process (the conductor's work, and in the quarantine phase Placement's
   app too; the payloads are made before timing) and of MariaDB
   (``mariadbd``/``mysqld``), and wall ms.

2. The agent: ``AgentManager.heartbeat`` on the sysfs tree recorded on an
   H100 machine (``tests/unit/drivers/recorded/h100-vm``), with its NVML
   recording replayed through the real bindings and without NVML, the
   cast going to a stand-in that JSON-encodes it. CPU ms per heartbeat.

CPU per heartbeat hardly depends on what else runs on the machine; wall
times do.
"""

import argparse
import contextlib
import json
import logging
import os
import pathlib
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

import arqs as bench_arqs  # noqa: E402  (tools/bench)
import inventory_report  # noqa: E402  (tools/bench)
import pytest  # noqa: E402

from cyborg import context as cyborg_context  # noqa: E402
from cyborg.accelerator.drivers import pci  # noqa: E402
from cyborg.accelerator.drivers.gpu import nvidia  # noqa: E402
from cyborg.agent import manager as agent_manager  # noqa: E402
from cyborg.conductor import health as health_module  # noqa: E402
from cyborg.conductor import host_sync as host_sync_module  # noqa: E402
from cyborg.conductor import inventory as inventory_sync  # noqa: E402
from cyborg.conductor import manager as conductor_manager  # noqa: E402
from cyborg.db import migration  # noqa: E402
from cyborg.db import session  # noqa: E402
from cyborg.objects import inventory  # noqa: E402
from tests import conftest  # noqa: E402
from tests import db_servers  # noqa: E402
from tests import placement_service  # noqa: E402
from tests.unit.agent.conftest import agent_conf  # noqa: E402
from tests.unit.drivers import nvml_standin  # noqa: E402
from tests.unit.drivers.trees import recorded  # noqa: E402

VERSION = '1.0'
RPC_VERSION = '1.1'


def addresses(devices):
    """The PCI addresses of inventory_report's devices of a host."""
    return ['0000:%02x:%02x.0' % (0x10 + i // 32, i % 32)
            for i in range(devices)]


def heartbeat(states, observed_at):
    """The keywords of an agent's heartbeat cast, as the endpoint gets
    them: {address: state} -> health and usage."""
    payload = {
        'health': {a: {'state': s, 'reason': 'no problem seen'
                       if s == 'healthy' else 'bench fault'}
                   for a, s in states.items()},
        'usage': {a: {'gpu_util_percent': random.randint(0, 100),
                      'fb_used_bytes': random.randint(0, 2 ** 36),
                      'power_mw': random.randint(50000, 700000),
                      'temperature_c': random.randint(30, 80),
                      'observed_at': observed_at}
                  for a in states},
        'sent_at': observed_at}
    return json.loads(json.dumps(payload))


class Conductor:
    """The conductor's endpoint, as a fresh process has it."""

    def __init__(self, placement_client):
        self.sync = host_sync_module.HostSync(placement_client)
        self.manager = conductor_manager.ConductorManager(
            self.sync, health=health_module.DeviceHealth(self.sync))

    def beat(self, context, hostname, payload):
        self.manager.agent_heartbeat(context, hostname, VERSION,
                                     RPC_VERSION, **payload)


def measure(name, context, conductor, beats, statements, cpu):
    """Run ``beats`` [(hostname, payload)]; one line of figures."""
    statements.count = 0
    before = cpu.snapshot()
    wall = time.perf_counter()
    for hostname, payload in beats:
        conductor.beat(context, hostname, payload)
    wall = time.perf_counter() - wall
    used = cpu.since(before)
    count = len(beats)
    print('  %-22s %7d %8.2f %9.3f %9.3f %8.2f' % (
        name, count, statements.count / count, used['cond'] * 1000 / count,
        used['db'] * 1000 / count, wall * 1000 / count))


def conductor_bench(args):
    url = db_servers.create_database('mysql', tempfile.mkdtemp())
    migration.upgrade(url)
    db = session.Database(conftest.make_conf(url))
    placement_dir = tempfile.mkdtemp(prefix='bench-placement-')
    placement = placement_service.PlacementService(
        pathlib.Path(placement_dir)).start()
    try:
        context = cyborg_context.admin_context(db)
        hosts = ['node%04d.example.com' % i for i in range(args.hosts)]
        started = time.perf_counter()
        for hostname in hosts:
            inventory_sync.apply_host_inventory(
                context, inventory.HostInventory.from_dict(
                    inventory_report.host_report(hostname, args.devices)))
        print('  %d hosts x %d devices stored in %.1f s' % (
            args.hosts, args.devices, time.perf_counter() - started))
        quarantined = hosts[:args.quarantine_hosts]
        conductor = Conductor(placement.client())
        for hostname in quarantined:
            placement_service.create_compute_node(placement.adapter(),
                                                  hostname)
            conductor.sync.sync_host(context, hostname, [hostname])

        statements = inventory_report.Statements(*db.engines)
        cpu = bench_arqs.CpuMeter({
            'cond': lambda: [bench_arqs.psutil.Process()],
            'db': bench_arqs.processes_named(
                bench_arqs.DB_PROCESSES['mysql'])})
        devices = addresses(args.devices)
        healthy = dict.fromkeys(devices, 'healthy')

        def round_of(states_of, now):
            return [(h, heartbeat(states_of(h), now)) for h in hosts]

        print('  %-22s %7s %8s %9s %9s %8s' % (
            'heartbeats', 'count', 'SQL/hb', 'cond CPU', 'db CPU',
            'wall ms'))
        measure('first (no digest)', context, conductor,
                round_of(lambda h: healthy, time.time()), statements, cpu)
        measure('unchanged', context, conductor,
                [b for _ in range(args.rounds)
                 for b in round_of(lambda h: healthy, time.time())],
                statements, cpu)
        conductor = Conductor(placement.client())
        measure('restarted, unchanged', context, conductor,
                round_of(lambda h: healthy, time.time()), statements, cpu)
        degraded = dict(healthy, **{devices[-1]: 'degraded'})
        measure('one changed', context, conductor,
                round_of(lambda h: degraded, time.time()), statements, cpu)
        if quarantined:
            unhealthy = dict(degraded, **{devices[0]: 'unhealthy'})
            measure('quarantine + Placement', context, conductor,
                    [(h, heartbeat(unhealthy, time.time()))
                     for h in quarantined], statements, cpu)
        print('  cond CPU: this process, the conductor\'s endpoint (with '
              'the quarantine, Placement\'s app too, which runs here); db '
              'CPU: MariaDB; both in ms per heartbeat')
    finally:
        placement.stop()
        db.dispose()
        db_servers.drop_database(url)


class Swallowed:
    """The conductor client: the cast encoded, as the bus would send it."""

    def agent_heartbeat(self, context, host, version, rpc_version,
                        server=None, **extra):
        json.dumps(extra)


@contextlib.contextmanager
def recorded_h100(with_nvml):
    root = recorded.unpack('h100-vm', tempfile.mkdtemp(prefix='bench-h100-'))
    monkeypatch = pytest.MonkeyPatch()
    try:
        if with_nvml:
            nvml_standin.install(monkeypatch, nvml_standin.RecordedNVML(
                recorded.recording('h100-vm', 'nvml-record.jsonl')))
        else:
            monkeypatch.setitem(sys.modules, 'pynvml', None)
        yield root
    finally:
        monkeypatch.undo()


def agent_bench(args):
    print('  %-30s %7s %12s' % ('agent heartbeats', 'count', 'CPU ms/hb'))
    for with_nvml in (True, False):
        with recorded_h100(with_nvml) as root:
            conf = agent_conf()
            manager = agent_manager.AgentManager(
                conf, [nvidia.NvidiaGPUDriver(conf, pci.PCIReader(root))],
                Swallowed(), candidates=[(conf.host, 'configured')],
                glance=None)
            manager.discover()
            manager.heartbeat()  # the baselines
            before = time.process_time()
            for _ in range(args.agent_beats):
                assert manager.heartbeat()
            used = time.process_time() - before
            print('  %-30s %7d %12.3f' % (
                'H100 recorded, %s' % ('NVML recording' if with_nvml
                                       else 'no NVML'),
                args.agent_beats, used * 1000 / args.agent_beats))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--devices', type=int, default=8)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--quarantine-hosts', type=int, default=20)
    parser.add_argument('--agent-beats', type=int, default=200)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    # The conductor logs each change of health: thousands of lines here.
    logging.getLogger('cyborg').setLevel(logging.ERROR)
    print('Conductor, MariaDB (%d CPUs, load %.1f):' % (
        os.cpu_count(), os.getloadavg()[0]))
    conductor_bench(args)
    print('Agent:')
    agent_bench(args)


if __name__ == '__main__':
    main()
