"""The NVMe scrub of the Inspur driver, over a written host.

The host has the boot disk (a Samsung controller, mounted), a whole
Inspur controller and an Inspur controller with two VFs (one bound to
``nvme``, one to ``vfio-pci``), with the nvme driver's sysfs entries,
device nodes and a mount table below the tree's root. The privileged
calls run in the test process, checks included; ``nvme`` is a stand-in
(``StandInNvme``) that answers as nvme-cli 2.x does from the state of a
drive kept in a file, records each call and can be told to fail.
"""

import dataclasses
import json
import os
import shutil
import sys

import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import nvme_scrub
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.ssd import inspur_nvme
from cyborg.conf import scrub as scrub_conf
from cyborg.objects import inventory
from cyborg.privsep import checks
from cyborg.privsep import nvme as privsep_nvme
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

BOOT = '0000:01:00.0'
WHOLE = '0000:b1:00.0'
PF = '0000:d1:00.0'
VF = '0000:d1:00.1'
VF_VFIO = '0000:d1:00.2'

_sriov_port = hosts.root_port('0000:d0:00.0')
_pf = hosts.card(PF, '1bd4', '1001', '010802', _sriov_port.bdf,
                 driver='nvme', sriov_totalvfs=4)
FUNCTIONS = [
    *hosts.CHIPSET, hosts.root_port('0000:b0:00.0'),
    dataclasses.replace(hosts.INSPUR_SSD, driver='nvme'),
    _sriov_port, _pf,
    *sysfs.virtual_functions(_pf, '1002', [VF], driver='nvme'),
    *sysfs.virtual_functions(_pf, '1002', [VF_VFIO], driver='vfio-pci')]

# What the nvme driver shows: function -> (controller, namespaces).
CONTROLLERS = {BOOT: ('nvme0', ('nvme0n1',)),
               WHOLE: ('nvme1', ('nvme1n1', 'nvme1n2')),
               PF: ('nvme2', ('nvme2n1',)),
               VF: ('nvme3', ('nvme3n1',))}
MOUNTS = ('/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n'
          '/dev/nvme0n1p1 /boot/efi vfat rw,relatime 0 0\n'
          'proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n'
          'sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n')

# An Inspur NS8500's identify data as nvme-cli 2.x prints it (-o json),
# less the power states; sanicap and fna are set per test.
ID_CTRL = {
    'vid': 7124, 'ssvid': 7124, 'sn': 'INSP21C0A0042', 'mn': 'NS8500G2',
    'fr': '1.2.0', 'rab': 0, 'ieee': 8657, 'cmic': 0, 'mdts': 5,
    'cntlid': 0, 'ver': 66304, 'rtd3r': 0, 'rtd3e': 0, 'oaes': 512,
    'ctratt': 0, 'rrls': 0, 'cntrltype': 1,
    'fguid': '00000000-0000-0000-0000-000000000000', 'crdt1': 0,
    'crdt2': 0, 'crdt3': 0, 'nvmsr': 0, 'vwci': 0, 'mec': 0, 'oacs': 94,
    'acl': 3, 'aerl': 7, 'frmw': 22, 'lpa': 14, 'elpe': 63, 'npss': 2,
    'avscc': 1, 'apsta': 0, 'wctemp': 343, 'cctemp': 353, 'mtfa': 0,
    'hmpre': 0, 'hmmin': 0, 'tnvmcap': 3840755982336, 'unvmcap': 0,
    'rpmbs': 0, 'edstt': 0, 'dsto': 0, 'fwug': 0, 'kas': 0, 'hctma': 0,
    'mntmt': 0, 'mxtmt': 0, 'sanicap': 0, 'hmminds': 0, 'hmmaxd': 0,
    'nsetidmax': 0, 'endgidmax': 0, 'anatt': 0, 'anacap': 0,
    'anagrpmax': 0, 'nanagrpid': 0, 'pels': 0, 'domainid': 0,
    'megcap': 0, 'sqes': 102, 'cqes': 68, 'maxcmd': 0, 'nn': 32,
    'oncs': 95, 'fuses': 0, 'fna': 0, 'vwc': 6, 'awun': 0, 'awupf': 0,
    'icsvscc': 1, 'nwpc': 0, 'acwu': 0, 'ocfs': 0, 'sgls': 0, 'mnan': 0,
    'maxdna': 0, 'maxcna': 0,
    'subnqn': 'nqn.2021-06.com.inspur:nvm-subsystem-sn-INSP21C0A0042',
    'ioccsz': 0, 'iorcsz': 0, 'icdoff': 0, 'fcatt': 0, 'msdbd': 0,
    'ofcs': 0, 'psds': []}

