"""GlanceClient and the bitstream choice against a real Glance.

Glance runs as glance-api under gunicorn on SQLite with the file store
(``tests/glance_service.py``); its page length is 2, so every listing of
three or more images follows ``next`` links.
"""

import hashlib
import os
import pathlib
import socket
import uuid

import pytest

from cyborg import conf as cyborg_conf
from cyborg.clients import glance as glance_client
from cyborg.conductor import bitstreams
from tests import glance_service as glance_fixtures

# The fixtures, by name (a conftest.py would import them instead).
glance_service = glance_fixtures.glance_service
glance = glance_fixtures.glance

FAKE_REGION = 'f4c6a1b2-7d3e-4c58-9a0b-1e2f3d4c5b6a'
FAKE_FPGA = bitstreams.FPGAFacts.from_device(
    {'vendor': 'abcd', 'model': 'FakeFPGA',
     'std_board_info': {'vendor_id': 'abcd', 'product_id': 'abcd'}},
    {'region_uuid': FAKE_REGION})


def new_uuid():
    return str(uuid.uuid4())


def data(size=200_000, seed=b'bitstream'):
    """Deterministic bytes that are not all alike."""
    out = bytearray()
    block = seed
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def leftovers(directory):
    return sorted(name for name in os.listdir(directory)
                  if name.endswith('.part'))


# -- finding ---------------------------------------------------------------


def test_find_bitstreams_asks_glance_for_active_fpga_images(glance):
    function = new_uuid()
    wanted = glance.upload_bitstream(
        data(), name='aes', **{'bs-uuid': new_uuid(), 'bs-name': 'aes-128',
                               'vendor': 'Xilinx', 'board': 'U200',
                               'function_uuid': function, 'version': '1.0'})
    # Same function, but not a bitstream, not uploaded, or deactivated.
    glance.upload_bitstream(data(10), tags=('linux',),
                            function_uuid=function)
    glance.create_image(function_uuid=function)
    retired = glance.upload_bitstream(data(20), function_uuid=function)
    glance.deactivate(retired['id'])
    # Another function.
    glance.upload_bitstream(data(30), function_uuid=new_uuid())

    found = glance.client().find_bitstreams(function_uuid=function)

    assert found == [wanted]
    image = found[0]
    assert image['status'] == 'active'
    assert image['tags'] == ['FPGA']
    assert image['properties'] == {
        'bs-uuid': wanted['properties']['bs-uuid'], 'bs-name': 'aes-128',
        'vendor': 'Xilinx', 'board': 'U200', 'function_uuid': function,
        'version': '1.0'}
    assert image['size'] == 200_000
    assert image['os_hash_algo'] == 'sha512'
    assert image['os_hash_value'] == hashlib.sha512(data()).hexdigest()
    assert image['checksum'] == hashlib.md5(data()).hexdigest()


def test_find_bitstreams_reads_every_page(glance):
    assert glance.page_size == 2
    function = new_uuid()
    uploaded = {glance.upload_bitstream(data(100 + n), function_uuid=function,
                                        version=str(n))['id']
                for n in range(5)}
    found = glance.client().find_bitstreams(function_uuid=function)
    assert len(found) == 5
    assert {image['id'] for image in found} == uploaded


def test_find_bitstreams_by_several_properties_and_by_id(glance):
    function = new_uuid()
    aes = glance.upload_bitstream(data(1), function_uuid=function,
                                  function_name='aes')
    glance.upload_bitstream(data(2), function_uuid=function,
                            function_name='sha')
    client = glance.client()
    assert client.find_bitstreams(function_uuid=function,
                                  function_name='aes') == [aes]
    assert client.find_bitstreams(id=aes['id']) == [aes]
    assert client.find_bitstreams(function_uuid=new_uuid()) == []


def test_from_conf_needs_an_endpoint_or_credentials(glance):
    conf = cyborg_conf.load(default_config_files=[])
    assert glance_client.GlanceClient.from_conf(conf) is None
    conf.set_override('endpoint_override', glance.url, group='glance')
    conf.set_override('download_chunk_size', 8192, group='glance')
    client = glance_client.GlanceClient.from_conf(conf)
    assert client.chunk_size == 8192
    image = glance.upload_bitstream(data(3), function_uuid=new_uuid())
    assert client.get_bitstream(image['id']) == image


