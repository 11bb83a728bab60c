"""An Intel PAC scrubbed between tenants: its memory cleared by a clearing
image, where it has one, and its base image loaded again.

The rig of ``test_device_config_base_image``: the API, the conductor
(binds, the device-configuration rollout, host syncs, the ``Scrubber``)
and the agent of the recorded FPGA host (the Intel FPGA driver on a copy
of its sysfs tree) share the in-process transport, over a real Placement
and Glance. ``fpgaconf`` is the recording stand-in of the driver tests;
installed by ``loading_tool`` it makes the PAC's port report the
function that the image it was given names in its first line
(``AFU=<id>``), as the card reports the function of the logic loaded.

The conductor reads the base image from the device's configuration:
that query runs on every engine, and so do a whole scrub with and
without a clearing image; the variations run on SQLite.
"""

import contextlib
import datetime
import glob
import os
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.fpga import intel
from cyborg.accelerator.drivers.fpga import scrub as fpga_scrub
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import device_config
from cyborg.conductor import health as health_module
from cyborg.conductor import membership
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.conductor import scrubber as scrubber_module
from cyborg.db import models
from cyborg.db import session
from cyborg.db.api import device_config_status as config_status_db
from cyborg.db.api import scrubs
from cyborg.objects import inventory
from tests import arq_stack
from tests import db_servers
from tests import glance_service
from tests import inventory_rows
from tests.arq_stack import ARQS
from tests.conftest import create_schema
from tests.conftest import make_conf
from tests.functional.api.test_device_config_policies import ADMIN
from tests.functional.api.test_device_config_policies import POLICIES
from tests.functional.conductor import test_device_config_base_image
from tests.placement_service import allocate
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.conftest import fake_tool  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

glance = glance_service.glance
glance_service = glance_service.glance_service


@pytest.fixture
def database_url(request, tmp_path):
    """SQLite, or the engine a test names (``ON_EVERY_ENGINE``): the
    whole path of a scrub runs on each; its variations on one."""
    url = db_servers.create_database(getattr(request, 'param', 'sqlite'),
                                     tmp_path)
    yield url
    db_servers.drop_database(url)


ON_EVERY_ENGINE = pytest.mark.parametrize('database_url', db_servers.ENGINES,
                                          indirect=True)

HOST = test_device_config_base_image.HOST
PAC = test_device_config_base_image.PAC
PAC_VF = '0000:13:00.1'
TOOL_ARGS = test_device_config_base_image.TOOL_ARGS
BASE_FUNCTION = test_device_config_base_image.BASE_FUNCTION
pac_image = test_device_config_base_image.pac_image
TENANT_FUNCTION = '9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d'
PROFILE = 'pac'


def _hex(function):
    return function.replace('-', '')


def image_bytes(function, name):
    """A bitstream whose first line names the function it loads."""
    return (b'AFU=' + _hex(function).encode() + b'\n'
            + (b'GBS\x00' + name.encode() + b'\xff') * 64)


BASE_IMAGE = image_bytes(BASE_FUNCTION, 'nlb mode 0 base image')
TENANT_IMAGE = image_bytes(TENANT_FUNCTION, 'a tenant\'s gzip')