# The stand-in: nvme-cli's subcommands on the drives of STATE, whose
# sanitize status log changes as a real one does.
STAND_IN = r'''#!%(python)s
import json, os, re, shutil, sys

STATE = %(state)r
TEXT = {0: 'NVM Subsystem has never been sanitized.',
        1: 'Most Recent Sanitize Command Completed Successfully.',
        2: 'Sanitize in Progress.',
        3: 'Most Recent Sanitize Command Failed.'}


def fail(status, message):
    sys.stderr.write(message + '\n')
    with open(STATE, 'w') as f:
        json.dump(state, f)
    sys.exit(status)


with open(STATE) as f:
    state = json.load(f)
subcommand, args = sys.argv[1], sys.argv[2:]
with open(state['calls'], 'a') as f:
    f.write(json.dumps([subcommand] + args) + '\n')
node = os.path.basename(args[0])
drive = state['drives'][re.match(r'nvme\d+', node).group(0)]
log = drive['log']
if subcommand in state['fail']:
    fail(*state['fail'][subcommand])
if subcommand == 'id-ctrl':
    print(json.dumps(dict(state['id_ctrl'], sanicap=drive['sanicap'],
                          fna=drive['fna']), indent=2))
elif subcommand == 'sanitize-log':
    if log['status'] == 2:
        if drive['polls'] == 0:
            log.update(status=drive['result'], sprog=65535)
        else:
            drive['polls'] -= 1
            log['sprog'] = min(65535, log['sprog'] + 16384)
    status = log['status']
    sstat = {'global_erased': int(status == 1), 'no_cmplted_passes':
             int(status == 1), 'status': '(%%d) %%s' %% (status, TEXT[status])}
    page = {'sprog': log['sprog'], 'sstat': sstat,
            'cdw10_info': log['action']}
    for name in ('over_write', 'block_erase', 'crypto_erase'):
        page['time_' + name] = 4294967295
        page['time_%%s_no_dealloc' %% name] = 4294967295
    if state.get('flat_log'):  # SSTAT as the number it is on the drive
        page = {'sprog': log['sprog'], 'sstat': status | (
            int(status == 1) << 8), 'scdw10': log['action']}
    else:
        page = {node: page}
    print(json.dumps(page, indent=2))
elif subcommand == 'sanitize':
    action = int(args[1].split('=')[1])
    if log['status'] == 2:
        fail(1, 'NVMe status: SANITIZE_IN_PROGRESS: The requested function '
                'is prohibited while a sanitize operation is in progress'
                '(0x1d)')
    if not drive['sanicap'] & {4: 1, 2: 2, 3: 4}[action]:
        fail(22, 'crypto erase action unsupported' if action == 4
             else 'block erase action unsupported')
    log.update(status=2, sprog=0, action=action)
elif subcommand == 'format':
    ses = int(args[1].split('=')[1])
    if ses == 2 and not drive['fna'] & 4:
        fail(1, 'NVMe status: INVALID_FORMAT: The LBA Format specified is '
                'not supported(0x410a)')
    gone = state['vanish'].get(node)
    if gone:
        shutil.rmtree(gone)
    print('Success formatting namespace:%%x' %% int(node.split('n')[-1]))
with open(STATE, 'w') as f:
    json.dump(state, f)
'''