def test_an_unreachable_glance_is_a_clear_error():
    with socket.socket() as unused:
        unused.bind(('127.0.0.1', 0))
        port = unused.getsockname()[1]
    conf = cyborg_conf.load(default_config_files=[])
    conf.set_override('endpoint_override', 'http://127.0.0.1:%d' % port,
                      group='glance')
    conf.set_override('connect_retries', 0, group='glance')
    client = glance_client.GlanceClient.from_conf(conf)
    with pytest.raises(glance_client.GlanceError) as raised:
        client.find_bitstreams(function_uuid='x')
    assert raised.value.message.startswith(
        'Cannot reach Glance to list FPGA bitstreams with function_uuid=x: ')
    assert raised.value.status == 502


# -- downloading -----------------------------------------------------------


def test_download_streams_and_verifies(glance, tmp_path):
    image = glance.upload_bitstream(data(1_000_000), function_uuid=new_uuid())
    dest = tmp_path / 'bitstreams' / 'aes.bin'
    client = glance.client(chunk_size=4096)
    assert client.download(image['id'], str(dest)) == str(dest)
    assert dest.read_bytes() == data(1_000_000)
    assert leftovers(dest.parent) == []
    # With the image already in hand, Glance is not asked for it again.
    again = tmp_path / 'again.bin'
    client.download(image['id'], str(again), image=image)
    assert again.read_bytes() == data(1_000_000)


def test_a_wrong_hash_leaves_no_file(glance, tmp_path):
    image = glance.upload_bitstream(data(), function_uuid=new_uuid())
    dest = tmp_path / 'aes.bin'
    dest.write_bytes(b'the previous bitstream')
    claimed = dict(image, os_hash_value='0' * 128)
    with pytest.raises(glance_client.ChecksumMismatch) as raised:
        glance.client().download(image['id'], str(dest), image=claimed)
    assert raised.value.message == (
        'The data of image %s has sha512 %s, but Glance says %s; the '
        'download was discarded.' % (image['id'], image['os_hash_value'],
                                     '0' * 128))
    assert dest.read_bytes() == b'the previous bitstream'
    assert leftovers(tmp_path) == []


def test_md5_alone_is_checked_and_no_checksum_is_refused(glance, tmp_path):
    image = glance.upload_bitstream(data(), function_uuid=new_uuid())
    client = glance.client()
    md5_only = dict(image, os_hash_algo=None, os_hash_value=None)
    client.download(image['id'], str(tmp_path / 'ok.bin'), image=md5_only)
    assert (tmp_path / 'ok.bin').read_bytes() == data()

    with pytest.raises(glance_client.ChecksumMismatch):
        client.download(image['id'], str(tmp_path / 'bad.bin'),
                        image=dict(md5_only, checksum='f' * 32))
    with pytest.raises(glance_client.UnverifiableImage) as raised:
        client.download(image['id'], str(tmp_path / 'none.bin'),
                        image=dict(md5_only, checksum=None))
    assert raised.value.message == (
        'Glance gives no checksum for image %s; refusing to use a bitstream '
        'that cannot be verified.' % image['id'])
    with pytest.raises(glance_client.UnverifiableImage):
        client.download(image['id'], str(tmp_path / 'odd.bin'),
                        image=dict(image, os_hash_algo='nohash'))
    assert sorted(os.listdir(tmp_path)) == ['ok.bin']


def test_data_corrupted_in_the_store_is_detected(glance, tmp_path):
    image = glance.upload_bitstream(data(), function_uuid=new_uuid())
    stored = glance.stored_file(image['id'])
    with open(stored, 'r+b') as raw:
        raw.seek(1000)
        byte = raw.read(1)
        raw.seek(1000)
        raw.write(bytes([byte[0] ^ 0xff]))
    dest = tmp_path / 'aes.bin'
    with pytest.raises(glance_client.ChecksumMismatch) as raised:
        glance.client().download(image['id'], str(dest))
    assert 'has sha512' in raised.value.message
    assert not dest.exists()
    assert leftovers(tmp_path) == []