class Rig:
    """The API, the conductor (Binder, rollout, HostSync, Scrubber) and
    the agent of HOST on one in-process transport."""

    def __init__(self, conf, db, root, placement, glance,  # noqa: F811
                 stack):
        self.db = db
        self.root = root
        self.placement = placement
        self.transport = stack.enter_context(arq_stack.fake_transport(conf))
        agent_api = agent_rpcapi.AgentAPI(self.transport, timeout=30)
        client = placement.client()
        self.binder = arq_stack.binder(conf, agent_api,
                                       glance=glance.client())
        endpoint = stack.enter_context(arq_stack.serving_conductor(
            self.transport, db, self.binder, placement_client=client))
        self.sync = endpoint.sync
        self.rollout = device_config.Rollout(self.sync, agent_api,
                                             binder=self.binder)
        self.health = health_module.DeviceHealth(self.sync, hold_down=0)
        self.scrubber = self.scrubber_of(conf, agent_api)
        self.api = arq_stack.webtest_app(conf, db, self.transport)
        create_compute_node(placement.adapter(), HOST)
        agent_conf = make_conf(conf.database.connection, host=HOST)
        self.agent = agent_manager.AgentManager(
            agent_conf, [intel.IntelFPGADriver(agent_conf,
                                               pci.PCIReader(root))],
            conductor=conductor_rpcapi.ConductorAPI(self.transport),
            candidates=[(HOST, 'the configured host')],
            glance=glance.client(), request_report=lambda: None)
        server = rpc.get_server(self.transport, rpc.AGENT_TOPIC, HOST,
                                [self.agent])
        server.start()

        def stop():
            server.stop()
            server.wait()
        stack.callback(stop)
        self.agent.report_inventory()

    def scrubber_of(self, conf, agent_api):
        return scrubber_module.Scrubber(conf, agent_api, self.health,
                                        self.sync, 'conductor-1')

    def scrub_pass(self, context, scrubber=None):
        return (scrubber or self.scrubber).run_pass(
            context, membership.SoleMembership(None))

    def apply_base_image(self, context, image_id, clear_image_id=None):
        """A base-image policy for the PAC (with a clearing image, if
        given), rolled out: applied."""
        settings = {'bitstream_uuid': image_id}
        if clear_image_id is not None:
            settings['clear_bitstream_uuid'] = clear_image_id
        policy = self.api.post_json(POLICIES, {
            'name': 'pac-base', 'kind': 'fpga_base_image',
            'devices': {'vendor_id': '8086', 'pci_addresses': [PAC]},
            'settings': settings}, headers=ADMIN).json
        self.rollout.run_pass(context)
        [row] = self.api.get('%s/%s/status' % (POLICIES, policy['uuid']),
                             headers=ADMIN).json['status']
        assert row['state'] == 'applied', row
        return policy

    def bind(self, profile=PROFILE):
        """An instance's ARQ bound to the PAC: (ARQ, instance)."""
        pac, _ = self.deployable()
        instance = str(uuid.uuid4())
        allocate(self.placement.adapter(), instance, pac.rp_uuid,
                 {'FPGA': 1})
        arq = arq_stack.bind_one(self.api, profile, pac.rp_uuid, instance,
                                 hostname=HOST, timeout=30)
        assert arq['state'] == 'Bound', arq
        return arq, instance

    def release(self, arq, instance):
        """Nova's deletion of the instance: the ARQ, then the
        allocation."""
        self.api.delete(ARQS + '/' + arq['uuid'], status=204)
        self.placement.adapter().delete('/allocations/' + instance,
                                        raise_exc=False)

    def deployable(self):
        """The PAC's deployable row, with its reported attributes."""
        with self.db.engine.connect() as conn:
            row = conn.execute(sa.select(models.Deployable).where(
                models.Deployable.name == 'fpga_' + PAC)).one()
            attributes = dict(conn.execute(sa.select(
                models.Attribute.key, models.Attribute.value).where(
                models.Attribute.deployable_id == row.id)).all())
        return row, attributes

    def handle(self, handle_uuid):
        with self.db.engine.connect() as conn:
            return conn.execute(sa.select(models.AttachHandle.__table__)
                                .where(models.AttachHandle.uuid
                                       == handle_uuid)).one()

    def device(self):
        with self.db.engine.connect() as conn:
            return conn.execute(sa.select(models.Device.__table__).where(
                models.Device.id == sa.select(
                    models.Deployable.device_id).where(
                    models.Deployable.name == 'fpga_' + PAC)
                .scalar_subquery())).one()

    def reserved(self):
        """The reserved units of the PAC's FPGA inventory in Placement."""
        pac, _ = self.deployable()
        return self.placement.adapter().get(
            '/resource_providers/%s/inventories' % pac.rp_uuid).json()[
                'inventories']['FPGA']['reserved']

    def afu_id_file(self):
        [path] = glob.glob(os.path.join(
            self.root, 'sys/class/fpga/*/intel-fpga-port.*/afu_id'))
        return path

    def port_function(self):
        with open(self.afu_id_file()) as f:
            return f.read().strip()


@pytest.fixture
def rig(conf, db, tmp_path, placement, glance, privileged_on,  # noqa: F811
        admin_context):
    root = sysfs.build(str(tmp_path / 'fpga'), hosts.HOSTS['fpga'],
                       pci_ids=hosts.PCI_IDS)
    privileged_on(root)
    arq_stack.make_profile(admin_context, PROFILE, [{'resources:FPGA': '1'}])
    with contextlib.ExitStack() as stack:
        yield Rig(conf, db, root, placement, glance, stack)


