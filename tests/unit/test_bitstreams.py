"""The rules that pick the Glance image to program into an FPGA."""

import pytest

from cyborg import exception
from cyborg.conductor import bitstreams
from cyborg.db import models

FUNCTION = '5b1e8a4c-1f0d-4e3a-9c6b-2d7f8e9a0b1c'
REGION = 'f4c6a1b2-7d3e-4c58-9a0b-1e2f3d4c5b6a'
SHELL = '0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9'
OTHER = '99999999-8888-4777-8666-555555555555'

XILINX = bitstreams.FPGAFacts(vendor_id='10ee',
                              model='Alveo U200 XDMA Platform',
                              product_id='5000')
FAKE = bitstreams.FPGAFacts.from_device(
    {'vendor': 'abcd', 'model': 'FakeFPGA',
     'std_board_info': {'vendor_id': 'abcd', 'product_id': 'abcd'}},
    {'region_uuid': REGION})


def image(image_id='i-1', created_at='2026-01-01T00:00:00Z', status='active',
          tags=('FPGA',), **properties):
    properties.setdefault('vendor', 'Xilinx')
    properties.setdefault('board', 'U200')
    return {'id': image_id, 'name': 'bs-%s' % image_id, 'status': status,
            'tags': list(tags), 'created_at': created_at,
            'properties': {k.replace('_', '-') if k.startswith('bs_') else k:
                           v for k, v in properties.items()
                           if v is not None}}


def by_function(*images, facts=XILINX):
    request = bitstreams.BitstreamRequest(function_id=FUNCTION)
    return bitstreams.pick(list(images), request, facts)


# -- what a device profile group asks ---------------------------------------


def test_a_group_that_asks_for_no_bitstream_gives_none():
    assert bitstreams.requested({'resources:FPGA': '1',
                                 'trait:CUSTOM_FPGA_XILINX': 'required',
                                 'accel:attach_target': 'VM'}) is None


def test_a_group_asks_by_every_key_and_uuids_are_canonical():
    request = bitstreams.requested({
        'resources:FPGA': '1',
        'accel:function_id': FUNCTION.upper(),
        'accel:function_name': 'aes-128',
        'accel:bitstream_id': SHELL.replace('-', ''),
        'accel:bitstream_name': 'aes_v2'})
    assert request == bitstreams.BitstreamRequest(
        bitstream_id=SHELL, bitstream_name='aes_v2', function_id=FUNCTION,
        function_name='aes-128')
    assert request.describe() == (
        'accel:bitstream_id=%s, accel:bitstream_name=aes_v2, '
        'accel:function_id=%s, accel:function_name=aes-128'
        % (SHELL, FUNCTION))


def test_glance_is_asked_the_canonical_uuid_then_the_hex_digits():
    request = bitstreams.BitstreamRequest(function_id=FUNCTION,
                                          function_name='nic-40')
    assert request.glance_queries() == [
        {'function_uuid': FUNCTION, 'function_name': 'nic-40'},
        {'function_uuid': FUNCTION.replace('-', ''),
         'function_name': 'nic-40'}]


def test_a_bitstream_id_is_a_bs_uuid_first_then_an_image_id():
    request = bitstreams.BitstreamRequest(bitstream_id=SHELL)
    assert request.glance_queries() == [
        {'bs-uuid': SHELL}, {'bs-uuid': SHELL.replace('-', '')},
        {'id': SHELL}]


def test_names_are_asked_once():
    request = bitstreams.BitstreamRequest(bitstream_name='aes')
    assert request.glance_queries() == [{'bs-name': 'aes'}]


def test_an_image_that_lacks_what_was_asked_is_not_taken():
    request = bitstreams.BitstreamRequest(function_id=FUNCTION,
                                          function_name='aes')
    assert request.matches(image(function_uuid=FUNCTION.replace('-', ''),
                                 function_name='aes'))
    assert not request.matches(image(function_uuid=FUNCTION,
                                     function_name='sha'))
    assert not request.matches(image(function_name='aes'))
    by_id = bitstreams.BitstreamRequest(bitstream_id=SHELL)
    assert by_id.matches(image(image_id=SHELL))
    assert by_id.matches(image(bs_uuid=SHELL.upper()))
    assert not by_id.matches(image(bs_uuid=OTHER))


# -- the device ------------------------------------------------------------


def test_facts_from_a_device_row_and_its_attributes():
    row = models.Device(vendor='0x8086', model='PAC Arria 10',
                        std_board_info={'vendor_id': '8086',
                                        'product_id': '09C4'},
                        vendor_board_info={'vendor_name':
                                           'Intel Corporation'})
    facts = bitstreams.FPGAFacts.from_device(
        row, {'region_uuid': REGION.replace('-', ''), 'shell_id': SHELL,
              'function_uuid': FUNCTION})
    assert facts == bitstreams.FPGAFacts(
        vendor_id='8086', model='PAC Arria 10', product_id='09c4',
        region_uuid=REGION.replace('-', ''), shell_id=SHELL,
        vendor_name='Intel Corporation')
    assert FAKE.vendor_id == 'abcd' and FAKE.region_uuid == REGION
    assert FAKE.shell_id is None


