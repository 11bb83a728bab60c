"""FPGA base images as device configuration, from policy to the vendor
tool: the API stores the policy, the conductor's rollout drains the PAC
of the recorded FPGA host in a real Placement and loads the image from a
real Glance through the programming path of a bind (the card's
reservation, the image's checks, the agent's verified download and the
driver's ``fpgaconf`` run by the privileged side in the test process).

``fpgaconf`` is the recording stand-in of the driver tests: it notes its
arguments and the bytes it was given, and here, as the card would, makes
the port report the function of the image it loaded.
"""

import contextlib
import glob
import os
import threading
import time
import uuid

import pytest
import sqlalchemy as sa
import webtest

from cyborg import rpc
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.fpga import intel
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.api import app as api_app
from cyborg.conductor import binding
from cyborg.conductor import device_config
from cyborg.conductor import host_sync
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.db.api import arqs as arqs_db
from tests import arq_stack
from tests import glance_service
from tests.conftest import database_url_on
from tests.conftest import make_conf
from tests.functional.api.test_device_config_policies import ADMIN
from tests.functional.api.test_device_config_policies import POLICIES
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.conftest import fake_tool  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

glance = glance_service.glance
glance_service = glance_service.glance_service
# The subject is the programming path, not the SQL: one engine.
database_url = database_url_on('sqlite')

HOST = 'fpga-host'
PAC = hosts.PAC.bdf
BASE_IMAGE = b'GBS\x00nlb mode 0 base image\xff' * 64
BASE_FUNCTION = '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0'
TOOL_ARGS = ['--bus', '0x13', '--device', '0x00', '--function', '0x0']


def pac_image(**changes):
    """Glance properties of a base image for the PAC."""
    properties = {'bs-uuid': str(uuid.uuid4()), 'bs-name': 'nlb0',
                  'vendor': 'INTEL', 'board': '09c4', 'version': '1.0',
                  'region_uuid': hosts.PAC_INTERFACE_ID,
                  'function_uuid': BASE_FUNCTION}
    properties.update(changes)
    return properties


class Rig:
    """The API, the conductor (its endpoints, Binder and rollout) and the
    agent of HOST (the Intel FPGA driver on a copy of the recorded FPGA
    host) on one in-process transport, over a real Placement and Glance.
    """

    def __init__(self, conf, db, root, placement, glance,  # noqa: F811
                 stack):
        self.db = db
        self.root = root
        self.placement = placement
        transport = stack.enter_context(arq_stack.fake_transport(conf))
        agent_api = agent_rpcapi.AgentAPI(transport, timeout=30)
        client = placement.client()
        self.binder = arq_stack.binder(conf, agent_api,
                                       glance=glance.client())
        stack.enter_context(arq_stack.serving_conductor(
            transport, db, self.binder, placement_client=client))
        self.rollout = device_config.Rollout(
            host_sync.HostSync(client), agent_api, binder=self.binder)
        self.api = webtest.TestApp(api_app.build_app(conf, db))
        create_compute_node(placement.adapter(), HOST)
        agent_conf = make_conf(conf.database.connection, host=HOST)
        self.agent = agent_manager.AgentManager(
            agent_conf, [intel.IntelFPGADriver(agent_conf,
                                               pci.PCIReader(root))],
            conductor=conductor_rpcapi.ConductorAPI(transport),
            candidates=[(HOST, 'the configured host')],
            glance=glance.client(), request_report=lambda: None)
        server = rpc.get_server(transport, rpc.AGENT_TOPIC, HOST,
                                [self.agent])
        server.start()

        def stop():
            server.stop()
            server.wait()
        stack.callback(stop)
        self.agent.report_inventory()

    def create_policy(self, image_id):
        return self.api.post_json(POLICIES, {
            'name': 'pac-base', 'kind': 'fpga_base_image',
            'devices': {'vendor_id': '8086', 'pci_addresses': [PAC]},
            'settings': {'bitstream_uuid': image_id}}, headers=ADMIN).json

    def status(self, policy):
        [row] = self.api.get('%s/%s/status' % (POLICIES, policy['uuid']),
                             headers=ADMIN).json['status']
        return row

    def deployable(self):
        """The PAC's deployable row, with its reported attributes."""
        with self.db.engine.connect() as conn:
            row = conn.execute(sa.select(models.Deployable).where(
                models.Deployable.name == 'fpga_' + PAC)).one()
            attributes = dict(conn.execute(sa.select(
                models.Attribute.key, models.Attribute.value).where(
                models.Attribute.deployable_id == row.id)).all())
        return row, attributes

    def offered(self):
        """(total, reserved) of the PAC's FPGA inventory in Placement."""
        row, _ = self.deployable()
        inventory = self.placement.adapter().get(
            '/resource_providers/%s/inventories' % row.rp_uuid).json()[
                'inventories']['FPGA']
        return inventory['total'], inventory['reserved']

    def afu_id_file(self):
        [path] = glob.glob(os.path.join(
            self.root, 'sys/class/fpga/*/intel-fpga-port.*/afu_id'))
        return path


@pytest.fixture
def rig(conf, db, tmp_path, placement, glance, privileged_on):  # noqa: F811
    root = sysfs.build(str(tmp_path / 'fpga'), hosts.HOSTS['fpga'],
                       pci_ids=hosts.PCI_IDS)
    privileged_on(root)
    with contextlib.ExitStack() as stack:
        yield Rig(conf, db, root, placement, glance, stack)