@pytest.fixture
def loading_tool(fake_tool, tmp_path, rig):  # noqa: F811
    """loading_tool(**kw) -> the recording ``fpgaconf``, which makes the
    PAC's port report the function of the image it was given."""
    def install(**kw):
        tool = fake_tool('fpgaconf', extra='head -n 1 %s | cut -c5- > %s'
                         % (tmp_path / 'fpgaconf.input', rig.afu_id_file()),
                         **kw)
        forget(tool)
        return tool
    return install


def forget(tool):
    """The recording of the last run gone: the next run is the one seen."""
    for path in (tool.argv_file, tool.input_file):
        if path.exists():
            path.unlink()


def released(rig, admin_context, tenant=None):
    """A bind of the PAC and its release: the released handle's uuid.
    ``tenant`` is what the tenant leaves running on the port, written
    behind the agent's back."""
    arq, instance = rig.bind()
    assert arq['attach_handle_uuid'] is not None
    if tenant is not None:
        with open(rig.afu_id_file(), 'w') as f:
            f.write(_hex(tenant) + '\n')
    rig.release(arq, instance)
    handle = rig.handle(arq['attach_handle_uuid'])
    assert (handle.state, handle.in_use) == (scrubs.DIRTY, True)
    rig.sync.sync_host(admin_context, HOST)
    return arq['attach_handle_uuid']


def test_the_pac_reports_its_scrub_method(rig):
    _, attributes = rig.deployable()
    assert attributes['scrub_method'] == fpga_scrub.FPGA_BASE_IMAGE


def test_a_card_of_several_handles_is_not_scrubbed_by_reloading_it():
    ports = [base.pci_attach_handle(inventory.PCIAddress(
        '0000', '13', '00', str(n))) for n in (1, 2)]
    deployable = inventory.Deployable('fpga_' + PAC, 2, 'FPGA',
                                      intel.IntelFPGADriver.name,
                                      attach_handles=ports)
    driver = intel.IntelFPGADriver(None, None)
    assert driver.scrub_method(deployable) is None
    deployable.attach_handles = ports[:1]
    assert driver.scrub_method(deployable) == fpga_scrub.FPGA_BASE_IMAGE


@ON_EVERY_ENGINE
def test_a_released_pac_gets_its_base_image_again_and_is_free(
        rig, glance, loading_tool, admin_context):
    fpgaconf = loading_tool()
    image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    rig.apply_base_image(admin_context, image['id'])
    assert rig.port_function() == _hex(BASE_FUNCTION)
    forget(fpgaconf)

    # The tenant left its own function on the port; the agent, which
    # loaded the base image last, knows nothing of it.
    handle_uuid = released(rig, admin_context, tenant=TENANT_FUNCTION)
    assert rig.reserved() == 1
    assert not fpgaconf.ran

    assert rig.scrub_pass(admin_context) == {handle_uuid: scrubs.PASSED}

    # Loaded again all the same, with Glance's bytes, through a
    # descriptor of the checked file.
    assert fpgaconf.argv[:-1] == TOOL_ARGS
    assert fpgaconf.argv[-1].startswith('/dev/fd/')
    assert fpgaconf.input == BASE_IMAGE
    assert rig.port_function() == _hex(BASE_FUNCTION)
    handle = rig.handle(handle_uuid)
    assert (handle.state, handle.in_use) == (scrubs.FREE, False)
    assert (handle.last_scrub_result, handle.last_scrub_step) == (
        scrubs.PASSED, None)
    assert rig.reserved() == 0
    _, attributes = rig.deployable()
    assert attributes['function_uuid'] == _hex(BASE_FUNCTION)
    assert not rig.device().quarantined
    # Free, it is bound again.
    arq, _ = rig.bind()
    assert arq['attach_handle_uuid'] == handle_uuid


CLEAR_FUNCTION = '5c4b3a29-1807-4f6e-9d5c-4b3a29180766'
CLEAR_IMAGE = image_bytes(CLEAR_FUNCTION, 'writes every DDR bank over')


