"""A vGPU accelerator request from the API to the mdev on the host.

API, conductor and the agent's endpoint share oslo.messaging's in-process
transport; the agent runs the NVIDIA driver over a recorded sysfs tree
whose vGPU types the configuration enables. Binding must create the
mediated device with the attach handle's UUID, unbinding and deleting
must remove it, and the handle must be free again afterwards.
"""

import contextlib
import datetime
import os
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg import rpc
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import binding
from cyborg.conf import gpu_devices
from cyborg.db import models
from cyborg.db.api import arqs as arq_db
from cyborg.privsep import mdev as privsep_mdev
from tests import arq_stack
from tests import inventory_rows
from tests.arq_stack import ARQS
from tests.arq_stack import handles_in_use
from tests.unit.agent.test_attach_handles import mdev_type_dir
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

HOST = 'compute1'
VGPU_TYPE = 'nvidia-472'
# The A100's three VFs hand out vGPUs of one type.
VF_ADDRESSES = ['0000:af:00.4', '0000:af:00.5', '0000:af:00.6']
ARQ = models.ExtendedAcceleratorRequest


@pytest.fixture
def gpu_root(tmp_path, privileged_on):
    """The GPU host's tree, which the agent's privileged calls write."""
    root = str(sysfs.build(str(tmp_path / 'gpu'), hosts.HOSTS['gpu'],
                           pci_ids=hosts.PCI_IDS))
    privileged_on(root)
    return root


def vgpu_driver(conf, db, gpu_root):
    """The NVIDIA driver of ``HOST``, handing out vGPUs of the recorded
    tree, with its inventory stored."""
    conf.set_override('host', HOST)
    conf.set_override('enabled_vgpu_types', [VGPU_TYPE],
                      group='gpu_devices')
    gpu_devices.register_dynamic_opts(conf)
    conf.set_override('device_addresses', VF_ADDRESSES,
                      group='vgpu_' + VGPU_TYPE)
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(gpu_root))
    inventory_rows.add_host(db.engine, HOST, driver.discover())
    return driver


@contextlib.contextmanager
def vgpu_stack(conf, db, gpu_root, **kwargs):
    """The API, the conductor and the agent of ``HOST``, whose NVIDIA
    driver hands out vGPUs of the recorded tree; ``kwargs`` go to
    ``arq_stack.serving_with_agent``. Yields the app."""
    driver = vgpu_driver(conf, db, gpu_root)
    with arq_stack.serving_with_agent(conf, db, HOST, [driver],
                                      agent_args={'glance': None},
                                      **kwargs) as api:
        yield api


@pytest.fixture
def stack(conf, db, gpu_root):
    with vgpu_stack(conf, db, gpu_root) as api:
        yield api


@pytest.fixture
def vgpu_rp(db):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(models.Deployable.rp_uuid).where(
            models.Deployable.resource_class == 'VGPU')).scalar_one()


@pytest.fixture
def profile(admin_context):
    return arq_stack.make_profile(admin_context, 'vgpu',
                                  [{'resources:VGPU': '1'}])


def bind(api, rp, instance):
    return arq_stack.bind_one(api, 'vgpu', rp, instance, HOST)


def mdev_created(gpu_root, bound):
    """The VF the handle names got the handle's UUID written to its
    ``create``; the kernel's answer, the mdev directory, is made here."""
    info = bound['attach_handle_info']
    parent = '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                              info['function'])
    with open(os.path.join(mdev_type_dir(gpu_root, parent, VGPU_TYPE),
                           'create')) as f:
        assert f.read() == bound['attach_handle_uuid']
    return sysfs.kernel_creates_mdev(gpu_root, parent, VGPU_TYPE)


def test_bind_creates_the_mdev_and_unbind_removes_it(stack, db, gpu_root,
                                                     vgpu_rp, profile):
    api = stack
    bound = bind(api, vgpu_rp, str(uuid.uuid4()))

    assert bound['state'] == 'Bound'
    assert bound['attach_handle_type'] == 'MDEV'
    assert bound['attach_handle_info']['asked_type'] == VGPU_TYPE
    mdev = mdev_created(gpu_root, bound)
    assert handles_in_use(db) == 1

    api.patch_json(ARQS + '/' + bound['uuid'], {bound['uuid']: [
        {'op': 'remove', 'path': '/hostname'}]})

    with open(os.path.join(mdev, 'remove')) as f:
        assert f.read() == '1'
    assert api.get(ARQS + '/' + bound['uuid']).json['state'] == 'Unbound'
    assert handles_in_use(db) == 0