# -- vendor and board ------------------------------------------------------


@pytest.mark.parametrize('vendor', ['Xilinx', 'XILINX', 'xilinx',
                                    'Xilinx, Inc.', '10ee', '0x10EE', 'AMD',
                                    'AMD Xilinx'])
def test_vendor_by_name_or_pci_id(vendor):
    assert bitstreams.vendor_fits(vendor, XILINX)


@pytest.mark.parametrize('vendor', ['Intel', '8086', '0x8086', 'Altera',
                                    'Xil', '', '0x'])
def test_other_vendors_do_not_fit(vendor):
    assert not bitstreams.vendor_fits(vendor, XILINX)


def test_vendor_names_from_the_table_aliases_and_pci_ids():
    intel = bitstreams.FPGAFacts(vendor_id='8086', model='x')
    assert bitstreams.vendor_fits('Intel', intel)
    assert bitstreams.vendor_fits('Altera', intel)
    assert not bitstreams.vendor_fits('AMD', intel)
    # A vendor the table does not list, named by pci.ids.
    acme = bitstreams.FPGAFacts(vendor_id='1d0f', model='x',
                                vendor_name='Amazon.com, Inc.')
    assert bitstreams.vendor_fits('Amazon', acme)
    assert bitstreams.vendor_fits('amazon.com inc', acme)
    assert bitstreams.vendor_fits('0x1D0F', acme)
    assert not bitstreams.vendor_fits('Xilinx', acme)
    assert bitstreams.vendor_fits('0xABCD', FAKE)


@pytest.mark.parametrize('board', ['U200', 'u200', 'Alveo U200',
                                   'alveo-u200', 'XDMA platform', '5000',
                                   '0x5000',
                                   'Alveo U200 XDMA Platform'])
def test_board_by_product_id_model_or_words_of_the_model(board):
    assert bitstreams.board_fits(board, XILINX)


@pytest.mark.parametrize('board', ['U250', 'U20', 'U200 Alveo', '5001', '',
                                   'Alveo U200 XDMA Platform 2'])
def test_other_boards_do_not_fit(board):
    assert not bitstreams.board_fits(board, XILINX)


def test_the_fake_fpga_fits_by_its_model_or_product_id():
    assert bitstreams.board_fits('FakeFPGA', FAKE)
    assert bitstreams.board_fits('0xabcd', FAKE)
    assert not bitstreams.board_fits('Fake', FAKE)


# -- region and shell ------------------------------------------------------


def test_region_must_be_the_devices_in_either_spelling():
    intel_style = bitstreams.FPGAFacts(
        vendor_id='abcd', model='FakeFPGA',
        region_uuid=REGION.replace('-', ''))
    fits = image(vendor='abcd', board='FakeFPGA', region_uuid=REGION)
    assert bitstreams.mismatch(fits, FAKE) is None
    assert bitstreams.mismatch(fits, intel_style) is None
    other = image(vendor='abcd', board='FakeFPGA', region_uuid=OTHER)
    assert bitstreams.mismatch(other, FAKE) == (
        'is built for region %s' % OTHER)
    no_region = bitstreams.FPGAFacts(vendor_id='abcd', model='FakeFPGA')
    assert bitstreams.mismatch(fits, no_region) == (
        'is built for region %s and the device reports no region' % REGION)
    # An image for no particular region fits any.
    assert bitstreams.mismatch(image(vendor='abcd', board='FakeFPGA'),
                               no_region) is None


def test_a_partial_bitstream_needs_the_shell_the_device_runs():
    partial = image(shell_id=SHELL)
    with_shell = bitstreams.FPGAFacts(vendor_id='10ee', model='U200',
                                      shell_id=SHELL.upper())
    assert bitstreams.mismatch(partial, with_shell) is None
    other_shell = bitstreams.FPGAFacts(vendor_id='10ee', model='U200',
                                       shell_id=OTHER)
    assert bitstreams.mismatch(partial, other_shell) == (
        'needs shell %s' % SHELL)
    # Shell unknown: only a region of that shell proves it is loaded.
    assert bitstreams.mismatch(partial, XILINX) == (
        'is a partial bitstream for shell %s, and the device reports '
        'neither which shell it runs nor a region that shell provides'
        % SHELL)
    in_region = bitstreams.FPGAFacts(vendor_id='10ee', model='U200',
                                     region_uuid=REGION)
    assert bitstreams.mismatch(image(shell_id=SHELL, region_uuid=REGION),
                               in_region) is None
    # A known shell that differs wins over a matching region.
    both = bitstreams.FPGAFacts(vendor_id='10ee', model='U200',
                                region_uuid=REGION, shell_id=OTHER)
    assert bitstreams.mismatch(image(shell_id=SHELL, region_uuid=REGION),
                               both) == 'needs shell %s' % SHELL


def test_only_active_images_tagged_fpga_fit():
    assert bitstreams.mismatch(image(status='deactivated'), XILINX) == (
        'is deactivated, not active')
    assert bitstreams.mismatch(image(tags=()), XILINX) == (
        'is not tagged FPGA')