def test_data_cut_short_in_the_store_is_detected(glance, tmp_path):
    image = glance.upload_bitstream(data(), function_uuid=new_uuid())
    os.truncate(glance.stored_file(image['id']), 50_000)
    dest = tmp_path / 'aes.bin'
    with pytest.raises(glance_client.GlanceError) as raised:
        glance.client().download(image['id'], str(dest))
    assert raised.value.message.startswith(
        'The download of image %s broke off after ' % image['id'])
    assert not dest.exists()
    assert leftovers(tmp_path) == []

    # Data gone from the store: Glance answers 204, nothing to load.
    os.unlink(glance.stored_file(image['id']))
    with pytest.raises(glance_client.GlanceError) as raised:
        glance.client().download(image['id'], str(dest))
    assert raised.value.message == (
        'Glance holds no data for image %s.' % image['id'])
    assert os.listdir(tmp_path) == []


def test_downloading_a_missing_image(glance, tmp_path):
    missing = new_uuid()
    with pytest.raises(glance_client.ImageNotFound) as raised:
        glance.client().download(missing, str(tmp_path / 'x.bin'))
    assert raised.value.message == (
        'Glance could not show image %s: it has no such image (GET '
        '/v2/images/%s answered 404).' % (missing, missing))
    assert os.listdir(tmp_path) == []


# -- choosing the image for the fake FPGA -----------------------------------


def fake_bitstream(glance, function, version, **properties):
    properties.setdefault('vendor', '0xABCD')
    properties.setdefault('board', 'FakeFPGA')
    properties.setdefault('region_uuid', FAKE_REGION)
    properties.setdefault('bs-uuid', new_uuid())
    return glance.upload_bitstream(data(50 + len(version)),
                                   function_uuid=function, version=version,
                                   **properties)


def test_choose_the_bitstream_that_fits_the_fake_fpga(glance, tmp_path):
    function = new_uuid()
    fits = fake_bitstream(glance, function, '1.0')
    fake_bitstream(glance, function, '0.9')
    fake_bitstream(glance, function, '2.0', region_uuid=new_uuid())
    fake_bitstream(glance, function, '3.0', vendor='Xilinx', board='U200')
    client = glance.client()
    request = bitstreams.requested({'resources:FPGA': '1',
                                    'accel:function_id': function})

    chosen = bitstreams.choose_bitstream(client, request, FAKE_FPGA)

    assert chosen == fits
    assert bitstreams.function_trait(chosen) == (
        'CUSTOM_FPGA_FUNCTION_ID_' + uuid.UUID(function).hex.upper())
    path = client.download(chosen['id'], str(tmp_path / 'fake.bin'),
                           image=chosen)
    assert pathlib.Path(path).read_bytes() == data(53)


def test_choose_by_function_uuid_written_as_hex_digits(glance):
    function = new_uuid()
    fits = fake_bitstream(glance, uuid.UUID(function).hex, '1')
    request = bitstreams.BitstreamRequest(function_id=function)
    assert bitstreams.choose_bitstream(glance.client(), request,
                                       FAKE_FPGA) == fits


def test_choose_by_bs_uuid_or_by_image_id(glance):
    bs_uuid = new_uuid()
    by_bs_uuid = fake_bitstream(glance, new_uuid(), '1',
                                **{'bs-uuid': bs_uuid})
    by_id = fake_bitstream(glance, new_uuid(), '1')
    client = glance.client()
    assert bitstreams.choose_bitstream(
        client, bitstreams.BitstreamRequest(bitstream_id=bs_uuid),
        FAKE_FPGA) == by_bs_uuid
    assert bitstreams.choose_bitstream(
        client, bitstreams.BitstreamRequest(bitstream_id=by_id['id']),
        FAKE_FPGA) == by_id


def test_choose_refuses_what_glance_cannot_settle(glance):
    function = new_uuid()
    first = fake_bitstream(glance, function, '2')
    second = fake_bitstream(glance, function, '2')
    client = glance.client()
    request = bitstreams.BitstreamRequest(function_id=function)
    with pytest.raises(bitstreams.BitstreamAmbiguous) as raised:
        bitstreams.choose_bitstream(client, request, FAKE_FPGA)
    for image in (first, second):
        assert image['properties']['bs-uuid'] in raised.value.message

    missing = bitstreams.BitstreamRequest(function_name='no-such-function')
    with pytest.raises(bitstreams.BitstreamNotFound) as raised:
        bitstreams.choose_bitstream(client, missing, FAKE_FPGA)
    assert raised.value.message == (
        'No active Glance image tagged FPGA matches '
        'accel:function_name=no-such-function, so nothing can be programmed '
        "into the FPGA (vendor abcd, model 'FakeFPGA', product id abcd, "
        'region %s, shell unknown).' % FAKE_REGION)
