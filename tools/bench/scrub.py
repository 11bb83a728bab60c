"""Benchmark the scrub of released attach handles.

    python tools/bench/scrub.py [--scrubs 200] [--cycles 100]

1. Scrub durations per method, through the agent's RPC endpoint on
   oslo.messaging's in-process transport (what the conductor waits for),
   on stand-ins: ``fake`` (the fake FPGA, no work: the cost of the call
   and its bookkeeping), ``flr`` (a GPU passed through, on a recorded
   sysfs tree: the reset written by the privileged entry point, run in
   this process, then the PCI checks) and ``mdev-destroy`` (a vGPU's
   mdev, on the same tree: removal asked again, then the checks). p50,
   p99 and max in milliseconds. A real function-level reset takes the
   kernel 100 ms to 1 s more (the PCIe spec's wait after an FLR), which
   a tree cannot show. ``nvme-sanitize``: an Inspur NVMe controller
   passed through whole, on a written tree, with the tests' recording
   nvme-cli stand-in, which ends a sanitize at once: the identify, the
   sanitize and the log reads, each a run of the tool. A real crypto
   erase adds seconds, a block erase minutes.
2. A release-then-rebind cycle on SQLite with the API, conductor and
   agent in this process, the fake FPGA's provider (no Placement):
   delete the ARQ of an instance (its handle released), then create and
   bind the next instance's ARQ. Scrub off, the handle is free at once;
   scrub on (the fake FPGA's, which does no work), the cycle includes
   one pass of the conductor's scrubber, which makes the released handle
   free again. p50 and p99 of the cycle, and the difference: the time
   the scrub machinery adds to a reuse.
"""

import argparse
import contextlib
import dataclasses
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

import sqlalchemy as sa

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import nvme_scrub
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import scrub
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.accelerator.drivers.ssd import inspur_nvme
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import membership
from cyborg.conductor import scrubber as scrubber_module
from cyborg.db import models
from cyborg.db import session
from tests import arq_stack
from tests import db_servers
from tests import inventory_rows
from tests import privsep_rig
from tests.conftest import create_schema
from tests.conftest import make_conf
from tests.functional.conductor import test_scrub
from tests.unit.agent import conftest as agent_rig
from tests.unit.drivers import test_nvme_scrub as nvme_rig
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

RTX = '0000:5e:00.0'
VF = '0000:af:00.6'
A100_VGPU = {('gpu_devices', 'enabled_vgpu_types'): ['nvidia-472'],
             ('vgpu_nvidia-472', 'device_addresses'): [
                 '0000:af:00.4', '0000:af:00.5', VF]}


def _ms(samples):
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return '%8.2f %8.2f %8.2f' % (statistics.median(ordered) * 1000,
                                  p99 * 1000, ordered[-1] * 1000)


def _served_agent(conf, drivers):
    """An agent endpoint on fake:// and its API client (ServedAgent)."""
    stack = contextlib.ExitStack()
    transport = rpc.get_transport(conf)
    manager = agent_manager.AgentManager(
        conf, drivers, conductor=None,
        candidates=[(agent_rig.HOST, 'bench')], glance=None)
    server = rpc.get_server(transport, rpc.AGENT_TOPIC, agent_rig.HOST,
                            [manager])
    server.start()
    stack.callback(transport.cleanup)
    stack.callback(server.wait)
    stack.callback(server.stop)
    return stack, agent_rpcapi.AgentAPI(transport, timeout=30)


def _handle_payload(handle, handle_uuid):
    return {'uuid': handle_uuid, 'attach_type': handle.attach_type,
            'attach_info': dict(handle.attach_info)}


def scrub_durations(scrubs):
    print('1. scrub durations (ms): method, p50, p99, max of the RPC call '
          '(in-process transport), then of the scrub on the host, n=%d'
          % scrubs)
    with tempfile.TemporaryDirectory() as directory:
        functions = [dataclasses.replace(f, driver='vfio-pci',
                                         reset_method='flr')
                     if f.bdf == RTX else f for f in hosts.HOSTS['gpu']]
        root = sysfs.build(str(pathlib.Path(directory) / 'gpu'), functions,
                           pci_ids=hosts.PCI_IDS)
        with privsep_rig.in_process(root):
            for method, options, address in (
                    ('fake', {('fake_driver', 'scrub'): 'pass'}, None),
                    (scrub.FLR, {}, RTX),
                    (scrub.MDEV_DESTROY, A100_VGPU, VF)):
                conf = agent_rig.agent_conf(options)
                if method == 'fake':
                    driver = fake.FakeDriver(conf, pci.PCIReader(root))
                else:
                    driver = nvidia.NvidiaGPUDriver(conf,
                                                    pci.PCIReader(root))
                _timed_scrubs(conf, driver, address, method, scrubs)
    nvme_durations(scrubs)


