"""cyborg-agent and cyborg-conductor as processes: report, stop, restart,
and ride out their neighbours' outages.

See conftest.py for what each test runs against.
"""

import re
import signal
import time
import uuid

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg import service
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.clients import placement as placement_client
from cyborg.conductor import rpcapi as conductor_rpcapi
from tests import placement_service
from tests.functional.services.conftest import REPORT_INTERVAL
from tests.functional.services.conftest import nvme_deployable
from tests.functional.services.conftest import on_engine

FAKE = 'FakeDevice'
# SIGTERM to exit: a service must not hang on a neighbour or a thread.
# oslo.messaging's idle RabbitMQ listeners notice a stop within 5 s (their
# consume timeout); the agent has two (its server and its reply queue).
PROMPT_EXIT = 12
# An outage lasts at least a report's timeout ([agent] report_timeout)
# and a retry, and at most until the services have said what they wait for.
OUTAGE = 12
OUTAGE_LIMIT = 45
THREADS_ONLY = 'threads only: eventlet (not imported|imported but no hub ran)'


def rpc_transport(deployment):
    """A transport of the test itself, on the services' virtual host."""
    config = deployment.directory / 'test-client.conf'
    config.write_text(
        '[DEFAULT]\ntransport_url = rabbit://guest:guest@127.0.0.1:5672/%s\n'
        % deployment.vhost)
    conf = cfg.ConfigOpts()
    conf(['--config-file', str(config)], project='cyborg',
         default_config_files=[])
    return service.get_transport(conf)


def start_services(deployment):
    conductor = deployment.service('cyborg-conductor').start()
    agent = deployment.service('cyborg-agent').start()
    return conductor, agent


def stop_promptly(process):
    status, seconds = process.stop()
    assert status == 0, process.tail()
    assert seconds < PROMPT_EXIT, '%s took %.1f s to stop' % (
        process.name, seconds)
    assert re.search(THREADS_ONLY, process.log()), process.tail()


@on_engine('mysql')
def test_report_stop_and_restart(deployment):
    deployment.recorded.add_nvme(0x21)
    nvme = nvme_deployable(0x21)
    conductor, agent = start_services(deployment)

    # The compute node is named after the short host name only: the agent
    # tries its configured name first and says which name matched.
    labels = dict(agent_manager.name_candidates(deployment.host))
    found = agent.wait_for_log(
        r"Compute node resource provider \S+ found under '%s', (.+?) "
        r"\(names tried: '%s'" % (re.escape(deployment.compute_node_name),
                                  re.escape(deployment.host)))
    assert found.group(1) == labels[deployment.compute_node_name]

    providers = deployment.wait_until_converged({FAKE, nvme})
    assert providers['%s_%s' % (deployment.host, FAKE)][2] == {'FPGA': 16}
    assert providers['%s_%s' % (deployment.host, nvme)][2] == {
        'CUSTOM_PCI': 1}
    # Each provider carries the traits its driver reported, and ours.
    client = deployment.placement.client()
    for name, reported in deployment.db_traits().items():
        rp_uuid = providers['%s_%s' % (deployment.host, name)][0]
        assert client.get_traits(rp_uuid)[1] == {'OWNER_CYBORG', *reported}
    assert 'CUSTOM_FAKE_DEVICE' in deployment.db_traits()[FAKE]
    rows = deployment.db_deployables()

    # Both RPC servers answer on this test's virtual host.
    transport = rpc_transport(deployment)
    context = cyborg_context.admin_context(None)
    try:
        assert agent_rpcapi.AgentAPI(transport, timeout=10).ping(
            context, deployment.host) == {
                'host': deployment.host, 'version': agent_rpcapi.VERSION,
                'drivers': ['fake_driver', 'pci_driver']}
        answer = conductor_rpcapi.ConductorAPI(
            transport, timeout=10).set_device_status(
                context, rows[nvme][0], 'maintaining')
        assert answer['status'] == 'maintaining'
    finally:
        transport.cleanup()
    nvme_rp = providers['%s_%s' % (deployment.host, nvme)][0]
    assert client.get_inventories(nvme_rp)[1]['CUSTOM_PCI']['reserved'] == 1
    # The heartbeats have written the devices' health: a restart finds it
    # as it is and writes it no more.
    deployment.wait_until_observed()

    for process in (agent, conductor):
        stop_promptly(process)

    # A restart finds the same rows and providers and writes nothing, in
    # its first report or the ones after: every row (timestamps included)
    # is as it was, and so is every provider's generation, which
    # Placement bumps on any write.
    before = deployment.providers()
    snapshot = deployment.db_snapshot()
    log_start = agent.log_size()
    conductor.start()
    agent.start()
    first = agent.wait_for_log(r'Reported 2 devices to the conductor: (.*)',
                               since=log_start)
    assert "'changed': False" in first.group(1)
    time.sleep(3 * REPORT_INTERVAL)
    assert deployment.db_snapshot() == snapshot
    assert deployment.db_deployables() == rows
    assert deployment.providers() == before
    assert client.get_inventories(nvme_rp)[1]['CUSTOM_PCI']['reserved'] == 1

    # SIGHUP restarts the agent in place: it keeps reporting.
    log_start = agent.log_size()
    agent.process.send_signal(signal.SIGHUP)
    agent.wait_for_log(r'cyborg-agent started', since=log_start)
    deployment.recorded.add_nvme(0x31)
    second = nvme_deployable(0x31)
    providers = deployment.wait_until_converged({FAKE, nvme, second})

    # A drive pulled while Nova holds an allocation on it leaves the DB
    # (nothing of ours uses it) but its provider stays, fully reserved,
    # until the allocation is gone; then it goes too.
    second_rp = providers['%s_%s' % (deployment.host, second)][0]
    consumer = str(uuid.uuid4())
    placement_service.allocate(deployment.placement.adapter(), consumer,
                               second_rp, {'CUSTOM_PCI': 1})
    deployment.recorded.remove_nvme(0x31)
    deadline = time.monotonic() + 30
    while second in deployment.db_deployables():
        assert time.monotonic() < deadline, 'the pulled drive stayed'
        time.sleep(0.5)
    time.sleep(2 * REPORT_INTERVAL)
    kept = client.get_inventories(second_rp)[1]['CUSTOM_PCI']
    assert kept['reserved'] == kept['total'] == 1
    deployment.placement.adapter().delete(
        '/allocations/%s' % consumer,
        microversion=placement_client.MICROVERSION)
    deployment.wait_until_converged({FAKE, nvme})

    for process in (agent, conductor):
        stop_promptly(process)


