"""The accelerator request stack in one process: the API (under WebTest or
served) and a real conductor, sharing oslo.messaging's in-process
transport (``fake://``).

The fake driver's deployable (16 TEST_PCI handles) is stored as the
conductor stores a host's report; binding it needs no agent, so the
conductor's agent is a ``NoAgent`` unless a test gives one.

Fixtures (bind them to names in a test module or a ``conftest.py``, as
below; a module may define its own of the same name instead)::

    from tests import arq_stack

    api = arq_stack.api
    conductor = arq_stack.conductor
    fpga_rp = arq_stack.fpga_rp
    profile = arq_stack.profile
    transport = arq_stack.transport

- ``transport``: the in-process transport, on ``conf``;
- ``conductor``: the conductor serving on it (yields its ``Binder``);
- ``api``: WebTest's app given ``transport``;
- ``fpga_rp``: the fake FPGA of ``HOST`` stored, its provider's uuid;
- ``profile``: the device profile ``PROFILE`` (three ARQs).

The helpers below build the same pieces for fixtures that differ (another
agent, Nova, Placement, host or profile).
"""

import contextlib
import threading
import time
import uuid

import pytest
import sqlalchemy as sa
import webtest

from cyborg import rpc
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.api import app as api_app
from cyborg.clients import nova as nova_client
from cyborg.conductor import binding
from cyborg.conductor import host_sync
from cyborg.conductor import manager
from cyborg.db import models
from cyborg.db.api import device_profiles
from tests import conductor_rpc
from tests import inventory_rows

ARQS = '/v2/accelerator_requests'
HOST = 'host1'
PROFILE = 'fpga-dp'
# Three ARQs: two of group 0, one of group 1.
FPGA_GROUPS = [{'resources:FPGA': '2', 'trait:CUSTOM_FAKE_DEVICE': 'required'},
               {'resources:FPGA': '1'}]
BIND_PATHS = ('/hostname', '/device_rp_uuid', '/instance_uuid')


class NoAgent:
    """The fake device needs no agent; a call here is a bug."""

    def __getattr__(self, name):
        raise AssertionError('the agent was asked to %s' % name)


class RecordingNova:
    """Takes the conductor's bind events as Nova would (all delivered)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.events = []

    def notify_bound(self, events, claim=None, window=None):
        # Claimed per instance right before "sending", as the real client.
        if claim is not None:
            by_instance = {}
            for e in events:
                by_instance.setdefault(e.instance_uuid, []).append(e)
            events = [e for instance, group in by_instance.items()
                      for e in claim(instance, group)]
        with self._lock:
            self.events.extend(events)
        return {e.instance_uuid: nova_client.Delivery(
            e.instance_uuid, delivered=True, attempts=1, status=200)
            for e in events}

    def seen(self):
        """``(instance, arq, ok)`` of each event so far, sorted."""
        with self._lock:
            return sorted((e.instance_uuid, e.arq_uuid, e.ok)
                          for e in self.events)

    def wait_for(self, count, timeout=10):
        """``seen()``, once there are ``count`` events: the conductor tells
        Nova just after it stored the result."""
        deadline = time.monotonic() + timeout
        while len(self.seen()) < count:
            assert time.monotonic() < deadline, self.seen()
            time.sleep(0.05)
        return self.seen()


# -- building blocks ---------------------------------------------------------

@contextlib.contextmanager
def fake_transport(conf):
    """``transport_url = fake://`` in ``conf``, and its transport."""
    conductor_rpc.use_fake_transport(conf)
    transport = rpc.get_transport(conf)
    try:
        yield transport
    finally:
        transport.cleanup()


@contextlib.contextmanager
def rabbit_transport(conf, url):
    """``transport_url = url`` (a RabbitMQ virtual host) in ``conf``, and
    its transport: the services' own driver, heartbeats and all."""
    conductor_rpc.use_fake_transport(conf)
    conf.set_override('transport_url', url)
    transport = rpc.get_transport(conf)
    try:
        yield transport
    finally:
        transport.cleanup()


def binder(conf, agent=None, **kwargs):
    """The conductor's ``Binder`` (owner ``conductor-1``); ``agent`` is a
    ``NoAgent`` unless given; ``kwargs`` go on (``nova``, ``glance``)."""
    return binding.Binder(conf, NoAgent() if agent is None else agent,
                          owner='conductor-1', **kwargs)


@contextlib.contextmanager
def serving_conductor(transport, db, binder=None, placement_client=None,
                      layout='per_device'):
    """The conductor's RPC endpoints on ``transport``: binds with
    ``binder`` (none: no binds), syncs ``placement_client`` (none: no
    Placement) in the provider ``layout``. Yields the
    ``ConductorManager``."""
    endpoint = manager.ConductorManager(
        host_sync.HostSync(placement_client, layout=layout), binder)
    with conductor_rpc.serving(transport, db, [endpoint]):
        yield endpoint


def webtest_app(conf, db, transport, notifier=None, **kwargs):
    """The app under WebTest, casting to the conductor on ``transport``
    and notifying with ``notifier`` (none: as ``conf`` says); ``kwargs``
    go to ``webtest.TestApp`` (``extra_environ``)."""
    return webtest.TestApp(api_app.build_app(conf, db, transport=transport,
                                             notifier=notifier), **kwargs)