def test_delete_by_instance_removes_the_mdev_and_the_request(
        stack, db, gpu_root, vgpu_rp, profile):
    api = stack
    instance = str(uuid.uuid4())
    bound = bind(api, vgpu_rp, instance)
    mdev = mdev_created(gpu_root, bound)

    assert api.delete(ARQS, {'instance': instance}).status_int == 204

    with open(os.path.join(mdev, 'remove')) as f:
        assert f.read() == '1'
    assert api.get(ARQS).json['arqs'] == []
    assert handles_in_use(db) == 0


def test_a_failed_mdev_creation_fails_the_bind_and_frees_the_handle(
        stack, db, gpu_root, vgpu_rp, profile):
    api = stack
    # The write is refused (here: a directory in place of the create
    # file).
    for address in VF_ADDRESSES:
        create = os.path.join(mdev_type_dir(gpu_root, address, VGPU_TYPE),
                              'create')
        os.remove(create)
        os.mkdir(create)

    failed = bind(api, vgpu_rp, str(uuid.uuid4()))

    assert failed['state'] == 'BindFailed'
    assert failed['attach_handle_type'] == ''
    assert handles_in_use(db) == 0


@pytest.fixture
def slow_release(monkeypatch):
    """The host takes 1.5 s to remove a mediated device."""
    removing = privsep_mdev.remove_mdev

    def slowly(uuid, *args):
        time.sleep(1.5)
        return removing(uuid, *args)

    monkeypatch.setattr(privsep_mdev, 'remove_mdev', slowly)


def _wait_for(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'gave up waiting'
        time.sleep(0.05)


def test_a_slow_unbind_answers_within_the_bound_and_finishes(
        stack, conf, db, gpu_root, vgpu_rp, profile, slow_release):
    conf.set_override('conductor_timeout', 0.5, group='api')
    api = stack
    bound = bind(api, vgpu_rp, str(uuid.uuid4()))
    mdev = mdev_created(gpu_root, bound)

    started = time.monotonic()
    response = api.patch_json(ARQS + '/' + bound['uuid'], {bound['uuid']: [
        {'op': 'remove', 'path': '/hostname'}]}, expect_errors=True)
    waited = time.monotonic() - started

    assert response.status_int == 503
    assert 'within 0.5 seconds' in response.json['error_message']
    assert waited < 1.4  # the bound, not the host's 1.5 s
    # The unbind goes on without the API worker and finishes.
    _wait_for(lambda: api.get(ARQS + '/' + bound['uuid']).json['state']
              == 'Unbound')
    with open(os.path.join(mdev, 'remove')) as f:
        assert f.read() == '1'
    assert handles_in_use(db) == 0


def test_a_slow_delete_answers_within_the_bound_and_finishes(
        stack, conf, db, gpu_root, vgpu_rp, profile, slow_release):
    conf.set_override('conductor_timeout', 0.5, group='api')
    api = stack
    instance = str(uuid.uuid4())
    bound = bind(api, vgpu_rp, instance)
    mdev_created(gpu_root, bound)

    started = time.monotonic()
    response = api.delete(ARQS, {'instance': instance})
    waited = time.monotonic() - started

    assert response.status_int == 204
    assert waited < 1.4
    _wait_for(lambda: api.get(ARQS).json['arqs'] == [])
    assert handles_in_use(db) == 0


# -- fencing: a late release removes only its own bind's mdev ---------------
#
# The conductor's real Binders and the agent's real endpoint on one
# in-process transport; ``kernel`` makes and removes the mdevs the agent
# asks for in the recorded tree. Each test holds one conductor's call at
# a chosen point, lets the handle pass to another ARQ meanwhile and then
# lets the held call go on.

@pytest.fixture
def kernel(monkeypatch, gpu_root):
    """The kernel's part: a UUID written to ``create`` becomes an mdev,
    ``1`` written to ``remove`` removes it."""
    creating = privsep_mdev.create_mdev
    removing = privsep_mdev.remove_mdev

    def create(pci_address, mdev_type, uuid):
        made = creating(pci_address, mdev_type, uuid)
        if made:
            sysfs.kernel_creates_mdev(gpu_root, pci_address, mdev_type)
        return made

    def remove(uuid, *args):
        mdev_dir = os.path.realpath(
            os.path.join(gpu_root, 'sys/bus/mdev/devices', uuid))
        removed = removing(uuid, *args)
        if removed:
            sysfs.kernel_removes_mdev(gpu_root, mdev_dir)
        return removed

    monkeypatch.setattr(privsep_mdev, 'create_mdev', create)
    monkeypatch.setattr(privsep_mdev, 'remove_mdev', remove)


def mdevs(gpu_root):
    return set(os.listdir(os.path.join(gpu_root, 'sys/bus/mdev/devices')))


class Hold:
    def __init__(self):
        self.reached = threading.Event()
        self.go = threading.Event()

    def wait(self):
        self.reached.set()
        assert self.go.wait(30), 'never let go'


class HeldAgent:
    """A conductor's agent API whose calls for chosen ARQs stop: a
    prepare once the agent has answered, a release before it is sent."""

    def __init__(self, api):
        self._api = api
        self._holds = {}

    def hold(self, method, arq_uuid):
        self._holds[(method, arq_uuid)] = Hold()
        return self._holds[(method, arq_uuid)]

    def prepare_attach_handle(self, context, host, driver_name, handle,
                              arq_uuid):
        self._api.prepare_attach_handle(context, host, driver_name, handle,
                                        arq_uuid)
        self._stop('prepare', arq_uuid)

    def release_attach_handle(self, context, host, driver_name, handle,
                              arq_uuid):
        self._stop('release', arq_uuid)
        self._api.release_attach_handle(context, host, driver_name, handle,
                                        arq_uuid)

    def _stop(self, method, arq_uuid):
        held = self._holds.pop((method, arq_uuid), None)
        if held is not None:
            held.wait()


@pytest.fixture
def conductors(conf, db, gpu_root, kernel):
    """Two conductors' Binders, reaching the agent of ``HOST`` over RPC."""
    driver = vgpu_driver(conf, db, gpu_root)
    with arq_stack.fake_transport(conf) as transport:
        agent = agent_manager.AgentManager(
            conf, [driver], conductor=None, glance=None,
            candidates=[(HOST, 'the configured host')])
        server = rpc.get_server(transport, rpc.AGENT_TOPIC, HOST, [agent])
        server.start()
        try:
            yield [binding.Binder(
                conf, HeldAgent(agent_rpcapi.AgentAPI(transport, timeout=10)),
                owner=name) for name in ('conductor-1', 'conductor-2')]
        finally:
            server.stop()
            server.wait()


def created(admin_context, project):
    """A new ARQ of the vGPU profile for ``project``; its uuid."""
    (arq,) = arq_db.create_arqs(admin_context, 'vgpu', project)
    return arq['uuid']


def started(admin_context, rp, project, arq_uuid=None):
    """The ARQ (a new one unless given) moved to BindStarted for a new
    instance, as the API does; its uuid."""
    arq_uuid = arq_uuid or created(admin_context, project)
    arq_db.start_binding(admin_context, {arq_uuid: {
        'hostname': HOST, 'device_rp_uuid': rp,
        'instance_uuid': str(uuid.uuid4())}})
    return arq_uuid


def in_a_thread(function, *args):
    thread = threading.Thread(target=function, args=args)
    thread.start()
    return thread


def handle_of(db, arq_uuid):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(ARQ.attach_handle_id).where(
            ARQ.uuid == arq_uuid)).scalar_one()