def test_an_image_must_say_its_vendor_and_board():
    assert bitstreams.mismatch(image(vendor=''), XILINX) == (
        'does not say which vendor it is for')
    assert bitstreams.mismatch(image(board=''), XILINX) == (
        'does not say which board it is for')


# -- choosing among several ------------------------------------------------


def test_the_highest_version_wins_numbers_compared_as_numbers():
    chosen = by_function(
        image('a', function_uuid=FUNCTION, bs_uuid=SHELL, version='1.9'),
        image('b', function_uuid=FUNCTION, bs_uuid=OTHER, version='1.10'),
        image('c', function_uuid=FUNCTION, bs_uuid=REGION, version='1.10',
              vendor='Intel'))
    assert chosen['id'] == 'b'
    assert bitstreams.version_key('2.0') > bitstreams.version_key('2.0rc1')
    assert bitstreams.version_key('1.0.1') > bitstreams.version_key('1.0')
    assert bitstreams.version_key('1.0') > bitstreams.version_key(None)


def test_copies_of_one_bitstream_give_the_newest_upload():
    chosen = by_function(
        image('b', '2026-01-01T00:00:00Z', function_uuid=FUNCTION,
              bs_uuid=SHELL, version='2'),
        image('c', '2026-03-01T00:00:00Z', function_uuid=FUNCTION,
              bs_uuid=SHELL.upper(), version='2'),
        image('a', '2026-03-01T00:00:00Z', function_uuid=FUNCTION,
              bs_uuid=SHELL, version='2'))
    # Newest first, then the smallest id: the same answer every time.
    assert chosen['id'] == 'a'


def test_different_bitstreams_at_the_same_version_are_ambiguous():
    with pytest.raises(bitstreams.BitstreamAmbiguous) as raised:
        by_function(
            image('a', function_uuid=FUNCTION, bs_uuid=SHELL, version='3'),
            image('b', function_uuid=FUNCTION, bs_uuid=OTHER, version='3'),
            image('c', function_uuid=FUNCTION, bs_uuid=REGION, version='2'))
    error = raised.value
    assert isinstance(error, exception.CyborgError)
    assert error.status == 409
    assert error.code == 'cyborg.bitstream.ambiguous'
    assert error.message.startswith(
        '2 different bitstreams fit the FPGA (vendor 10ee (XILINX), model '
        "'Alveo U200 XDMA Platform', product id 5000, region unknown, shell "
        'unknown) and match accel:function_id=%s at the same version: '
        'image a (bs-a) with bs-uuid %s, image b (bs-b) with bs-uuid %s.'
        % (FUNCTION, SHELL, OTHER))


def test_nothing_found_names_what_was_asked_and_the_device():
    with pytest.raises(bitstreams.BitstreamNotFound) as raised:
        by_function(image('a', function_uuid=OTHER), facts=FAKE)
    error = raised.value
    assert error.status == 404
    assert error.code == 'cyborg.bitstream.not_found'
    assert error.message == (
        'No active Glance image tagged FPGA matches accel:function_id=%s, '
        "so nothing can be programmed into the FPGA (vendor abcd, model "
        "'FakeFPGA', product id abcd, region %s, shell unknown)."
        % (FUNCTION, REGION))


def test_none_fitting_says_why_for_each_image():
    with pytest.raises(bitstreams.BitstreamNotFound) as raised:
        by_function(
            image('a', function_uuid=FUNCTION, vendor='Intel'),
            image('b', function_uuid=FUNCTION, board='U250'),
            image('c', function_uuid=FUNCTION, region_uuid=OTHER))
    assert raised.value.message == (
        "3 Glance images match accel:function_id=%s, but none fits the FPGA "
        "(vendor 10ee (XILINX), model 'Alveo U200 XDMA Platform', product "
        "id 5000, region unknown, shell unknown): image a (bs-a) is for "
        "vendor 'Intel'; image b (bs-b) is for board 'U250'; image c (bs-c) "
        "is built for region %s and the device reports no region."
        % (FUNCTION, OTHER))


def test_one_image_that_does_not_fit():
    with pytest.raises(bitstreams.BitstreamNotFound) as raised:
        by_function(image('a', function_uuid=FUNCTION, vendor='Intel'))
    assert raised.value.message.startswith(
        '1 Glance image matches accel:function_id=%s, but none fits'
        % FUNCTION)


# -- what Placement learns -------------------------------------------------


def test_function_trait_is_the_function_uuid_in_upper_case_hex():
    assert bitstreams.function_trait(image(function_uuid=FUNCTION)) == (
        'CUSTOM_FPGA_FUNCTION_ID_' + FUNCTION.replace('-', '').upper())
    assert bitstreams.function_trait(
        image(function_uuid=FUNCTION.replace('-', ''))) == (
        'CUSTOM_FPGA_FUNCTION_ID_' + FUNCTION.replace('-', '').upper())
    assert bitstreams.function_trait(image()) is None
    assert bitstreams.function_trait(image(function_uuid='nic-40')) is None