class StandInNvme:
    """The drives the stand-in answers for, by controller, and what it
    was asked to do."""

    def __init__(self, directory):
        self.state_file = directory / 'nvme-state.json'
        self.calls_file = directory / 'nvme-calls.jsonl'
        self.state = {'calls': str(self.calls_file), 'id_ctrl': ID_CTRL,
                      'drives': {}, 'fail': {}, 'vanish': {}}
        for name in ('nvme1', 'nvme2', 'nvme3'):
            self.drive(name)

    def drive(self, name, sanicap=0, fna=0, polls=1, result=1,
              status=0, progress=65535, action=0):
        """``polls``: reads of the log that see a started sanitize still
        run (-1: forever); ``result``: its end (1 completed, 3 failed)."""
        self.state['drives'][name] = {
            'sanicap': sanicap, 'fna': fna, 'polls': polls,
            'result': result, 'log': {'status': status, 'sprog': progress,
                                      'action': action}}
        self.save()

    def fail(self, subcommand, status=1, stderr='NVMe status: INTERNAL'):
        self.state['fail'][subcommand] = [status, stderr]
        self.save()

    def save(self):
        self.state_file.write_text(json.dumps(self.state))

    def load(self):
        self.state = json.loads(self.state_file.read_text())
        return self.state

    @property
    def calls(self):
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line
                in self.calls_file.read_text().splitlines()]

    def subcommands(self):
        return [call[0] for call in self.calls]


def _write(path, text=''):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def build_host(root):
    """The host written at ``root``; its root's real path."""
    sysfs.build(str(root), FUNCTIONS, pci_ids=hosts.PCI_IDS)
    root = os.path.realpath(str(root))
    for address, (controller, namespaces) in CONTROLLERS.items():
        device = os.path.realpath(os.path.join(root, 'sys/bus/pci/devices',
                                               address))
        directory = os.path.join(device, 'nvme', controller)
        _write(os.path.join(directory, 'state'), 'live\n')
        _write(os.path.join(root, 'dev', controller))
        for namespace in namespaces:
            os.makedirs(os.path.join(directory, namespace, 'holders'))
            os.makedirs(os.path.join(root, 'sys/block'), exist_ok=True)
            os.symlink(os.path.join(directory, namespace),
                       os.path.join(root, 'sys/block', namespace))
            _write(os.path.join(root, 'dev', namespace))
    boot = os.path.join(root, 'sys/block/nvme0n1')
    for partition in ('nvme0n1p1', 'nvme0n1p2'):
        os.makedirs(os.path.join(boot, partition, 'holders'))
    _write(os.path.join(root, 'proc/self/mounts'), MOUNTS)
    _write(os.path.join(root, 'proc/swaps'),
           'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n')
    return root


@pytest.fixture
def host(tmp_path, privileged_on):
    root = build_host(tmp_path / 'host')
    privileged_on(root)
    return root


@pytest.fixture
def nvme(tmp_path, monkeypatch):
    """The stand-in, first on PATH (setpriv stays in /usr/bin)."""
    stand_in = StandInNvme(tmp_path)
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    script = bindir / 'nvme'
    script.write_text(STAND_IN % {'python': sys.executable,
                                  'state': str(stand_in.state_file)})
    script.chmod(0o755)
    monkeypatch.setenv('PATH', os.pathsep.join([str(bindir), '/usr/bin',
                                                '/bin']))
    monkeypatch.setattr(nvme_scrub, 'POLL_INTERVAL', 0.01)
    return stand_in


@pytest.fixture
def driver(host, driver_conf):
    return inspur_nvme.InspurNVMeSSDDriver(driver_conf(),
                                           pci.PCIReader(host))