def only_free(db, handle_id):
    """Every other handle taken: the next bind gets ``handle_id``."""
    with db.engine.begin() as conn:
        conn.execute(sa.update(models.AttachHandle).where(
            models.AttachHandle.id != handle_id).values(in_use=True))


def bound_with_its_mdev(admin_context, db, gpu_root, arq_uuid, handle_id):
    """The ARQ is Bound to ``handle_id`` and the mdev that Nova is told
    of (``attach_handle_uuid``) exists."""
    arq = arq_db.get_arq(admin_context, arq_uuid)
    assert arq['state'] == 'Bound', arq
    assert handle_of(db, arq_uuid) == handle_id
    assert arq['attach_handle_uuid'] in mdevs(gpu_root), arq
    return arq['attach_handle_uuid']


def test_a_lost_bind_undoing_its_work_leaves_the_next_bind_its_mdev(
        conductors, admin_context, db, gpu_root, vgpu_rp, profile):
    binder, _ = conductors
    before = mdevs(gpu_root)
    x = started(admin_context, vgpu_rp, 'tenant-x')
    held = binder.agent.hold('prepare', x)
    x_bind = in_a_thread(binder.bind, admin_context, [x])
    assert held.reached.wait(30)
    # X's mdev exists; the conductor has not heard of it yet.
    (x_mdev,) = mdevs(gpu_root) - before
    handle = handle_of(db, x)
    only_free(db, handle)
    # Made before X goes: on SQLite, Y does not get X's id.
    y = created(admin_context, 'tenant-y')

    # X is deleted meanwhile: its mdev goes, its handle is free.
    assert arq_db.delete_arqs(admin_context, uuids=[x]) == ([], [x])
    binder.finish_deleting(admin_context, [x])
    assert mdevs(gpu_root) == before
    # Y, of another tenant, gets the same handle.
    started(admin_context, vgpu_rp, 'tenant-y', y)
    binder.bind(admin_context, [y])
    y_mdev = bound_with_its_mdev(admin_context, db, gpu_root, y, handle)

    # X's bind goes on, loses to the deletion and undoes what it did.
    held.go.set()
    x_bind.join(30)

    assert not x_bind.is_alive()
    assert bound_with_its_mdev(admin_context, db, gpu_root, y,
                               handle) == y_mdev
    assert mdevs(gpu_root) - before == {y_mdev}