def test_a_base_image_is_programmed_under_the_reservation_while_drained(
        rig, glance, fake_tool, tmp_path, admin_context):  # noqa: F811
    go = tmp_path / 'go'
    # The tool runs until the test lets it end, then the port holds the
    # image's function, as the card would report it.
    fpgaconf = fake_tool('fpgaconf', extra=(
        'n=0; while [ ! -e %s ] && [ $n -lt 300 ]; do sleep 0.05; '
        'n=$((n+1)); done; echo %s > %s'
        % (go, BASE_FUNCTION.replace('-', ''), rig.afu_id_file())))
    image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    policy = rig.create_policy(image['id'])
    assert rig.status(policy)['state'] == 'pending'
    assert rig.offered() == (1, 0)

    rolling = threading.Thread(target=rig.rollout.run_pass,
                               args=(admin_context,))
    rolling.start()
    try:
        deadline = time.monotonic() + 20
        while not fpgaconf.ran:
            assert time.monotonic() < deadline, 'fpgaconf never ran'
            time.sleep(0.02)
        # While the tool runs: drained, and the card reserved, so that an
        # operator's program of it is refused.
        assert rig.status(policy)['state'] == 'applying'
        assert rig.offered() == (1, 1)
        pac, _ = rig.deployable()
        assert pac.reservation is not None
        with pytest.raises(binding.CardBusy,
                           match='is being programmed or bound'):
            rig.binder.program_deployable(admin_context, pac.uuid,
                                          image['id'])
    finally:
        go.touch()
        rolling.join(30)
    assert not rolling.is_alive()

    row = rig.status(policy)
    assert row['state'] == 'applied', row
    assert row['applied_settings'] == {'bitstream_uuid': image['id']}
    assert row['failed_task'] is None
    # The PAC got the image's bytes, through a descriptor of the checked
    # file.
    assert fpgaconf.argv[:-1] == TOOL_ARGS
    assert fpgaconf.argv[-1].startswith('/dev/fd/')
    assert fpgaconf.input == BASE_IMAGE
    # Released; the card's bitstream recorded as a program records it,
    # and the function it now runs reported before the answer.
    pac, attributes = rig.deployable()
    assert pac.reservation is None
    assert pac.bitstream_id == image['properties']['bs-uuid']
    assert attributes['function_uuid'] == BASE_FUNCTION.replace('-', '')
    assert rig.offered() == (1, 0)


def test_a_card_that_a_program_holds_waits_for_it(
        rig, glance, fake_tool, admin_context):  # noqa: F811
    fpgaconf = fake_tool('fpgaconf')
    image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    pac, _ = rig.deployable()
    # Reserved as a bind's program of this conductor holds the card.
    holder = 'conductor-1 %s 0b1d0000' % binding._PROCESS
    assert arqs_db.reserve_deployable(admin_context, pac.id, holder, 600)
    policy = rig.create_policy(image['id'])

    rig.rollout.run_pass(admin_context)

    assert rig.status(policy)['state'] == 'applying'
    assert not fpgaconf.ran
    arqs_db.release_deployable(admin_context, pac.id, holder)
    rig.rollout.run_pass(admin_context)
    assert rig.status(policy)['state'] == 'applied'
    assert fpgaconf.input == BASE_IMAGE


def test_a_failing_tool_fails_the_device_at_its_step(
        rig, glance, fake_tool, admin_context):  # noqa: F811
    fake_tool('fpgaconf', status=4, stderr='No suitable slots found.')
    image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    policy = rig.create_policy(image['id'])

    rig.rollout.run_pass(admin_context)

    row = rig.status(policy)
    assert row['state'] == 'failed', row
    assert row['failed_task'] == 'Program the FPGA'
    assert ('fpgaconf %s' % ' '.join(TOOL_ARGS)) in row['message']
    assert row['message'].endswith(
        'exited with status 4: No suitable slots found.')
    assert row['applied_settings'] is None
    # Out of scheduling, the reservation given back, nothing recorded.
    assert rig.offered() == (1, 1)
    pac, _ = rig.deployable()
    assert (pac.reservation, pac.bitstream_id) == (None, None)


def test_an_image_missing_or_unfit_fails_before_the_agent_is_asked(
        rig, glance, fake_tool, admin_context):  # noqa: F811
    fpgaconf = fake_tool('fpgaconf')
    missing = str(uuid.uuid4())
    policy = rig.create_policy(missing)

    rig.rollout.run_pass(admin_context)

    row = rig.status(policy)
    assert (row['state'], row['failed_task']) == (
        'failed', 'Find the bitstream image')
    assert missing in row['message'] and '404' in row['message']

    # Changed to an image of another board: checked as a program is.
    other = glance.upload_bitstream(BASE_IMAGE, **pac_image(board='U200'))
    rig.api.patch_json('%s/%s' % (POLICIES, policy['uuid']),
                       {'settings': {'bitstream_uuid': other['id']}},
                       headers=ADMIN)
    rig.rollout.run_pass(admin_context)

    row = rig.status(policy)
    assert (row['state'], row['failed_task']) == (
        'failed', 'Check that the image fits the FPGA')
    assert "is for board 'U200'" in row['message']
    assert not fpgaconf.ran
    pac, _ = rig.deployable()
    assert pac.reservation is None