def _handle(driver, address):
    for device in driver.discover():
        for deployable in device.deployables:
            for handle in deployable.attach_handles:
                info = handle.attach_info
                if str(inventory.PCIAddress(
                        info['domain'], info['bus'], info['device'],
                        info['function'])) == address:
                    return device, handle
    raise AssertionError('no attach handle at %s' % address)


def scrub(driver, address, method=nvme_scrub.NVME_SANITIZE):
    device, handle = _handle(driver, address)
    return driver.scrub_attach_handle(device, handle,
                                      'b0f3a6a2-8a38-4c43-9d3c-0c1f3e5d7a21',
                                      method)


def failed_step(driver, address):
    with pytest.raises(base.ScrubFailed) as failed:
        scrub(driver, address)
    return failed.value


def node(root, name):
    return os.path.join(root, 'dev', name)


# --- The method, its time, the makes it applies to ----------------------

def test_every_handle_is_scrubbed_by_nvme_sanitize(driver):
    methods = {d.name: driver.scrub_method(d)
               for device in driver.discover() for d in device.deployables}
    # The Samsung boot disk is no device of the driver.
    assert methods == {'ssd_' + WHOLE: 'nvme-sanitize',
                       'ssd_' + PF: 'nvme-sanitize'}
    # The conductor waits longer than the agent waits for the drive.
    assert (scrub_conf.DEFAULT_TIMEOUTS['nvme-sanitize']
            > nvme_scrub.NVME_SETTLE)
    assert set(inspur_nvme.VENDOR_IDS) <= set(privsep_nvme.VENDOR_IDS)


def test_another_method_is_not_the_drivers(driver, nvme):
    with pytest.raises(base.OperationNotSupported):
        scrub(driver, WHOLE, method='flr')
    assert nvme.calls == []


# --- The strongest erase the controller offers ---------------------------

@pytest.mark.parametrize('sanicap, fna, steps, erase', [
    # Crypto erase, block erase and overwrite: crypto erase.
    (0x7, 0x4, ['sanitize:crypto', 'verify'], ['--sanact=4']),
    (0x2, 0x4, ['sanitize:block', 'verify'], ['--sanact=2']),
    (0x0, 0x4, ['format:crypto:nvme1n1', 'format:crypto:nvme1n2',
                'verify'], ['--ses=2', '--force']),
    # An overwrite sanitize alone is never chosen (hours on a drive).
    (0x4, 0x0, ['format:user-data:nvme1n1', 'format:user-data:nvme1n2',
                'verify'], ['--ses=1', '--force']),
])
def test_the_strongest_erase_is_chosen(driver, nvme, host, sanicap, fna,
                                       steps, erase):
    nvme.drive('nvme1', sanicap=sanicap, fna=fna)
    assert scrub(driver, WHOLE) == steps
    controller = node(host, 'nvme1')
    calls = nvme.calls
    assert calls[0] == ['id-ctrl', controller, '-o', 'json']
    if steps[0].startswith('sanitize'):
        assert calls[1:] == [
            ['sanitize-log', controller, '-o', 'json'],
            ['sanitize', controller, *erase],
            # One read sees it running, the next its end.
            ['sanitize-log', controller, '-o', 'json'],
            ['sanitize-log', controller, '-o', 'json']]
        assert nvme.load()['drives']['nvme1']['log']['status'] == 1
    else:
        assert calls[1:] == [
            ['format', node(host, 'nvme1n1'), *erase],
            ['format', node(host, 'nvme1n2'), *erase],
            ['id-ctrl', controller, '-o', 'json']]


def test_a_sanitize_log_in_the_older_flat_shape_is_read(driver, nvme):
    nvme.state['flat_log'] = True
    nvme.drive('nvme1', sanicap=0x1)
    assert scrub(driver, WHOLE) == ['sanitize:crypto', 'verify']
    assert privsep_nvme.sanitize_log(WHOLE) == {
        'status': 1, 'progress': 65535, 'action': 4, 'global_erased': True}


# --- What the sanitize log says ------------------------------------------

