"""program through the agent's RPC endpoint: download from (a stand-in
for) Glance, the driver loads the file, the function trait is reported."""

import os
import pathlib
import threading
import time

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.qat import intel as qat
from cyborg.agent import rpcapi as agent_rpcapi
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import StandInGlance
from tests.unit.agent.conftest import agent_conf
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

IMAGE_ID = '9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a'
IMAGE_DATA = b'\x00\x01fake bitstream\xff'
FUNCTION_UUID = '5a4c3e2f-1b0d-4f9e-8a7b-6c5d4e3f2a1b'
FUNCTION_TRAIT = 'CUSTOM_FPGA_FUNCTION_ID_5A4C3E2F1B0D4F9E8A7B6C5D4E3F2A1B'
PROPERTIES = {'bs-uuid': '0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f',
              'bs-name': 'gzip', 'vendor': 'abcd', 'board': 'FakeFPGA',
              'region_uuid': fake.REGION_UUID,
              'function_uuid': FUNCTION_UUID, 'function_name': 'gzip'}
BITSTREAM = {'image_id': IMAGE_ID, 'properties': PROPERTIES}


class RecordingFakeDriver(fake.FakeDriver):
    """The fake driver, noting what each program call was given."""

    def __init__(self, conf, pci_reader, fail=None):
        super().__init__(conf, pci_reader)
        self.programmed = []
        self.fail = fail

    def program(self, device, bitstream, metadata=None):
        path = pathlib.Path(bitstream)
        self.programmed.append({'device': device.controlpath_info,
                                'path': path, 'data': path.read_bytes(),
                                'metadata': metadata})
        if self.fail:
            raise base.DriverError(self.fail)
        super().program(device, bitstream, metadata)


def deployable_traits(snapshot):
    [device] = snapshot['devices']
    [deployable] = device['deployables']
    return deployable['traits']


def test_program_downloads_programs_cleans_up_and_reports(serve_agent):
    conf = agent_conf()
    driver = RecordingFakeDriver(conf, pci.PCIReader('/'))
    glance = StandInGlance({IMAGE_ID: IMAGE_DATA})
    agent = serve_agent(conf, [driver], glance=glance)

    summary = agent.api.program(agent.context, HOST, 'fake_driver',
                                fake.ADDRESS.as_info(), BITSTREAM)

    assert summary['device'] == str(fake.ADDRESS)
    assert summary['image_id'] == IMAGE_ID
    assert summary['function_uuid'] == FUNCTION_UUID
    assert 0 <= summary['seconds'] < 10
    [(image_id, dest_path)] = glance.downloads
    [programmed] = driver.programmed
    assert image_id == IMAGE_ID
    assert programmed['path'] == pathlib.Path(dest_path)
    assert programmed['data'] == IMAGE_DATA
    assert programmed['metadata'] == PROPERTIES
    assert programmed['device'] == fake.ADDRESS.as_info()
    # The file and the directory made for it are gone.
    assert not programmed['path'].exists()
    assert not programmed['path'].parent.exists()
    # The report that follows carries the loaded function, and otherwise
    # the fake's inventory as ever.
    snapshot = agent.conductor.next()
    assert snapshot['hostname'] == HOST
    assert deployable_traits(snapshot) == [fake.TRAIT, FUNCTION_TRAIT]
    [device] = snapshot['devices']
    assert device['deployables'][0]['num_accelerators'] == fake.HANDLES


def test_program_seconds_delays_the_fake(serve_agent):
    conf = agent_conf({('fake_driver', 'program_seconds'): 0.5})
    agent = serve_agent(conf, [fake.FakeDriver(conf, pci.PCIReader('/'))],
                        glance=StandInGlance({IMAGE_ID: IMAGE_DATA}))
    started = time.monotonic()
    summary = agent.api.program(agent.context, HOST, 'fake_driver',
                                fake.ADDRESS.as_info(), BITSTREAM)
    assert time.monotonic() - started >= 0.5
    assert summary['seconds'] >= 0.5


def test_program_asks_for_a_report_through_request_report(serve_agent):
    conf = agent_conf()
    asked = threading.Event()
    agent = serve_agent(conf, [fake.FakeDriver(conf, pci.PCIReader('/'))],
                        glance=StandInGlance({IMAGE_ID: IMAGE_DATA}),
                        request_report=asked.set)
    agent.api.program(agent.context, HOST, 'fake_driver',
                      fake.ADDRESS.as_info(), BITSTREAM)
    assert asked.is_set()
    # The service points request_report at its periodic report; no
    # report of the agent's own ran.
    assert agent.conductor.snapshots.empty()


