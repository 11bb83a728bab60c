"""The agent's privileged helper as a real privsep daemon.

One daemon for the module, started as the agent starts it (oslo.privsep's
``helper_command``, here ``privsep-helper`` itself: the tests run as
root), with ``[pci] sysfs_root`` at a directory where each test writes
part of the recorded GPU host afresh (the T4 with its vGPU types and the
RTX without any, each below its root port) and with stand-ins for the
vendor tools on its ``PATH``. Valid calls do their one write; every
refused call leaves the tree (and what lies outside it) exactly as it was.
"""

import os
import re
import shutil

import pytest

from cyborg import privsep
from cyborg.privsep import checks
from cyborg.privsep import fpga_tool
from cyborg.privsep import mdev
from tests import privsep_rig
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

# The part of the GPU host written for each test.
FUNCTIONS = [f for f in hosts.GPU_HOST if f.bdf in {
    hosts.T4.bdf, hosts.T4.parent, hosts.RTX.bdf, hosts.RTX.parent}]
T4 = hosts.T4.bdf
RTX = hosts.RTX.bdf
T4_TYPE = 'nvidia-222'
T4_MDEV = hosts.T4_MDEVS[0]
NEW = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d'
GBS_ARGS = ['--bus', '0x13', '--device', '0x00', '--function', '0x0']
# A vendor tool stand-in: records its arguments and its capabilities, runs
# record/race (what the agent's user might do meanwhile) if there is one,
# then records what it reads from its last argument, the bitstream.
TOOL = '''#!/bin/sh
printf '%%s\\n' "$@" > %(record)s/argv
for last in "$@"; do :; done
[ -f %(record)s/race ] && sh %(record)s/race
cat "$last" > %(record)s/input 2>/dev/null
grep -E '^(Uid|CapBnd|CapEff|NoNewPrivs):' /proc/self/status \\
    > %(record)s/status
echo programmed
echo warned >&2
exit "$(cat %(record)s/exit-status 2>/dev/null || echo 0)"
'''


class Host:
    # The PCI functions written afresh for each test.
    functions = FUNCTIONS

    def __init__(self, directory):
        self.directory = directory
        self.root = directory / 'host'
        self.outside = directory / 'outside'
        self.record = directory / 'record'
        self.bin = directory / 'bin'

    def fresh(self):
        for path in (self.root, self.outside, self.record):
            shutil.rmtree(path, ignore_errors=True)
        self.outside.mkdir()
        self.record.mkdir()
        sysfs.build(str(self.root), self.functions)
        return self

    def path(self, relative):
        return self.root / relative

    def snapshot(self):
        """Every path below the tree and outside it, with each file's
        bytes and each link's target."""
        state = {}
        for top in (self.root, self.outside, self.record):
            for directory, dirs, files in os.walk(top):
                for name in dirs + files:
                    path = os.path.join(directory, name)
                    if os.path.islink(path):
                        state[path] = ('link', os.readlink(path))
                    elif os.path.isfile(path):
                        with open(path, 'rb') as f:
                            state[path] = ('file', f.read())
                    else:
                        state[path] = ('dir',)
        return state


@pytest.fixture(scope='module')
def daemon(tmp_path_factory):
    directory = tmp_path_factory.mktemp('privsep')
    host = Host(directory).fresh()
    host.bin.mkdir()
    tool = host.bin / 'fpgaconf'
    tool.write_text(TOOL % {'record': host.record})
    tool.chmod(0o755)
    started = privsep_rig.Daemon(directory, host.root,
                                 path='%s:/usr/bin:/bin' % host.bin).start()
    yield started, host
    started.stop()


@pytest.fixture
def host(daemon):
    return daemon[1].fresh()


def refused(host, call, *args, match):
    """``call(*args)`` raises InvalidArgument and nothing changes."""
    before = host.snapshot()
    with pytest.raises(checks.InvalidArgument, match=match):
        call(*args)
    assert host.snapshot() == before


# -- the daemon ---------------------------------------------------------------

def test_the_daemon_is_root_with_one_capability(daemon):
    started, _host = daemon
    assert started.pid and started.pid != os.getpid()
    status = privsep_rig.process_status(started.pid)
    assert status['Uid'].split()[0] == '0'
    mask = privsep_rig.capability_mask(privsep.CAPABILITIES)
    assert (status['CapEff'], status['CapPrm'], status['CapInh']) == (
        mask, mask, '0' * 16)