@ON_EVERY_ENGINE
def test_a_clearing_image_is_loaded_before_the_base_image(
        rig, glance, fake_tool, tmp_path, admin_context):  # noqa: F811
    """With ``clear_bitstream_uuid`` the scrub loads that image first (it
    writes the card's memory over as it starts), checks that the card
    runs it, then loads the base image again."""
    loads = tmp_path / 'loaded-functions'
    fake_tool('fpgaconf', extra='head -n 1 %s | cut -c5- | tee %s >> %s'
              % (tmp_path / 'fpgaconf.input', rig.afu_id_file(), loads))
    base_image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    clear = glance.upload_bitstream(CLEAR_IMAGE, **pac_image(
        function_uuid=CLEAR_FUNCTION, **{'bs-name': 'ddr-clear'}))
    rig.apply_base_image(admin_context, base_image['id'], clear['id'])
    # The rollout loads the base image alone.
    assert loads.read_text().split() == [_hex(BASE_FUNCTION)]
    loads.unlink()
    handle_uuid = released(rig, admin_context, tenant=TENANT_FUNCTION)

    assert rig.scrub_pass(admin_context) == {handle_uuid: scrubs.PASSED}

    assert loads.read_text().split() == [_hex(CLEAR_FUNCTION),
                                         _hex(BASE_FUNCTION)]
    assert rig.port_function() == _hex(BASE_FUNCTION)
    handle = rig.handle(handle_uuid)
    assert (handle.state, handle.last_scrub_result) == (scrubs.FREE,
                                                        scrubs.PASSED)


def test_a_clearing_image_the_card_does_not_run_fails_at_clear(
        rig, glance, fake_tool, tmp_path, admin_context):  # noqa: F811
    """The tool exits 0 but the port keeps the tenant's function: the
    memory was not cleared; the base image is not even tried."""
    loads = tmp_path / 'loaded-functions'
    fake_tool('fpgaconf', extra='head -n 1 %s | cut -c5- >> %s'
              % (tmp_path / 'fpgaconf.input', loads))
    base_image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    clear = glance.upload_bitstream(CLEAR_IMAGE, **pac_image(
        function_uuid=CLEAR_FUNCTION, **{'bs-name': 'ddr-clear'}))
    with open(rig.afu_id_file(), 'w') as f:
        f.write(_hex(BASE_FUNCTION) + '\n')
    rig.apply_base_image(admin_context, base_image['id'], clear['id'])
    loads.unlink()
    handle_uuid = released(rig, admin_context, tenant=TENANT_FUNCTION)

    assert rig.scrub_pass(admin_context) == {handle_uuid: scrubs.FAILED}

    assert loads.read_text().split() == [_hex(CLEAR_FUNCTION)]
    handle = rig.handle(handle_uuid)
    assert (handle.state, handle.last_scrub_step) == (scrubs.DIRTY, 'clear')
    assert rig.device().health_reason.startswith('scrub failed at clear: ')


def test_a_card_that_seems_untouched_is_loaded_again(
        rig, glance, loading_tool, admin_context):
    """The port reports the base image's function as before the bind:
    the tenant may still have changed what runs behind it."""
    fpgaconf = loading_tool()
    image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    rig.apply_base_image(admin_context, image['id'])
    handle_uuid = released(rig, admin_context)
    forget(fpgaconf)
    handle = rig.handle(handle_uuid)
    agent_api = agent_rpcapi.AgentAPI(rig.transport, timeout=30)

    done = agent_api.scrub_attach_handle(
        admin_context, HOST, intel.IntelFPGADriver.name,
        {'uuid': handle.uuid, 'attach_type': handle.attach_type,
         'attach_info': handle.attach_info},
        fpga_scrub.FPGA_BASE_IMAGE, 30, base_image=image['id'])

    assert done['method'] == fpga_scrub.FPGA_BASE_IMAGE
    assert done['steps'] == ['reload', 'verify']
    assert done['seconds'] >= 0
    assert fpgaconf.input == BASE_IMAGE


