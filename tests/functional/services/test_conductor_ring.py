"""Two conductor services and an agent in one process over the real
RabbitMQ (a virtual host of its own), the real Placement and one
database: a host's reports end at its owner on the ring, whoever takes
them from the topic, and when the owner stops heartbeating the other
conductor becomes the owner and gets the host's reports."""

# First: the threading backend, before oslo.messaging is imported.
from cyborg import service  # noqa: F401, I001

import datetime
import time

from oslo_messaging import opts as messaging_opts
import pytest

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.agent import manager as agent_manager
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import membership as membership_mod
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.db import session
from cyborg.db.api import services as services_db
from tests import db_servers
from tests.conftest import create_schema
from tests.conftest import make_conf
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

CONDUCTORS = ('ctl-a', 'ctl-b')
DOWN_AFTER = 4


@pytest.fixture
def database(tmp_path):
    url = db_servers.create_database('mysql', tmp_path)
    create_schema(url)
    yield url
    db_servers.drop_database(url)


def _conf(db_url, transport_url, host):
    conf = make_conf(db_url, host=host, heartbeat_interval=1,
                     service_down_time=DOWN_AFTER)
    for group, options in messaging_opts.list_opts():
        conf.register_opts(options, group=group)
    conf.set_override('transport_url', transport_url)
    conf.set_override('rpc_response_timeout', 5)
    return conf


def _wait(predicate, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'no %s within %s s' % (what,
                                                                   timeout)
        time.sleep(0.2)


def test_reports_end_at_the_ring_owner_and_move_with_it(
        database, vhost_url, placement, tmp_path):  # noqa: F811
    services = {}
    db = session.Database(_conf(database, vhost_url, 'test'))
    try:
        for host in CONDUCTORS:
            conf = _conf(database, vhost_url, host)
            services[host] = conductor_manager.ConductorService(
                conf, placement=placement.client(), nova=None, glance=None)
            services[host].start()
        context = cyborg_context.admin_context(db)
        ring = membership_mod.Membership(context, 'test', DOWN_AFTER)
        ring.refresh()
        assert ring.live == CONDUCTORS
        # A host of each conductor.
        hosts = {ring.owner_of(h): h for h in (
            'compute-%d' % i for i in range(50))}
        owner, other = CONDUCTORS
        host = hosts[owner]
        create_compute_node(placement.adapter(), host)

        agent_conf = _conf(database, vhost_url, host)
        transport = rpc.get_transport(agent_conf)
        agent = agent_manager.AgentManager(
            agent_conf, [], conductor_rpcapi.ConductorAPI(transport,
                                                          timeout=3),
            candidates=[(host, 'the configured host')], glance=None)

        # Reports to the topic: both conductors take turns, and the one
        # that does not own the host passes the report to the owner.
        for _ in range(4):
            agent.owner = None
            answer = agent.report_inventory()
            assert (answer['conductor'], answer['owner']) == (owner, owner)
        assert agent.owner == owner
        assert agent.report_inventory()['conductor'] == owner

        # The agent's heartbeat reaches a conductor, which records it.
        assert agent.heartbeat()
        _wait(lambda: services_db.live_hosts(
            context, services_db.AGENT, DOWN_AFTER) == [host],
            'agent heartbeat')

        # The owner stops heartbeating; its row is aged so that the other
        # conductor's next heartbeat sees it gone at once.
        moved = []
        services[other].ring_change_hooks.append(
            lambda joined, left: moved.append(left))
        services[owner].stop()
        table = models.Service.__table__
        with db.engine.begin() as connection:
            connection.execute(table.update().where(
                (table.c.host == owner)
                & (table.c.binary == services_db.CONDUCTOR)).values(
                last_seen_at=models.utcnow()
                - datetime.timedelta(seconds=DOWN_AFTER + 1)))
        _wait(lambda: {owner} in moved, 'ring change')
        assert services[other].membership.owner_of(host) == other

        # The agent still names the old owner: its call times out, it
        # reports to the topic and learns the new owner.
        answer = agent.report_inventory()
        assert (answer['conductor'], answer['owner']) == (other, other)
        assert agent.owner == other
        assert agent.report_inventory()['conductor'] == other
        transport.cleanup()
    finally:
        for service in services.values():
            service.stop()
        db.dispose()