def test_a_second_deletion_on_another_conductor_leaves_the_next_bind_its_mdev(
        conductors, admin_context, db, gpu_root, vgpu_rp, profile):
    first, second = conductors
    before = mdevs(gpu_root)
    x = started(admin_context, vgpu_rp, 'tenant-x')
    first.bind(admin_context, [x])
    handle = handle_of(db, x)
    bound_with_its_mdev(admin_context, db, gpu_root, x, handle)
    only_free(db, handle)
    assert arq_db.delete_arqs(admin_context, uuids=[x]) == ([], [x])

    # Both conductors finish the deletion (a recovery pass and the
    # API's cast); the second has read X's handle, its release is late.
    held = second.agent.hold('release', x)
    late = in_a_thread(second.finish_deleting, admin_context, [x])
    assert held.reached.wait(30)
    first.finish_deleting(admin_context, [x])
    assert mdevs(gpu_root) == before
    y = started(admin_context, vgpu_rp, 'tenant-y')
    first.bind(admin_context, [y])
    y_mdev = bound_with_its_mdev(admin_context, db, gpu_root, y, handle)

    held.go.set()
    late.join(30)

    assert not late.is_alive()
    assert bound_with_its_mdev(admin_context, db, gpu_root, y,
                               handle) == y_mdev
    assert mdevs(gpu_root) - before == {y_mdev}


def test_an_overdue_bind_that_goes_on_leaves_the_next_bind_its_mdev(
        conductors, admin_context, db, gpu_root, vgpu_rp, profile):
    binder, recovery = conductors
    before = mdevs(gpu_root)
    x = started(admin_context, vgpu_rp, 'tenant-x')
    held = binder.agent.hold('prepare', x)
    x_bind = in_a_thread(binder.bind, admin_context, [x])
    assert held.reached.wait(30)
    (x_mdev,) = mdevs(gpu_root) - before
    handle = handle_of(db, x)
    only_free(db, handle)

    # X's deadline passes while its bind thread still runs: recovery
    # fails it, which frees the handle in the database only.
    with db.engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid == x).values(
            bind_deadline=models.utcnow() - datetime.timedelta(seconds=5)))
    assert [a['uuid'] for a in recovery.fail_overdue(admin_context)] == [x]
    y = started(admin_context, vgpu_rp, 'tenant-y')
    recovery.bind(admin_context, [y])
    y_mdev = bound_with_its_mdev(admin_context, db, gpu_root, y, handle)

    held.go.set()
    x_bind.join(30)

    assert not x_bind.is_alive()
    assert bound_with_its_mdev(admin_context, db, gpu_root, y,
                               handle) == y_mdev
    # X's own mdev went with its undoing.
    assert mdevs(gpu_root) - before == {y_mdev}
    assert x_mdev != y_mdev


def test_a_lost_bind_whose_id_went_to_the_next_arq_leaves_it_its_mdev(
        conductors, admin_context, db, gpu_root, vgpu_rp, profile):
    """As above, Y made after X is gone: SQLite gives Y X's id, which the
    bind of X still goes by."""
    binder, _ = conductors
    before = mdevs(gpu_root)
    x = started(admin_context, vgpu_rp, 'tenant-x')
    held = binder.agent.hold('prepare', x)
    x_bind = in_a_thread(binder.bind, admin_context, [x])
    assert held.reached.wait(30)
    (x_mdev,) = mdevs(gpu_root) - before
    handle = handle_of(db, x)
    only_free(db, handle)
    assert arq_db.delete_arqs(admin_context, uuids=[x]) == ([], [x])
    binder.finish_deleting(admin_context, [x])
    y = started(admin_context, vgpu_rp, 'tenant-y')
    binder.bind(admin_context, [y])
    y_mdev = bound_with_its_mdev(admin_context, db, gpu_root, y, handle)

    held.go.set()
    x_bind.join(30)

    assert not x_bind.is_alive()
    assert bound_with_its_mdev(admin_context, db, gpu_root, y,
                               handle) == y_mdev
    assert mdevs(gpu_root) - before == {y_mdev}