# The database is the only neighbour whose behaviour depends on the
# engine; RabbitMQ and Placement outages run once, to keep the time down.
OUTAGES = {'mysql': ('rabbit', 'database', 'placement'),
           'postgresql': ('database',)}


def test_neighbours_down_at_start_and_while_running(deployment):
    gates = deployment.gates
    for gate in gates.values():
        gate.close()
    conductor, agent = start_services(deployment)

    # Down at start: each service waits, says for what, and goes on once
    # its neighbours answer.
    conductor.wait_for_log(r'cyborg-conductor: waiting for the database')
    agent.wait_for_log(r'cyborg-agent: waiting for RabbitMQ at %s'
                       % re.escape(gates['rabbit'].address))
    gates['database'].open()
    conductor.wait_for_log(r'cyborg-conductor: waiting for RabbitMQ')
    time.sleep(2)
    assert conductor.alive and agent.alive
    gates['rabbit'].open()
    # Placement is not waited for: the conductor serves RPC (binds,
    # reports) without it and syncs it once it answers.
    conductor.wait_for_log(r'cyborg-conductor started')
    agent.wait_for_log(r'cyborg-agent started')
    conductor.wait_for_log(r'Placement unreachable, will retry')
    assert 'waiting for Placement' not in conductor.log()
    gates['placement'].open()
    expected = {FAKE}
    deployment.wait_until_converged(expected)

    # Down while running: a device added meanwhile shows up afterwards.
    waiting = {
        'rabbit': [(agent, r'waiting for RabbitMQ at %s|the report failed'
                    % re.escape(gates['rabbit'].address)),
                   (conductor, r'AMQP server on %s is unreachable'
                    % re.escape(gates['rabbit'].address))],
        'database': [(conductor, r'cyborg-conductor: waiting for the '
                      r'database: the report of host'),
                     (agent, r'the report failed: .*(DBConnectionError|'
                      r'OperationalError)')],
        'placement': [(conductor, r'Placement unreachable, will retry')],
    }
    # One new drive per outage; buses 0x10 apart leave room for the root
    # port below each.
    for index, name in enumerate(OUTAGES[deployment.engine_name]):
        bus = 0x41 + 0x10 * index
        since = {p.name: p.log_size() for p in (agent, conductor)}
        gates[name].close()
        deployment.recorded.add_nvme(bus)
        started = time.monotonic()
        unseen = list(waiting[name])
        # Until both have said what they wait for, and at least as long
        # as a report may take to time out, without either dying.
        while unseen or time.monotonic() < started + OUTAGE:
            assert conductor.alive, conductor.tail()
            assert agent.alive, agent.tail()
            assert time.monotonic() < started + OUTAGE_LIMIT, (
                'not said during the %s outage: %s' % (name, unseen))
            unseen = [(process, pattern) for process, pattern in unseen
                      if not re.search(
                          pattern, process.log()[since[process.name]:])]
            time.sleep(1)
        gates[name].open()
        expected.add(nvme_deployable(bus))
        deployment.wait_until_converged(expected, timeout=30)

    # Neighbours down do not hold up a stop either.
    for gate in gates.values():
        gate.close()
    time.sleep(REPORT_INTERVAL + 1)
    for process in (agent, conductor):
        stop_promptly(process)