def test_a_failed_sanitize_fails_the_verification(driver, nvme):
    nvme.drive('nvme1', sanicap=0x1, result=3)
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'verify'
    assert 'the last sanitize failed' in failed.message


def test_a_sanitize_past_the_settle_time_is_waited_for_again(
        driver, nvme, monkeypatch):
    monkeypatch.setattr(nvme_scrub, 'NVME_SETTLE', 0.2)
    nvme.drive('nvme1', sanicap=0x3, polls=-1)
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'verify'
    assert 'still runs after 0.2 s' in failed.message
    assert '% done' in failed.message
    assert nvme.subcommands().count('sanitize') == 1

    # The retry finds it running: it waits, starts no other, and passes
    # once the drive says it is done.
    state = nvme.load()
    state['drives']['nvme1']['polls'] = 1
    nvme.save()
    assert scrub(driver, WHOLE) == ['sanitize:crypto:resumed', 'verify']
    assert nvme.subcommands().count('sanitize') == 1


def test_a_log_that_reports_another_sanitize_fails(driver, nvme):
    # The log says a block erase completed, not the crypto erase started
    # (the drive ignored the command, or another ran).
    nvme.drive('nvme1', sanicap=0x1, polls=0)
    nvme.fail('sanitize', status=0, stderr='')
    state = nvme.load()
    state['drives']['nvme1']['log'].update(status=1, action=2)
    nvme.save()
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'verify'
    assert 'completed block sanitize, not the crypto one' in failed.message


# --- A tool that fails names its step ------------------------------------

@pytest.mark.parametrize('subcommand, sanicap, step', [
    ('id-ctrl', 0x1, 'identify'),
    ('sanitize', 0x1, 'sanitize'),
    ('format', 0x0, 'format'),
])
def test_a_failing_nvme_fails_its_step(driver, nvme, subcommand, sanicap,
                                       step):
    nvme.drive('nvme1', sanicap=sanicap, fna=0x4)
    nvme.fail(subcommand, status=6, stderr='NVMe status: INTERNAL: The '
                                           'command was not completed')
    failed = failed_step(driver, WHOLE)
    assert failed.step == step
    assert 'exit status 6' in failed.message
    assert 'NVMe status: INTERNAL' in failed.message


def test_nvme_cli_missing_fails_the_identify_step(driver, tmp_path,
                                                  monkeypatch):
    monkeypatch.setenv('PATH', '/usr/bin:/bin')
    if shutil.which('nvme'):
        monkeypatch.setenv('PATH', str(tmp_path))
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'identify'
    assert 'nvme-cli is not installed' in failed.message


def test_a_namespace_gone_after_its_format_fails_the_verification(
        driver, nvme, host):
    nvme.drive('nvme1', fna=0x4)
    nvme.state['vanish'] = {'nvme1n2': os.path.join(host, 'sys/bus/pci/'
                                                    'devices', WHOLE,
                                                    'nvme/nvme1/nvme1n2')}
    nvme.save()
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'verify'
    assert 'namespace nvme1n2' in failed.message
    assert 'gone after its format' in failed.message


def test_a_controller_without_namespaces_cannot_be_shown_erased(
        driver, nvme, host):
    for namespace in ('nvme1n1', 'nvme1n2'):
        link = os.path.join(host, 'sys/block', namespace)
        shutil.rmtree(os.path.realpath(link))
        os.unlink(link)
    nvme.drive('nvme1', fna=0x4)
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'format'
    assert 'has no namespace' in failed.message
    assert nvme.subcommands() == ['id-ctrl']


# --- VFs: a format of their own namespaces, never a sanitize -------------

