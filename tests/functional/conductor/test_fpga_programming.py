"""FPGA programming from a bitstream in a real Glance: by an operator
(``PATCH /v2/deployables/<uuid>/program``) and by a bind whose device
profile asks for a bitstream.

API, conductor and the agent's endpoint (the fake driver) share
oslo.messaging's in-process transport; the conductor chooses the image
and the agent downloads it from Glance, checksum checked, and programs.
"""

import threading
import time
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


# -- reservations: one program at a time, never under an instance ---------

class Counting:
    """Counts the fake FPGA's programs."""

    def __init__(self, driver):
        self.count = 0
        self._program = driver.program
        driver.program = self

    def __call__(self, *args, **kwargs):
        self.count += 1
        return self._program(*args, **kwargs)


def test_a_bind_for_another_bitstream_with_a_handle_in_use_programs_nothing(
        stack, fpga, glance, admin_context, db):
    api, driver = stack
    programs = Counting(driver)
    first = glance.upload_bitstream(BITSTREAM, **fitting())
    second = glance.upload_bitstream(BITSTREAM, **fitting(
        function_uuid=str(uuid.uuid4())))
    bound = bind(api, fpga.rp_uuid, make_profile(
        admin_context, 'first', bitstream_id=first['properties']['bs-uuid']))
    assert bound['state'] == 'Bound' and programs.count == 1

    failed = bind(api, fpga.rp_uuid, make_profile(
        admin_context, 'second',
        bitstream_id=second['properties']['bs-uuid']))

    assert failed['state'] == 'BindFailed'
    assert programs.count == 1
    assert api.get(DEPLOYABLES + '/' + fpga.uuid).json['bitstream_id'] == (
        first['properties']['bs-uuid'])
    assert arq_stack.handles_in_use(db) == 1
    assert _reservation(db) is None


def test_a_bind_for_the_bitstream_the_card_holds_programs_nothing(
        stack, fpga, glance, admin_context, db):
    api, driver = stack
    programs = Counting(driver)
    image = glance.upload_bitstream(BITSTREAM, **fitting())
    profile = make_profile(admin_context, 'gzip',
                           bitstream_id=image['properties']['bs-uuid'])

    states = [bind(api, fpga.rp_uuid, profile)['state'] for _ in range(3)]

    assert states == ['Bound'] * 3
    assert programs.count == 1
    assert arq_stack.handles_in_use(db) == 3


def test_a_program_call_and_a_bind_racing_cannot_both_proceed(
        stack, fpga, glance, admin_context, db, conf):
    """The operator's program holds the card's reservation while the
    (slow) FPGA loads; a bind that takes a handle meanwhile sees it and
    fails; with the bind's handle taken, the program call is refused."""
    api, driver = stack
    conf.set_override('program_seconds', 1.5, group='fake_driver')
    programs = Counting(driver)
    image = glance.upload_bitstream(BITSTREAM, **fitting())
    plain = make_profile(admin_context, 'plain')
    answers = []
    operator = threading.Thread(target=lambda: answers.append(
        program(api, fpga.uuid, image['id'], status='*')))
    operator.start()
    try:
        deadline = time.monotonic() + 10
        while _reservation(db) is None:
            assert time.monotonic() < deadline, 'no reservation taken'
            time.sleep(0.02)
        raced = bind(api, fpga.rp_uuid, plain)
    finally:
        operator.join()

    assert raced['state'] == 'BindFailed'
    assert [a.status_int for a in answers] == [200]
    assert programs.count == 1
    assert _reservation(db) is None
    # The other way round: a handle in use refuses the program.
    assert bind(api, fpga.rp_uuid, plain)['state'] == 'Bound'
    refused = program(api, fpga.uuid, image['id'], status=409)
    assert 'in use' in refused.json['error_message']
    assert programs.count == 1


def test_a_reservation_left_by_a_dead_process_is_broken(
        stack, fpga, glance, admin_context, db):
    api, driver = stack
    with db.engine.begin() as conn:
        conn.execute(sa.update(models.Deployable).values(
            reservation='%s deadbeef0000 00000000' % HOST_CONDUCTOR,
            reserved_at=models.utcnow()))
    image = glance.upload_bitstream(BITSTREAM, **fitting())

    assert program(api, fpga.uuid, image['id']).json['bitstream_id'] == (
        image['properties']['bs-uuid'])
    assert _reservation(db) is None


# The Binder of arq_stack is conductor-1: an earlier process of it.
HOST_CONDUCTOR = 'conductor-1'


def _reservation(db):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(models.Deployable.reservation).where(
            models.Deployable.name == fake.DEPLOYABLE_NAME)).scalar_one()