def test_after_a_scrub_the_tenants_bitstream_is_loaded_for_the_next(
        rig, glance, loading_tool, admin_context):
    """A bind that asks for the bitstream the last tenant had programs
    it again: the card runs the base image once scrubbed."""
    fpgaconf = loading_tool()
    base_image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    rig.apply_base_image(admin_context, base_image['id'])
    tenant_image = glance.upload_bitstream(TENANT_IMAGE, **pac_image(
        function_uuid=TENANT_FUNCTION, **{'bs-name': 'gzip'}))
    bitstream_id = tenant_image['properties']['bs-uuid']
    arq_stack.make_profile(admin_context, 'gzip', [
        {'resources:FPGA': '1', 'accel:bitstream_id': bitstream_id}])

    arq, instance = rig.bind('gzip')
    assert fpgaconf.input == TENANT_IMAGE
    # Its periodic report: the tenant's function reaches the database.
    rig.agent.report_inventory()
    assert rig.deployable()[1]['function_uuid'] == _hex(TENANT_FUNCTION)
    rig.release(arq, instance)
    forget(fpgaconf)

    assert rig.scrub_pass(admin_context) == {
        arq['attach_handle_uuid']: scrubs.PASSED}
    assert fpgaconf.input == BASE_IMAGE
    pac, attributes = rig.deployable()
    assert attributes['function_uuid'] == _hex(BASE_FUNCTION)
    forget(fpgaconf)

    rig.bind('gzip')
    assert fpgaconf.input == TENANT_IMAGE
    assert rig.port_function() == _hex(TENANT_FUNCTION)


def test_without_a_base_image_the_scrub_fails_at_reload(
        rig, loading_tool, admin_context):
    fpgaconf = loading_tool()
    handle_uuid = released(rig, admin_context)

    assert rig.scrub_pass(admin_context) == {handle_uuid: scrubs.FAILED}

    assert not fpgaconf.ran
    handle = rig.handle(handle_uuid)
    assert (handle.state, handle.last_scrub_result,
            handle.last_scrub_step) == (scrubs.DIRTY, scrubs.FAILED,
                                        'reload')
    assert handle.last_scrub_message.endswith(fpga_scrub.no_base_image(
        intel.IntelFPGADriver.name, PAC))
    assert 'fpga_base_image' in handle.last_scrub_message
    assert '[scrub] disabled_drivers' in handle.last_scrub_message
    device = rig.device()
    assert device.quarantined
    assert device.health == 'unhealthy'
    assert device.health_reason.startswith('scrub failed at reload: ')
    assert rig.reserved() == 1
    # Quarantined and dirty: no bind takes it.
    pac, _ = rig.deployable()
    instance = str(uuid.uuid4())
    arq, = rig.api.post_json(ARQS, {'device_profile_name': PROFILE}).json[
        'arqs']
    rig.api.patch_json(ARQS, arq_stack.bind_body([arq], pac.rp_uuid,
                                                 instance, HOST))
    [failed] = arq_stack.wait_resolved(rig.api, instance, timeout=30)
    assert failed['state'] == 'BindFailed'


def _retry_now(rig, handle_uuid):
    with rig.db.engine.begin() as conn:
        conn.execute(sa.update(models.AttachHandle).where(
            models.AttachHandle.uuid == handle_uuid).values(
            last_scrub_at=models.utcnow() - datetime.timedelta(hours=1)))


def test_a_tool_that_fails_fails_the_scrub_at_reload(
        rig, glance, loading_tool, admin_context):
    loading_tool()
    image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    rig.apply_base_image(admin_context, image['id'])
    handle_uuid = released(rig, admin_context, tenant=TENANT_FUNCTION)
    fpgaconf = loading_tool(status=4, stderr='No suitable slots found.')

    assert rig.scrub_pass(admin_context) == {handle_uuid: scrubs.FAILED}

    assert fpgaconf.ran
    handle = rig.handle(handle_uuid)
    assert (handle.state, handle.last_scrub_step) == (scrubs.DIRTY,
                                                      'reload')
    assert ('fpgaconf %s' % ' '.join(TOOL_ARGS)) in handle.last_scrub_message
    assert handle.last_scrub_message.endswith(
        'exited with status 4: No suitable slots found.')
    device = rig.device()
    assert device.quarantined
    assert device.health_reason.startswith('scrub failed at reload: ')

    # The tool fixed, the next try passes.
    loading_tool()
    _retry_now(rig, handle_uuid)
    assert rig.scrub_pass(admin_context) == {handle_uuid: scrubs.PASSED}
    assert rig.handle(handle_uuid).state == scrubs.FREE