def _timed_scrubs(conf, driver, address, method, scrubs):
    """p50/p99/max of ``scrubs`` scrubs of the handle at ``address``
    through the agent's RPC endpoint, and of their time on the host."""
    handles = [h for device in driver.discover()
               for d in device.deployables for h in d.attach_handles
               if address is None or _address(h) == address]
    stack, api = _served_agent(conf, [driver])
    with stack:
        context = cyborg_context.admin_context(None)
        samples, on_host = [], []
        for _ in range(scrubs):
            payload = _handle_payload(handles[0], str(uuid.uuid4()))
            started = time.perf_counter()
            done = api.scrub_attach_handle(context, agent_rig.HOST,
                                           driver.name, payload, method, 60)
            samples.append(time.perf_counter() - started)
            on_host.append(done['seconds'])
    print('   %-14s %s   (on the host: %s)' % (method, _ms(samples),
                                                _ms(on_host)))


def nvme_durations(scrubs):
    with tempfile.TemporaryDirectory() as directory:
        directory = pathlib.Path(directory)
        root = nvme_rig.build_host(directory / 'host')
        stand_in = nvme_rig.StandInNvme(directory)
        stand_in.drive('nvme1', sanicap=nvme_scrub.SANICAP_CRYPTO, polls=0)
        bindir = directory / 'bin'
        bindir.mkdir()
        script = bindir / 'nvme'
        script.write_text(nvme_rig.STAND_IN % {
            'python': sys.executable, 'state': str(stand_in.state_file)})
        script.chmod(0o755)
        path = os.environ.get('PATH', '')
        os.environ['PATH'] = os.pathsep.join([str(bindir), '/usr/bin',
                                              '/bin'])
        try:
            with privsep_rig.in_process(root):
                conf = agent_rig.agent_conf({})
                driver = inspur_nvme.InspurNVMeSSDDriver(
                    conf, pci.PCIReader(root))
                _timed_scrubs(conf, driver, nvme_rig.WHOLE,
                              nvme_scrub.NVME_SANITIZE, scrubs)
        finally:
            os.environ['PATH'] = path


def _address(handle):
    info = handle.attach_info
    return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                            info['function'])


def reuse_cycles(cycles):
    print('2. release-then-rebind cycle on SQLite (ms): p50, p99, max, '
          'n=%d' % cycles)
    results = {}
    for behaviour in ('none', 'pass'):
        with tempfile.TemporaryDirectory() as directory:
            url = db_servers.create_database('sqlite',
                                             pathlib.Path(directory))
            create_schema(url)
            conf = make_conf(url)
            db = session.Database(conf)
            try:
                results[behaviour] = _cycles(conf, db, behaviour, cycles)
            finally:
                db.dispose()
    for behaviour, label in (('none', 'scrub off'), ('pass', 'scrub on')):
        print('   %-14s %s' % (label, _ms(results[behaviour])))
    print('   extra p50 with scrub: %.2f ms' % (
        (statistics.median(results['pass'])
         - statistics.median(results['none'])) * 1000))


class _NoPlacement:
    """The scrubber's host sync without a Placement: the cycle measures
    the database, the RPC and the scrub."""

    def sync_host(self, context, hostname, compute_node_names=None):
        return {'status': 'skipped'}


def _cycles(conf, db, behaviour, cycles):
    context = cyborg_context.admin_context(db)
    arq_stack.make_profile(context, 'one', test_scrub.ONE_FPGA)
    conf.set_override('host', test_scrub.HOST)
    conf.set_override('scrub', behaviour, group='fake_driver')
    driver = fake.FakeDriver(conf, None)
    sole = membership.SoleMembership(None)
    samples = []
    with arq_stack.fake_transport(conf) as transport:
        agent = agent_manager.AgentManager(
            conf, [driver], conductor=None,
            candidates=[(test_scrub.HOST, 'bench')], glance=None)
        inventory_rows.add_host(db.engine, test_scrub.HOST,
                                agent.discover().devices)
        with db.engine.begin() as connection:  # as a report stores it
            connection.execute(sa.update(models.Attribute).where(
                models.Attribute.key == 'scrub_method').values(
                origin='driver'))
        server = rpc.get_server(transport, rpc.AGENT_TOPIC,
                                test_scrub.HOST, [agent])
        server.start()
        agent_api = agent_rpcapi.AgentAPI(transport, timeout=30)
        scrubber = scrubber_module.Scrubber(conf, agent_api, None,
                                            _NoPlacement(), 'bench')
        try:
            with arq_stack.serving_conductor(
                    transport, db, arq_stack.binder(conf, agent_api)):
                api = arq_stack.webtest_app(conf, db, transport)
                rp = test_scrub._rp(db)
                arq = arq_stack.bind_one(api, 'one', rp,
                                         hostname=test_scrub.HOST)
                for _ in range(cycles):
                    started = time.perf_counter()
                    api.delete(arq_stack.ARQS + '/' + arq['uuid'],
                               status=204)
                    if behaviour != 'none':
                        scrubber.run_pass(context, sole)
                    arq = arq_stack.bind_one(api, 'one', rp,
                                             hostname=test_scrub.HOST)
                    samples.append(time.perf_counter() - started)
        finally:
            server.stop()
            server.wait()
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--scrubs', type=int, default=200)
    parser.add_argument('--cycles', type=int, default=100)
    args = parser.parse_args()
    scrub_durations(args.scrubs)
    reuse_cycles(args.cycles)


if __name__ == '__main__':
    main()