# -- mdevs --------------------------------------------------------------------

def test_an_mdev_is_created_and_removed(host):
    create = host.path('sys/class/mdev_bus/%s/mdev_supported_types/%s/create'
                       % (T4, T4_TYPE))
    assert mdev.create_mdev(T4, T4_TYPE, NEW) is True
    assert create.read_text() == NEW

    made = sysfs.kernel_creates_mdev(str(host.root), T4, T4_TYPE)
    # Asked again (a bind resumed after a crash): there already.
    create.write_text('')
    assert mdev.create_mdev(T4, T4_TYPE, NEW) is False
    assert create.read_text() == ''

    assert mdev.remove_mdev(NEW, T4, T4_TYPE) is True
    with open(os.path.join(made, 'remove')) as f:
        assert f.read() == '1'
    sysfs.kernel_removes_mdev(str(host.root), made)
    assert mdev.remove_mdev(NEW, T4, T4_TYPE) is False


def test_an_mdev_of_the_recorded_host_is_removed(host):
    remove = host.path('sys/bus/mdev/devices/%s/remove' % T4_MDEV)
    assert mdev.remove_mdev(T4_MDEV, T4, T4_TYPE) is True
    assert remove.read_text() == '1'


def test_an_mdev_that_exists_with_another_type_is_a_conflict(host):
    before = host.snapshot()
    with pytest.raises(mdev.MdevConflict,
                       match='mdev %s exists with type nvidia-222, not '
                             'nvidia-223' % T4_MDEV):
        mdev.create_mdev(T4, 'nvidia-223', T4_MDEV)
    assert host.snapshot() == before


def test_an_mdev_made_for_another_handle_is_not_removed(host):
    """Removal names the parent and type the caller made the mdev with:
    the mdev of that UUID on another parent, or of another type, is
    another allocation's and stays."""
    remove = host.path('sys/bus/mdev/devices/%s/remove' % T4_MDEV)
    before = host.snapshot()
    for parent, mdev_type in ((RTX, T4_TYPE), (T4, 'nvidia-223')):
        with pytest.raises(mdev.MdevConflict, match='not removed'):
            mdev.remove_mdev(T4_MDEV, parent, mdev_type)
    assert host.snapshot() == before
    assert remove.read_text().strip() == ''


def test_bad_parents_and_types_of_a_removal_are_refused(host):
    refused(host, mdev.remove_mdev, T4_MDEV, '../%s' % T4, T4_TYPE,
            match='PCI address')
    refused(host, mdev.remove_mdev, T4_MDEV, T4, '../nvidia-222',
            match='is not an mdev type name')


def test_a_pci_path_in_place_of_an_mdev_uuid_is_refused(host):
    """The review's case: the UUID joined into the path reached a PCI
    function's ``remove``."""
    pci_remove = host.path('sys/bus/pci/devices/%s/remove' % T4)
    pci_remove.write_text('')
    refused(host, mdev.remove_mdev, '../../pci/devices/%s' % T4, T4,
            T4_TYPE,
            match='is not a UUID in canonical form')
    assert pci_remove.read_text() == ''


def test_non_canonical_uuids_are_refused(host):
    for uuid in (NEW.upper(), NEW.replace('-', ''), '{%s}' % NEW,
                 'urn:uuid:' + NEW, NEW + '\n', ' ' + NEW, NEW + '/..', '',
                 None, 42):
        refused(host, mdev.remove_mdev, uuid, T4, T4_TYPE,
                match='is not a UUID in canonical form')
        refused(host, mdev.create_mdev, T4, T4_TYPE, uuid,
                match='is not a UUID in canonical form')


def test_bad_pci_addresses_are_refused(host):
    for address in ('0000:3B:00.0', '3b:00.0', '0000:3b:00.8',
                    '0000:3b:00.0/..', '../0000:3b:00.0', '0000:3b:00.0\n',
                    '', None):
        refused(host, mdev.create_mdev, address, T4_TYPE, NEW,
                match='is not a PCI address')


def test_mdev_types_the_device_does_not_offer_are_refused(host):
    for mdev_type in ('../nvidia-222', '.', '..', 'nvidia-222/create', '',
                      None):
        refused(host, mdev.create_mdev, T4, mdev_type, NEW,
                match='is not an mdev type name')
    # Well formed, but not offered by the T4 (nvidia-472 is the A100's).
    for mdev_type in ('nvidia-999', 'nvidia-472'):
        refused(host, mdev.create_mdev, T4, mdev_type, NEW,
                match='offers no mdev type %s' % mdev_type)