def test_a_vf_formats_its_own_namespaces(driver, nvme, host):
    nvme.drive('nvme3', sanicap=0x3, fna=0x4)
    assert scrub(driver, VF) == ['format:crypto:nvme3n1', 'verify']
    assert nvme.calls == [
        ['id-ctrl', node(host, 'nvme3'), '-o', 'json'],
        # The privileged side reads FNA itself before it formats a VF.
        ['id-ctrl', node(host, 'nvme3'), '-o', 'json'],
        ['format', node(host, 'nvme3n1'), '--ses=2', '--force'],
        ['id-ctrl', node(host, 'nvme3'), '-o', 'json']]


def test_a_vf_whose_format_reaches_the_subsystem_is_not_erased(
        driver, nvme, host):
    nvme.drive('nvme3', fna=0x6)
    failed = failed_step(driver, VF)
    assert failed.step == 'format'
    assert 'every namespace of its NVM subsystem (FNA 0x6)' in failed.message
    assert 'it is a VF of %s' % PF in failed.message
    assert nvme.subcommands() == ['id-ctrl']
    # The privileged side refuses it too, asked directly.
    with pytest.raises(checks.InvalidArgument, match='FNA 0x6'):
        privsep_nvme.format_namespace(VF, 'nvme3n1', 'crypto')
    assert 'format' not in nvme.subcommands()


def test_a_sanitize_is_refused_where_it_reaches_other_tenants(host, nvme):
    with pytest.raises(checks.InvalidArgument,
                       match='it has 2 VFs enabled: refused'):
        privsep_nvme.start_sanitize(PF, 'crypto')
    with pytest.raises(checks.InvalidArgument,
                       match='it is a VF of %s: refused' % PF):
        privsep_nvme.start_sanitize(VF, 'crypto')
    assert 'sanitize' not in nvme.subcommands()


def test_a_controller_sharing_its_subsystem_is_formatted(driver, nvme,
                                                         host):
    # A second controller (another port) in the NVM subsystem: a sanitize
    # would erase behind it; a format of this controller's namespaces
    # does not.
    subsystem = os.path.join(host, 'sys/class/nvme-subsystem/nvme-subsys1')
    for name in ('nvme1', 'nvme4'):
        os.makedirs(os.path.join(subsystem, name))
    nvme.drive('nvme1', sanicap=0x1, fna=0x4)
    assert scrub(driver, WHOLE) == ['format:crypto:nvme1n1',
                                    'format:crypto:nvme1n2', 'verify']
    with pytest.raises(checks.InvalidArgument,
                       match=r'has other controllers \(nvme4\)'):
        privsep_nvme.start_sanitize(WHOLE, 'crypto')
    assert 'sanitize' not in nvme.subcommands()


def test_a_function_bound_to_vfio_pci_is_not_rebound(driver, nvme, host):
    failed = failed_step(driver, VF_VFIO)
    assert failed.step == 'identify'
    assert 'bound to vfio-pci, not nvme' in failed.message
    assert 'nothing is rebound' in failed.message
    assert nvme.calls == []
    device = os.path.join(host, 'sys/bus/pci/devices', VF_VFIO)
    assert os.path.basename(os.path.realpath(
        os.path.join(device, 'driver'))) == 'vfio-pci'
    with open(os.path.join(device, 'driver_override')) as f:
        assert f.read() == '(null)\n'


# --- What the host uses is never erased -----------------------------------

def test_a_mounted_controller_is_not_sanitized(driver, nvme, host):
    with open(os.path.join(host, 'proc/self/mounts'), 'a') as f:
        f.write('/dev/nvme1n2p1 /srv/tenant\\040data xfs rw 0 0\n')
    nvme.drive('nvme1', sanicap=0x1)
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'sanitize'
    assert 'nvme1n2p1 is mounted on /srv/tenant data' in failed.message
    assert 'sanitize' not in nvme.subcommands()

    nvme.drive('nvme1', fna=0x4)
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'format'
    assert 'format' not in nvme.subcommands()


def test_a_namespace_held_by_device_mapper_is_not_erased(driver, nvme,
                                                         host):
    os.makedirs(os.path.join(host, 'sys/block/nvme1n1/holders/dm-0'))
    nvme.drive('nvme1', sanicap=0x2)
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'sanitize'
    assert 'nvme1n1 is held by dm-0' in failed.message
    assert 'sanitize' not in nvme.subcommands()


