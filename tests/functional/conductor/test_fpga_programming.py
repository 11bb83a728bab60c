"""FPGA programming from a bitstream in a real Glance: by an operator
(``PATCH /v2/deployables/<uuid>/program``) and by a bind whose device
profile asks for a bitstream.

API, conductor and the agent's endpoint (the fake driver) share
oslo.messaging's in-process transport; the conductor chooses the image
and the agent downloads it from Glance, checksum checked, and programs.
"""

import uuid

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import pci
from cyborg.db import models
from tests import arq_stack
from tests import glance_service
from tests import inventory_rows

glance = glance_service.glance
glance_service = glance_service.glance_service

DEPLOYABLES = '/v2/deployables'
HOST = 'compute1'
BITSTREAM = b'\x00fake gzip bitstream\xff' * 64
FUNCTION = 'a7d0f4e2-5c1b-4e8f-9d3a-6b2c1e0f9a87'


def fitting(**changes):
    """Glance properties of a bitstream for the fake FPGA."""
    properties = {'bs-uuid': str(uuid.uuid4()), 'bs-name': 'gzip',
                  'vendor': 'abcd', 'board': 'FakeFPGA',
                  'region_uuid': fake.REGION_UUID,
                  'function_uuid': FUNCTION, 'function_name': 'gzip',
                  'version': '1.0'}
    properties.update(changes)
    return properties


@pytest.fixture
def stack(conf, db, glance):
    conf.set_override('host', HOST)
    conf.set_override('auth_type', 'none', group='glance')
    conf.set_override('endpoint_override', glance.url, group='glance')
    driver = fake.FakeDriver(conf, pci.PCIReader('/nonexistent'))
    inventory_rows.add_host(db.engine, HOST, driver.discover())
    with arq_stack.serving_with_agent(
            conf, db, HOST, [driver], agent_timeout=20,
            agent_args={'glance': glance.client(),
                        'request_report': lambda: None},
            binder_args={'glance': glance.client()}) as api:
        yield api, driver


@pytest.fixture
def fpga(db):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(
            models.Deployable.uuid, models.Deployable.rp_uuid).where(
            models.Deployable.name == fake.DEPLOYABLE_NAME)).one()


def program(api, deployable_uuid, image_id, twice=False, status=200):
    path = DEPLOYABLES + '/%s/program' % deployable_uuid
    if twice:  # openstacksdk's path: the uuid twice
        path += '/' + deployable_uuid
    return api.patch_json(path, [{'path': '/program', 'op': 'replace',
                                  'value': [{'image_uuid': image_id}]}],
                          status=status)


def loaded_trait(driver):
    deployable = driver.discover()[0].deployables[0]
    return [t for t in deployable.traits
            if t.startswith('CUSTOM_FPGA_FUNCTION_ID_')]


@pytest.mark.parametrize('twice', [False, True])
def test_an_operator_programs_a_fitting_image(stack, fpga, glance,
                                             twice):
    api, driver = stack
    image = glance.upload_bitstream(BITSTREAM, **fitting())

    programmed = program(api, fpga.uuid, image['id'], twice=twice)

    assert programmed.json['uuid'] == fpga.uuid
    assert programmed.json['bitstream_id'] == image['properties']['bs-uuid']
    assert loaded_trait(driver) == [
        'CUSTOM_FPGA_FUNCTION_ID_' + FUNCTION.replace('-', '').upper()]


@pytest.mark.parametrize('changes,words', [
    ({'vendor': 'Xilinx'}, 'vendor'),
    ({'board': 'U200'}, 'board'),
    ({'region_uuid': str(uuid.uuid4())}, 'region'),
])
def test_an_image_that_does_not_fit_is_refused(stack, fpga, glance,
                                               changes, words):
    api, driver = stack
    image = glance.upload_bitstream(BITSTREAM, **fitting(**changes))

    refused = program(api, fpga.uuid, image['id'], status=409)

    assert 'does not fit' in refused.json['error_message']
    assert words in refused.json['error_message']
    assert api.get(DEPLOYABLES + '/' + fpga.uuid).json['bitstream_id'] is None
    assert loaded_trait(driver) == []


def test_an_unknown_image_is_404(stack, fpga):
    api, _ = stack
    missing = str(uuid.uuid4())

    refused = program(api, fpga.uuid, missing, status=404)

    assert missing in refused.json['error_message']


def bind(api, rp, profile):
    return arq_stack.bind_one(api, profile, rp, hostname=HOST, timeout=20,
                              interval=0.05)


def make_profile(admin_context, name, **accel):
    group = {'resources:FPGA': '1'}
    group.update({'accel:' + k: v for k, v in accel.items()})
    return arq_stack.make_profile(admin_context, name, [group])


def test_a_bind_programs_the_bitstream_its_profile_asks_for(
        stack, fpga, glance, admin_context):
    api, driver = stack
    image = glance.upload_bitstream(BITSTREAM, **fitting())
    profile = make_profile(admin_context, 'gzip',
                           bitstream_id=image['properties']['bs-uuid'])

    bound = bind(api, fpga.rp_uuid, profile)

    assert bound['state'] == 'Bound'
    assert api.get(DEPLOYABLES + '/' + fpga.uuid).json['bitstream_id'] == (
        image['properties']['bs-uuid'])
    assert loaded_trait(driver) != []
    # With a handle in use, an operator may not reprogram the card.
    refused = program(api, fpga.uuid, image['id'], status=409)
    assert 'in use' in refused.json['error_message']


def test_a_bind_whose_bitstream_is_missing_fails(stack, fpga, db,
                                                 admin_context):
    api, driver = stack
    profile = make_profile(admin_context, 'nothing-like-it',
                           function_name='no-such-function')

    failed = bind(api, fpga.rp_uuid, profile)

    assert failed['state'] == 'BindFailed'
    assert loaded_trait(driver) == []
    assert failed['attach_handle_uuid'] is None
    with db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).where(
            models.AttachHandle.in_use == sa.true())).scalar_one() == 0
