"""The mdevs of Bound ARQs put back when the agent starts after a host
reboot.

The stack of ``test_vgpu_binding`` (API, conductor and the agent's
endpoint on the in-process transport, the NVIDIA driver over the
recorded GPU host's tree, the privileged calls in the test process)
binds vGPUs; the test then plays the reboot (the kernel's mdevs are
gone) and starts a new agent whose conductor is the real conductor
endpoint on the same database. Its first report must find every mdev
made again, with its UUID, before the report is sent.
"""

import os
import shutil
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import manager as agent_manager
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from tests import arq_stack
from tests.functional.conductor.test_vgpu_binding import HOST
from tests.functional.conductor.test_vgpu_binding import VGPU_TYPE
from tests.functional.conductor.test_vgpu_binding import bind
from tests.functional.conductor.test_vgpu_binding import gpu_root  # noqa
from tests.functional.conductor.test_vgpu_binding import mdev_created
from tests.functional.conductor.test_vgpu_binding import vgpu_stack
from tests.unit.agent.test_attach_handles import mdev_type_dir
from tests.unit.drivers.trees import sysfs

A100 = '0000:af:00.0'


class Conductor:
    """What the agent asks of its conductor at start: the real endpoint's
    answers, loaded as the RPC client loads them; each report is kept
    with what the host's mdev types held when it came."""

    def __init__(self, db, root):
        self.endpoint = conductor_manager.ConductorManager(None, None)
        self.context = cyborg_context.admin_context(db)
        self.root = root
        self.reports = []

    def mdevs_of_host(self, context, host, timeout=None, server=None):
        return [conductor_rpcapi.MDEV_HELD.load(held) for held in
                self.endpoint.mdevs_of_host(self.context, host)]

    def mig_instances_of_host(self, context, host, timeout=None,
                              server=None):
        return []

    def applied_configs_of_host(self, context, host, timeout=None,
                                server=None):
        return []

    def report_host_inventory(self, context, inventory, names, **kwargs):
        self.reports.append(_created(self.root))
        return {'changed': False}


def _created(root):
    """{VF: what was last written to its create file}."""
    found = {}
    for vf in ('0000:af:00.4', '0000:af:00.5', '0000:af:00.6'):
        create = os.path.join(mdev_type_dir(root, vf, VGPU_TYPE), 'create')
        if os.path.exists(create):  # the VF may offer the type no more
            with open(create) as f:
                found[vf] = f.read()
    return found


def _reboot(root, mdevs):
    """The host restarts: the kernel's mdevs are gone, and nothing was
    written to a create file since."""
    for mdev in mdevs:
        vf = os.path.basename(os.path.dirname(mdev))
        sysfs.kernel_removes_mdev(root, mdev)
        _count_available(root, vf, +1)
    for vf in _created(root):
        open(os.path.join(mdev_type_dir(root, vf, VGPU_TYPE), 'create'),
             'w').close()


def _agent(conf, db, root):
    conductor = Conductor(db, root)
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(root))
    agent = agent_manager.AgentManager(
        conf, [driver], conductor=conductor,
        candidates=[(HOST, 'the configured host')], glance=None)
    return agent, driver, conductor


@pytest.fixture
def two_bound(conf, db, gpu_root, admin_context):  # noqa: F811
    """Two vGPUs bound, their mdevs made: (bound ARQs, mdev dirs)."""
    arq_stack.make_profile(admin_context, 'vgpu', [{'resources:VGPU': '1'}])
    with vgpu_stack(conf, db, gpu_root) as api:
        with db.engine.connect() as connection:
            rp = connection.execute(sa.select(models.Deployable.rp_uuid).where(
                models.Deployable.resource_class == 'VGPU')).scalar_one()
        arqs, mdevs = [], []
        for _ in range(2):
            bound = bind(api, rp, str(uuid.uuid4()))
            arqs.append(bound)
            mdevs.append(mdev_created(gpu_root, bound))
            _count_available(gpu_root, _vf(bound), -1)
    return arqs, mdevs


def _count_available(root, vf, change):
    """The kernel's count of the instances the VF's type still offers."""
    path = os.path.join(mdev_type_dir(root, vf, VGPU_TYPE),
                        'available_instances')
    with open(path) as f:
        count = int(f.read())
    with open(path, 'w') as f:
        f.write(str(count + change))


def _vf(bound):
    info = bound['attach_handle_info']
    return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                            info['function'])


def test_a_reboot_gets_each_bound_mdev_back_before_the_first_report(
        conf, db, gpu_root, two_bound):  # noqa: F811
    arqs, mdevs = two_bound
    _reboot(gpu_root, mdevs)
    agent, _, conductor = _agent(conf, db, gpu_root)
    assert agent.mdev_restore.pending

    agent.report_inventory()

    # When the report left, each mdev had been asked for again with its
    # ARQ's handle UUID, on its VF.
    report, = conductor.reports
    assert {_vf(a): a['attach_handle_uuid'] for a in arqs}.items() <= \
        report.items()
    assert not agent.mdev_restore.pending


def test_an_agent_restart_without_a_reboot_keeps_the_mdevs(
        conf, db, gpu_root, two_bound):  # noqa: F811
    for vf in _created(gpu_root):
        open(os.path.join(mdev_type_dir(gpu_root, vf, VGPU_TYPE), 'create'),
             'w').close()
    agent, _, conductor = _agent(conf, db, gpu_root)
    agent.report_inventory()
    # Still there: nothing asked of the kernel.
    assert set(conductor.reports[0].values()) == {''}


def test_a_type_no_longer_offered_marks_the_gpu_unhealthy_with_why(
        conf, db, gpu_root, two_bound):  # noqa: F811
    arqs, mdevs = two_bound
    _reboot(gpu_root, mdevs)
    # After the reboot the first ARQ's VF offers the type no more.
    gone = _vf(arqs[0])
    shutil.rmtree(mdev_type_dir(gpu_root, gone, VGPU_TYPE))
    agent, driver, conductor = _agent(conf, db, gpu_root)

    agent.report_inventory()

    # The other is back; the GPU says why it is unhealthy.
    assert conductor.reports[0][_vf(arqs[1])] == arqs[1]['attach_handle_uuid']
    gpu, = [d for d in driver.discover()
            if d.controlpath_info['bus'] == 'af']
    observed = driver.observe_device(gpu)
    assert observed.state == health.UNHEALTHY
    assert ('mdev %s of type %s on %s could not be made again after the '
            'host restarted: %s no longer offers vGPU type %s'
            % (arqs[0]['attach_handle_uuid'], VGPU_TYPE, gone, gone,
               VGPU_TYPE)) in observed.reason
