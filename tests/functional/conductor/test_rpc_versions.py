"""A rolling upgrade over the real RabbitMQ, on each database engine.

An agent one release newer than its conductor (payload fields and an RPC
argument the conductor does not know, the client pinned with
``[upgrade_levels] conductor``), an agent one release older (no payload
versions, the 1.0 report without compute node names) and an agent pinned
to 1.0: the report reaches the database and Placement, and an
accelerator request binds to what was reported. The conductor is the
real one on a RabbitMQ virtual host of the test's own; "old" conductors
serve an older RPC target, as a conductor of that release does.
"""

import contextlib
import uuid

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.accelerator.drivers import fake
from cyborg.agent import manager as agent_manager
from cyborg.conductor import host_sync
from cyborg.conductor import manager
from cyborg.conductor import placement_sync
from cyborg.conductor import rpcapi
from cyborg.db import models
from cyborg.objects import inventory
from tests import arq_stack
from tests import conductor_rpc
from tests.functional.services.conftest import vhost_url  # noqa: F401
from tests.placement_service import create_compute_node

HOST = 'compute-upgrade'
ONE_FPGA = [{'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]


class PinnedConductor(manager.ConductorManager):
    """The endpoints of a conductor that serves RPC API ``version``."""

    def __init__(self, version, *args):
        super().__init__(*args)
        self.target = messaging.Target(version=version)


class NewerConductorAPI(rpcapi.ConductorAPI):
    """What an agent of a later release sends: each payload of a later
    1.x version with a field this release does not know, and an RPC
    argument it does not know either."""

    def report_host_inventory(self, context, inventory, compute_node_names):
        return self._prepare('report_host_inventory', '1.1').call(
            context, 'report_host_inventory', inventory=_newer(inventory),
            compute_node_names=list(compute_node_names),
            report_sequence=42)


def _newer(payload):
    """``payload`` as a later minor version writes it."""
    if isinstance(payload, list):
        return [_newer(p) for p in payload]
    if not isinstance(payload, dict) or 'version' not in payload:
        return payload  # a map of data (attach info, attributes)
    newer = {k: _newer(v) for k, v in payload.items()}
    newer.update(version='1.9', added_in_a_later_release={'x': [1, 2]})
    return newer


def _unversioned(payload, dropped=('parent', 'std_board_info')):
    """``payload`` as an agent from before payload versions wrote it,
    without optional fields it did not have."""
    if isinstance(payload, list):
        return [_unversioned(p, dropped) for p in payload]
    if not isinstance(payload, dict) or 'version' not in payload:
        return payload
    return {k: _unversioned(v, dropped) for k, v in payload.items()
            if k != 'version' and k not in dropped}


class Stack:
    """A conductor, an agent and the API on one virtual host."""

    def __init__(self, conf, db, placement, exit_stack):
        self.conf = conf
        self.db = db
        self.placement = placement
        self._exit = exit_stack
        self.context = cyborg_context.admin_context(db)
        # The agent and the API share one transport, the conductor has
        # its own, as separate processes would.
        self.transport = rpc.get_transport(conf)
        exit_stack.callback(self.transport.cleanup)
        self.api = arq_stack.webtest_app(conf, db, self.transport)
        create_compute_node(placement.adapter(), HOST)

    def serve_conductor(self, version):
        transport = rpc.get_transport(self.conf)
        self._exit.callback(transport.cleanup)
        endpoint = PinnedConductor(
            version, host_sync.HostSync(self.placement.client()),
            arq_stack.binder(self.conf))
        self._exit.enter_context(conductor_rpc.serving(
            transport, self.db, [endpoint]))

    def agent(self, conductor_api_class=rpcapi.ConductorAPI):
        """The fake driver's agent reporting through a client of
        ``conductor_api_class`` capped by ``[upgrade_levels]``."""
        conductor = conductor_api_class(
            self.transport, timeout=20,
            version_cap=self.conf.upgrade_levels.conductor)
        return agent_manager.AgentManager(
            self.conf, [fake.FakeDriver(self.conf, None)], conductor,
            candidates=[(HOST, 'the configured host')])

    def assert_bind_works(self, admin_context):
        name = 'one-fpga-%s' % uuid.uuid4().hex[:6]
        arq_stack.make_profile(admin_context, name, ONE_FPGA)
        provider = self.placement.client().find_provider_by_name(
            placement_sync.provider_name(HOST, fake.DEPLOYABLE_NAME))
        with self.db.engine.connect() as conn:
            rp = conn.execute(sa.select(models.Deployable.rp_uuid).where(
                models.Deployable.name == fake.DEPLOYABLE_NAME)).scalar_one()
        assert rp == provider['uuid']
        arq = arq_stack.bind_one(self.api, name, rp, hostname=HOST,
                                 timeout=20)
        assert arq['state'] == 'Bound', arq
        assert arq['attach_handle_type'] == 'TEST_PCI'
        assert arq_stack.handles_in_use(self.db) == 1


@pytest.fixture
def stack(conf, db, placement, vhost_url):  # noqa: F811
    conductor_rpc.use_fake_transport(conf, timeout=20)
    conf.set_override('transport_url', vhost_url)
    conf.set_override('host', HOST)
    with contextlib.ExitStack() as exit_stack:
        yield Stack(conf, db, placement, exit_stack)


def test_newer_agent_reports_to_a_pinned_older_conductor(stack,
                                                        admin_context):
    stack.conf.set_override('conductor', '1.3', group='upgrade_levels')
    stack.serve_conductor('1.3')
    agent = stack.agent(NewerConductorAPI)

    summary = agent.report_inventory()

    assert summary is not None, 'the report failed'
    assert summary['version'] == rpcapi.SUMMARY.version
    assert summary['changed'] is True
    assert summary['placement']['status'] == 'synced', summary
    stack.assert_bind_works(admin_context)


def test_old_agent_reports_to_a_new_conductor(stack, admin_context):
    stack.serve_conductor(rpcapi.VERSION)
    old_agent = rpc.get_client(stack.transport, rpc.CONDUCTOR_TOPIC, '1.0',
                               timeout=20)
    report = _unversioned(inventory.HostInventory(
        HOST, fake.FakeDriver(None, None).discover()).to_dict())
    assert 'version' not in report['devices'][0]['deployables'][0]

    summary = old_agent.prepare(version='1.0').call(
        stack.context, 'report_host_inventory', inventory=report)

    assert summary['changed'] is True
    # No names sent: the compute node was found under the host name.
    assert summary['placement']['compute_node'] == HOST, summary
    stack.assert_bind_works(admin_context)


def test_report_capped_at_1_0_reaches_a_1_0_conductor(stack, admin_context):
    stack.conf.set_override('conductor', '1.0', group='upgrade_levels')
    stack.serve_conductor('1.0')

    summary = stack.agent().report_inventory()

    assert summary is not None, 'the report failed'
    assert summary['placement']['compute_node'] == HOST, summary
    # Uncapped, the same report is a 1.1 message, which a 1.0 conductor
    # refuses: the cap is what made it pass.
    uncapped = rpcapi.ConductorAPI(stack.transport, timeout=20)
    with pytest.raises(messaging.RemoteError) as refused:
        uncapped.report_host_inventory(
            stack.context, inventory.HostInventory(HOST).to_dict(), [HOST])
    assert refused.value.exc_type == 'UnsupportedVersion'
    # What 1.0 does not have is refused before it is sent.
    capped = rpcapi.ConductorAPI(stack.transport, timeout=20,
                                 version_cap='1.0')
    with pytest.raises(rpc.VersionCapped) as capped_error:
        capped.bind_arqs(stack.context, [str(uuid.uuid4())])
    assert capped_error.value.message == (
        'bind_arqs needs conductor RPC API 1.2, but [upgrade_levels] '
        'conductor = 1.0 pins it lower; raise or remove the pin once every '
        'conductor runs a release that serves 1.2.')


def test_report_of_a_newer_major_is_refused(stack):
    stack.serve_conductor(rpcapi.VERSION)
    report = inventory.HostInventory(
        HOST, fake.FakeDriver(None, None).discover()).to_dict()
    report['devices'][0]['version'] = '2.0'

    with pytest.raises(messaging.RemoteError) as refused:
        rpcapi.ConductorAPI(stack.transport, timeout=20).report_host_inventory(
            stack.context, report, [HOST])

    assert refused.value.exc_type == 'PayloadVersionError'
    assert refused.value.value == (
        'The device payload of version 2.0 cannot be read by this service, '
        'which reads 1.x: upgrade this service to the sender\'s release.')
    with stack.db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(
            models.Device)).scalar_one() == 0