def test_a_port_that_keeps_the_tenants_function_fails_at_verify(
        rig, glance, loading_tool, fake_tool, admin_context):  # noqa: F811
    loading_tool()
    image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    rig.apply_base_image(admin_context, image['id'])
    handle_uuid = released(rig, admin_context, tenant=TENANT_FUNCTION)
    # Exits 0, yet the port still reports what the tenant left.
    fpgaconf = fake_tool('fpgaconf')
    forget(fpgaconf)

    assert rig.scrub_pass(admin_context) == {handle_uuid: scrubs.FAILED}

    assert fpgaconf.input == BASE_IMAGE
    handle = rig.handle(handle_uuid)
    assert (handle.state, handle.last_scrub_step) == (scrubs.DIRTY,
                                                      'verify')
    assert ('reports function %s once image %s was loaded, not the '
            'image\'s function %s' % (_hex(TENANT_FUNCTION), image['id'],
                                      _hex(BASE_FUNCTION))) in (
        handle.last_scrub_message)
    assert rig.device().health_reason.startswith('scrub failed at verify: ')


def test_an_agent_pinned_below_1_6_is_not_sent_the_base_image(
        rig, glance, loading_tool, conf, admin_context):
    fpgaconf = loading_tool()
    image = glance.upload_bitstream(BASE_IMAGE, **pac_image())
    rig.apply_base_image(admin_context, image['id'])
    handle_uuid = released(rig, admin_context)
    forget(fpgaconf)
    pinned = rig.scrubber_of(conf, agent_rpcapi.AgentAPI(
        rig.transport, timeout=30, version_cap='1.5'))

    assert rig.scrub_pass(admin_context, pinned) == {
        handle_uuid: scrubs.FAILED}

    assert not fpgaconf.ran
    handle = rig.handle(handle_uuid)
    assert (handle.state, handle.last_scrub_step) == (scrubs.DIRTY, 'scrub')
    assert 'needs agent RPC API 1.6' in handle.last_scrub_message


# -- the conductor's query, on every engine ------------------------------

@pytest.fixture(params=db_servers.ENGINES)
def any_db(request, tmp_path):
    url = db_servers.create_database(request.param, tmp_path)
    create_schema(url)
    database = session.Database(make_conf(url))
    yield database
    database.dispose()
    db_servers.drop_database(url)


def _policy(conn, name, kind, settings):
    return conn.execute(sa.insert(models.DeviceConfigPolicy).values(
        uuid=str(uuid.uuid4()), name=name, priority=1, host_selector=['*'],
        device_selector={}, kind=kind, settings=settings,
        created_at=models.utcnow())).inserted_primary_key[0]


def _status(conn, device_id, policy_id, wanted, applied, state):
    conn.execute(sa.insert(models.DeviceConfigStatus).values(
        device_id=device_id, policy_id=policy_id, wanted_settings=wanted,
        applied_settings=applied, state=state, created_at=models.utcnow()))


def test_the_base_image_is_what_the_devices_configuration_applied(any_db):
    context = cyborg_context.admin_context(any_db)
    applied, changing, pending, other, bare = (
        inventory_rows.add_host(any_db.engine, 'host-%d' % n,
                                inventory_rows.fake_devices())[0].id
        for n in range(5))
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    with any_db.engine.begin() as conn:
        base = _policy(conn, 'base', 'fpga_base_image',
                       {'bitstream_uuid': new})
        playbook = _policy(conn, 'own', 'playbook', {'playbook': 'x'})
        _status(conn, applied, base, {'bitstream_uuid': new},
                {'bitstream_uuid': new}, 'applied')
        # Changed and not applied yet: the card holds the old one.
        _status(conn, changing, base, {'bitstream_uuid': new},
                {'bitstream_uuid': old}, 'applying')
        _status(conn, pending, base, {'bitstream_uuid': new}, None,
                'pending')
        _status(conn, other, playbook, {'playbook': 'x'},
                {'playbook': 'x'}, 'applied')

    assert config_status_db.applied_base_image(context, applied) == {
        'bitstream_uuid': new}
    assert config_status_db.applied_base_image(context, changing) == {
        'bitstream_uuid': old}
    for device_id in (pending, other, bare):
        assert config_status_db.applied_base_image(context,
                                                  device_id) is None