@contextlib.contextmanager
def serving_with_agent(conf, db, host, drivers, agent_timeout=10,
                       agent_args=None, binder_args=None, notifier=None,
                       kept=None):
    """The API under WebTest, the conductor and the agent's endpoint of
    ``host`` (running ``drivers``) on one in-process transport; the
    conductor reaches the agent over RPC (``agent_timeout``).

    ``agent_args`` go to the ``AgentManager`` (``glance``,
    ``request_report``), ``binder_args`` to the ``Binder`` (``notifier``),
    ``notifier`` to the API; ``kept`` (a dict) gets the ``binder``.
    Yields the app.
    """
    with fake_transport(conf) as transport:
        agent = agent_manager.AgentManager(
            conf, drivers, conductor=None,
            candidates=[(host, 'the configured host')], **(agent_args or {}))
        agent_server = rpc.get_server(transport, rpc.AGENT_TOPIC, host,
                                      [agent])
        agent_server.start()
        try:
            the_binder = binder(
                conf, agent_rpcapi.AgentAPI(transport,
                                            timeout=agent_timeout),
                **(binder_args or {}))
            if kept is not None:
                kept['binder'] = the_binder
            with serving_conductor(transport, db, the_binder):
                yield webtest_app(conf, db, transport, notifier=notifier)
        finally:
            agent_server.stop()
            agent_server.wait()


def store_fake_fpga(db, host=HOST):
    """The fake driver's device on ``host``, as the conductor stores it."""
    device, = inventory_rows.add_host(db.engine, host,
                                      inventory_rows.fake_devices())
    return device


def deployable_rp(db, device, name='FakeDevice'):
    """The resource provider uuid of ``device``'s deployable ``name``."""
    with db.engine.connect() as conn:
        return conn.execute(sa.select(models.Deployable.rp_uuid).where(
            models.Deployable.uuid == device.deployables[name].uuid)
        ).scalar_one()


def make_profile(admin_context, name=PROFILE, groups=FPGA_GROUPS):
    device_profiles.create_profiles(admin_context, [
        {'uuid': str(uuid.uuid4()), 'name': name, 'description': None,
         'groups': groups}])
    return name


def bind_body(arqs, rp, instance, hostname=HOST):
    """The PATCH body binding ``arqs`` (ARQs or their uuids)."""
    return {(a['uuid'] if isinstance(a, dict) else a): [
        {'op': 'add', 'path': '/hostname', 'value': hostname},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
        {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
        for a in arqs}


def unbind_body(arqs):
    return {a['uuid']: [{'op': 'remove', 'path': p} for p in BIND_PATHS]
            for a in arqs}


def resolved_listing(api, instance, headers=None, timeout=10,
                     interval=0.02):
    """The 200 answer of ``GET ARQS?instance=..&bind_state=resolved``
    (WebTest), asked again while it is 423 (a bind still runs)."""
    deadline = time.monotonic() + timeout
    while True:
        got = api.get(ARQS, {'instance': instance, 'bind_state': 'resolved'},
                      headers=headers, expect_errors=True)
        if got.status_int != 423:
            assert got.status_int == 200, got.text
            return got
        assert time.monotonic() < deadline, 'still unresolved'
        time.sleep(interval)


def wait_resolved(api, instance, headers=None, timeout=10, interval=0.02):
    """The ARQs of ``instance``, once its binds are over."""
    return resolved_listing(api, instance, headers, timeout,
                            interval).json['arqs']


def bind_one(api, profile, rp, instance=None, hostname=HOST, timeout=10,
             interval=0.02):
    """One ARQ of ``profile`` created, bound to ``rp`` for ``instance``
    (a new one unless given) and resolved: the ARQ."""
    arq, = api.post_json(ARQS, {'device_profile_name': profile}).json['arqs']
    instance = instance or str(uuid.uuid4())
    api.patch_json(ARQS, bind_body([arq], rp, instance, hostname))
    return wait_resolved(api, instance, timeout=timeout,
                         interval=interval)[0]


def handles_in_use(db):
    """How many attach handles are in use."""
    with db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).where(
            models.AttachHandle.in_use == sa.true())).scalar_one()


# -- fixtures ----------------------------------------------------------------

@pytest.fixture
def transport(conf):
    """oslo.messaging's in-process transport, ``conf`` pointing at it."""
    with fake_transport(conf) as transport:
        yield transport


@pytest.fixture
def conductor(conf, db, transport):
    """The conductor on ``transport``, binding with no agent; its
    ``Binder``."""
    with serving_conductor(transport, db, binder(conf)) as endpoint:
        yield endpoint.binder


@pytest.fixture
def api(conf, db, transport):
    """The app under WebTest, casting to ``transport``."""
    return webtest_app(conf, db, transport)


@pytest.fixture
def fpga_rp(db):
    """The resource provider of the fake FPGA deployable of ``HOST``."""
    return deployable_rp(db, store_fake_fpga(db))


@pytest.fixture
def profile(admin_context):
    """The device profile ``PROFILE``: three ARQs of the fake FPGA."""
    return make_profile(admin_context)