def test_a_device_without_mdev_types_is_refused(host):
    refused(host, mdev.create_mdev, RTX, T4_TYPE, NEW,
            match='does not exist')


def _outside_type_dir(host):
    """A device directory outside the root with a type and its files."""
    parent = host.outside / T4
    type_dir = parent / 'mdev_supported_types' / T4_TYPE
    type_dir.mkdir(parents=True)
    (type_dir / 'create').write_text('')
    return parent, type_dir


def _relink(link, target):
    os.unlink(link)
    os.symlink(target, link)


def test_a_device_link_escaping_the_root_is_refused(host):
    parent, _type_dir = _outside_type_dir(host)
    _relink(host.path('sys/class/mdev_bus/%s' % T4), parent)
    refused(host, mdev.create_mdev, T4, T4_TYPE, NEW,
            match='outside %s' % host.path('sys/devices'))


def test_a_type_link_escaping_the_root_is_refused(host):
    _parent, type_dir = _outside_type_dir(host)
    real_types = os.path.realpath(host.path(
        'sys/class/mdev_bus/%s/mdev_supported_types' % T4))
    shutil.rmtree(os.path.join(real_types, T4_TYPE))
    os.symlink(type_dir, os.path.join(real_types, T4_TYPE))
    refused(host, mdev.create_mdev, T4, T4_TYPE, NEW,
            match='outside %s' % host.path('sys/devices'))


def test_an_mdev_link_escaping_the_root_is_refused(host):
    outside_mdev = host.outside / NEW
    outside_mdev.mkdir()
    (outside_mdev / 'remove').write_text('')
    os.symlink(outside_mdev, host.path('sys/bus/mdev/devices/%s' % NEW))
    refused(host, mdev.remove_mdev, NEW, T4, T4_TYPE,
            match='outside %s' % host.path('sys/devices'))


def test_an_mdev_link_to_a_pci_function_is_refused(host):
    """A UUID that leads to a device that is no mdev (its ``remove``
    would take the PCI function away)."""
    function = os.path.realpath(host.path('sys/bus/pci/devices/%s' % T4))
    (host.root / function / 'remove').write_text('')
    os.symlink(function, host.path('sys/bus/mdev/devices/%s' % NEW))
    refused(host, mdev.remove_mdev, NEW, T4, T4_TYPE,
            match='which is not an mdev')


# -- FPGA tools ---------------------------------------------------------------

@pytest.fixture
def gbs(host):
    path = host.outside / 'nlb_mode_0.gbs'
    path.write_bytes(b'GBS\x00green bitstream')
    return path


def _tool_argv(host):
    return (host.record / 'argv').read_text().splitlines()


def test_a_tool_runs_with_its_bounding_set(host, gbs):
    result = fpga_tool.run_fpga_tool('fpgaconf', GBS_ARGS + [str(gbs)], 30)
    assert result == {'status': 0, 'stdout': 'programmed',
                      'stderr': 'warned'}
    argv = _tool_argv(host)
    assert argv[:-1] == GBS_ARGS
    assert re.fullmatch(r'/dev/fd/\d+', argv[-1])
    assert (host.record / 'input').read_bytes() == gbs.read_bytes()
    status = dict(line.split(':\t') for line in
                  (host.record / 'status').read_text().splitlines())
    bounding = privsep_rig.capability_mask(privsep.TOOL_CAPABILITIES)
    assert status['Uid'].split()[0] == '0'
    assert (status['CapBnd'], status['CapEff']) == (bounding, bounding)
    assert status['NoNewPrivs'] == '1'


def test_a_failed_run_comes_back_with_its_status(host, gbs):
    (host.record / 'exit-status').write_text('4')
    result = fpga_tool.run_fpga_tool('fpgaconf', GBS_ARGS + [str(gbs)], 30)
    assert result['status'] == 4


def test_a_tool_reads_the_bitstream_behind_a_link(host, gbs):
    link = host.outside / 'link.gbs'
    link.symlink_to(gbs)
    fpga_tool.run_fpga_tool('fpgaconf', ['--segment', '0x0001'] + GBS_ARGS
                            + [str(link)], 30)
    argv = _tool_argv(host)
    assert argv[:-1] == ['--segment', '0x0001'] + GBS_ARGS
    assert re.fullmatch(r'/dev/fd/\d+', argv[-1])
    assert (host.record / 'input').read_bytes() == gbs.read_bytes()