def test_a_swap_namespace_is_not_erased(driver, nvme, host):
    with open(os.path.join(host, 'proc/swaps'), 'a') as f:
        f.write('/dev/nvme1n1\tpartition\t8388604\t0\t-2\n')
    nvme.drive('nvme1', sanicap=0x1)
    failed = failed_step(driver, WHOLE)
    assert failed.step == 'sanitize'
    assert 'nvme1n1 is swapped on' in failed.message


def test_the_boot_disk_cannot_be_reached(host, nvme):
    # Another make: refused before anything looks at it, mounted or not.
    for call in (lambda: privsep_nvme.identify_controller(BOOT),
                 lambda: privsep_nvme.start_sanitize(BOOT, 'crypto'),
                 lambda: privsep_nvme.format_namespace(BOOT, 'nvme0n1',
                                                       'crypto')):
        with pytest.raises(checks.InvalidArgument,
                           match='not an NVMe controller of 1bd4'):
            call()
    # Nor through a controller that is the driver's.
    with pytest.raises(checks.InvalidArgument,
                       match="'nvme0n1' is not one of its namespaces"):
        privsep_nvme.format_namespace(WHOLE, 'nvme0n1', 'crypto')
    assert nvme.calls == []


# --- Arguments the privileged side refuses --------------------------------

@pytest.mark.parametrize('address', [
    '0000:B1:00.0', '0000:b1:00.0/../../../..', '../../../dev/nvme1',
    '/dev/nvme1', 'b1:00.0', None, 5])
def test_a_bad_pci_address_is_refused(host, nvme, address):
    for call in (lambda: privsep_nvme.identify_controller(address),
                 lambda: privsep_nvme.sanitize_log(address),
                 lambda: privsep_nvme.start_sanitize(address, 'crypto'),
                 lambda: privsep_nvme.format_namespace(address, 'nvme1n1',
                                                       'crypto')):
        with pytest.raises(checks.InvalidArgument,
                           match='is not a PCI address'):
            call()
    assert nvme.calls == []


def test_a_function_not_on_the_bus_is_refused(host, nvme):
    with pytest.raises(checks.InvalidArgument, match='does not exist'):
        privsep_nvme.identify_controller('0000:ee:00.0')
    assert nvme.calls == []


@pytest.mark.parametrize('call, match', [
    (lambda: privsep_nvme.start_sanitize(WHOLE, 'overwrite'),
     'not a sanitize action'),
    (lambda: privsep_nvme.start_sanitize(WHOLE, 4), 'not a sanitize action'),
    (lambda: privsep_nvme.format_namespace(WHOLE, 'nvme1n1', 'none'),
     'not a secure erase'),
    (lambda: privsep_nvme.format_namespace(WHOLE, '../nvme1n1', 'crypto'),
     'not one of its namespaces'),
    (lambda: privsep_nvme.format_namespace(WHOLE, '/dev/nvme1n1',
                                           'crypto'),
     'not one of its namespaces'),
    (lambda: privsep_nvme.format_namespace(WHOLE, ['nvme1n1'], 'crypto'),
     'not one of its namespaces'),
])
def test_other_bad_arguments_are_refused(host, nvme, call, match):
    with pytest.raises(checks.InvalidArgument, match=match):
        call()
    assert nvme.calls == []


def test_identify_answers_what_the_controller_can_erase(host, nvme):
    nvme.drive('nvme1', sanicap=0x3, fna=0x4)
    assert privsep_nvme.identify_controller(WHOLE) == {
        'controller': 'nvme1', 'namespaces': ['nvme1n1', 'nvme1n2'],
        'shared': '', 'sanicap': 3, 'fna': 4, 'model': 'NS8500G2',
        'serial': 'INSP21C0A0042'}