def test_failed_program_leaves_no_file_and_reports_nothing(serve_agent):
    conf = agent_conf()
    driver = RecordingFakeDriver(conf, pci.PCIReader('/'),
                                 fail='The FPGA refused the bitstream')
    agent = serve_agent(conf, [driver],
                        glance=StandInGlance({IMAGE_ID: IMAGE_DATA}))
    with pytest.raises(base.DriverError) as caught:
        agent.api.program(agent.context, HOST, 'fake_driver',
                          fake.ADDRESS.as_info(), BITSTREAM)
    assert caught.value.message == 'The FPGA refused the bitstream'
    [programmed] = driver.programmed
    assert not programmed['path'].parent.exists()
    assert FUNCTION_TRAIT not in driver.discover()[0].deployables[0].traits
    assert agent.conductor.snapshots.empty()


def test_image_that_cannot_be_downloaded(serve_agent):
    conf = agent_conf()
    driver = RecordingFakeDriver(conf, pci.PCIReader('/'))
    glance = StandInGlance({IMAGE_ID: b''})
    agent = serve_agent(conf, [driver], glance=glance)
    with pytest.raises(agent_rpcapi.BitstreamUnavailable) as caught:
        agent.api.program(agent.context, HOST, 'fake_driver',
                          fake.ADDRESS.as_info(),
                          {'image_id': 'other', 'properties': PROPERTIES})
    assert caught.value.message == (
        'Cannot download bitstream image other: LookupError: Glance has '
        'no image other (404)')
    with pytest.raises(agent_rpcapi.BitstreamUnavailable,
                       match='Bitstream image %s has no data' % IMAGE_ID):
        agent.api.program(agent.context, HOST, 'fake_driver',
                          fake.ADDRESS.as_info(), BITSTREAM)
    assert driver.programmed == []
    assert not any(os.path.exists(path) for _, path in glance.downloads)


def test_agent_without_glance_cannot_program(serve_agent):
    conf = agent_conf()
    agent = serve_agent(conf, [fake.FakeDriver(conf, pci.PCIReader('/'))],
                        glance=None)
    with pytest.raises(agent_rpcapi.BitstreamUnavailable,
                       match=r'Host compute1 cannot download bitstreams: '
                             r'\[glance\] is not configured'):
        agent.api.program(agent.context, HOST, 'fake_driver',
                          fake.ADDRESS.as_info(), BITSTREAM)


def test_glance_comes_from_the_configuration_by_default(serve_agent):
    # No [glance] auth_type or endpoint_override: no client.
    conf = agent_conf()
    agent = serve_agent(conf, [fake.FakeDriver(conf, pci.PCIReader('/'))])
    with pytest.raises(agent_rpcapi.BitstreamUnavailable,
                       match=r'\[glance\] is not configured'):
        agent.api.program(agent.context, HOST, 'fake_driver',
                          fake.ADDRESS.as_info(), BITSTREAM)


def test_program_needs_a_device_of_the_driver(serve_agent):
    conf = agent_conf()
    glance = StandInGlance({IMAGE_ID: IMAGE_DATA})
    agent = serve_agent(conf, [fake.FakeDriver(conf, pci.PCIReader('/')),
                               qat.IntelQATDriver(conf, pci.PCIReader('/'))],
                        glance=glance)
    elsewhere = dict(fake.ADDRESS.as_info(), bus='0d')
    with pytest.raises(agent_rpcapi.NotOnThisHost,
                       match='Driver fake_driver on host compute1 finds no '
                             'device at ffff:0d:00.0'):
        agent.api.program(agent.context, HOST, 'fake_driver', elsewhere,
                          BITSTREAM)
    with pytest.raises(agent_rpcapi.DriverNotEnabled,
                       match='xilinx_fpga_driver is not enabled'):
        agent.api.program(agent.context, HOST, 'xilinx_fpga_driver',
                          fake.ADDRESS.as_info(), BITSTREAM)
    assert glance.downloads == []


def test_drivers_of_other_devices_refuse(serve_agent, tmp_path):
    root = sysfs.build(str(tmp_path / 'io'), hosts.HOSTS['io'])
    conf = agent_conf()
    agent = serve_agent(conf, [qat.IntelQATDriver(conf, pci.PCIReader(root))],
                        glance=StandInGlance({IMAGE_ID: IMAGE_DATA}))
    with pytest.raises(base.OperationNotSupported,
                       match='intel_qat_driver cannot program'):
        agent.api.program(agent.context, HOST, 'intel_qat_driver',
                          {'domain': '0000', 'bus': '3d', 'device': '00',
                           'function': '0'}, BITSTREAM)
