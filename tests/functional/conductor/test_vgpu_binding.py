"""A vGPU accelerator request from the API to the mdev on the host.

API, conductor and the agent's endpoint share oslo.messaging's in-process
transport; the agent runs the NVIDIA driver over a recorded sysfs tree
whose vGPU types the configuration enables. Binding must create the
mediated device with the attach handle's UUID, unbinding and deleting
must remove it, and the handle must be free again afterwards.
"""

import contextlib
import os
import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.conf import gpu_devices
from cyborg.db import models
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


@pytest.fixture
def gpu_root(tmp_path, privileged_on):
    """The GPU host's tree, which the agent's privileged calls write."""
    root = str(sysfs.build(str(tmp_path / 'gpu'), hosts.HOSTS['gpu'],
                           pci_ids=hosts.PCI_IDS))
    privileged_on(root)
    return root


@contextlib.contextmanager
def vgpu_stack(conf, db, gpu_root, **kwargs):
    """The API, the conductor and the agent of ``HOST``, whose NVIDIA
    driver hands out vGPUs of the recorded tree; ``kwargs`` go to
    ``arq_stack.serving_with_agent``. Yields the app."""
    conf.set_override('host', HOST)
    conf.set_override('enabled_vgpu_types', [VGPU_TYPE],
                      group='gpu_devices')
    gpu_devices.register_dynamic_opts(conf)
    conf.set_override('device_addresses', VF_ADDRESSES,
                      group='vgpu_' + VGPU_TYPE)
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(gpu_root))
    inventory_rows.add_host(db.engine, HOST, driver.discover())
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

    def slowly(uuid):
        time.sleep(1.5)
        return removing(uuid)

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