def test_a_bitstream_swapped_after_its_check_is_not_what_the_tool_reads(
        host, gbs):
    """The agent's user replaces the checked file with a link to a file
    only root may read while the tool starts: the tool still reads the
    file that was checked."""
    secret = host.outside / 'secret'
    secret.write_bytes(b'root only')
    secret.chmod(0o600)
    (host.record / 'race').write_text('rm -f %s && ln -s %s %s\n'
                                      % (gbs, secret, gbs))
    result = fpga_tool.run_fpga_tool('fpgaconf', GBS_ARGS + [str(gbs)], 30)
    assert result['status'] == 0
    assert gbs.is_symlink()  # the swap happened
    assert (host.record / 'input').read_bytes() == b'GBS\x00green bitstream'


def test_a_bitstream_of_another_user_is_refused(host, gbs):
    """The daemon reads what the agent's user may not: a file of someone
    else (a hard link to it, say) is not handed to a tool."""
    os.chown(gbs, 65534, 65534)
    refused(host, fpga_tool.run_fpga_tool, 'fpgaconf',
            GBS_ARGS + [str(gbs)], 30,
            match=r'belongs to uid 65534, not to the agent\'s user '
                  r'\(uid 0\)')
    assert not (host.record / 'argv').exists()


def test_a_missing_tool_is_named(host, tmp_path):
    xclbin = tmp_path / 'vadd.xclbin'
    xclbin.write_bytes(b'xclbin2\x00')
    with pytest.raises(fpga_tool.ToolError,
                       match='xbmgmt is not installed'):
        fpga_tool.run_fpga_tool('xbmgmt', ['program', '--device', T4,
                                           '--user', str(xclbin)], 30)


def test_unknown_tools_are_refused(host, gbs):
    for tool in ('sh', '/bin/sh', 'rm', 'fpgaconf; rm', '../bin/fpgaconf',
                 '', None):
        refused(host, fpga_tool.run_fpga_tool, tool, GBS_ARGS + [str(gbs)],
                30, match='is not a known FPGA tool')


def test_tool_arguments_outside_the_list_are_refused(host, gbs):
    gbs = str(gbs)
    for args in (
            GBS_ARGS + [gbs, '--force'],
            ['--bus', '0x13; rm -rf /', '--device', '0x00', '--function',
             '0x0', gbs],
            ['--bus', '0x133', '--device', '0x00', '--function', '0x0', gbs],
            ['--device', '0x00', '--bus', '0x13', '--function', '0x0', gbs],
            ['--bus', '0x13', '--device', '0x00', '--function', '0x8', gbs],
            ['-c', 'id', '--bus', '0x13', '--device', '0x00', gbs],
            GBS_ARGS + ['relative/nlb_mode_0.gbs'],
            GBS_ARGS + ['--help'],
            GBS_ARGS,
            # xbmgmt's shape is not fpgaconf's.
            ['program', '--device', T4, '--user', gbs]):
        refused(host, fpga_tool.run_fpga_tool, 'fpgaconf', args, 30,
                match='fpgaconf does not take the arguments')
    for args in ('--help', [gbs, 42], None):
        refused(host, fpga_tool.run_fpga_tool, 'fpgaconf', args, 30,
                match='must be a list of strings')


def test_bitstreams_that_are_no_bitstream_files_are_refused(host, gbs):
    shadow = host.outside / 'passwd.gbs'
    shadow.symlink_to('/etc/passwd')
    directory = host.outside / 'dir.gbs'
    directory.mkdir()
    fifo = host.outside / 'fifo.gbs'
    os.mkfifo(fifo)
    for path, match in ((shadow, r'\(/etc/passwd\) is not a \.gbs file'),
                        (host.outside / 'x.xclbin', r'is not a \.gbs file'),
                        (host.outside / 'missing.gbs', 'No such file'),
                        (directory, 'is not a regular file'),
                        (fifo, 'is not a regular file')):
        refused(host, fpga_tool.run_fpga_tool, 'fpgaconf',
                GBS_ARGS + [str(path)], 30, match=match)


def test_tool_time_limits_outside_the_range_are_refused(host, gbs):
    for timeout in (0, -1, 3601, '30', 2.5, True, None):
        refused(host, fpga_tool.run_fpga_tool, 'fpgaconf',
                GBS_ARGS + [str(gbs)], timeout,
                match='may run 1 to 3600 seconds')
