"""Device configuration playbooks, run by a real privsep daemon with the
real ansible-runner and ansible-core.

One daemon for the module, started as the agent starts it, with ``[pci]
sysfs_root`` at a tree written afresh for each test (the recorded I/O
host's X710, a PF of 64 VFs that holds 4; its QAT C62x, a PF of 16 VFs
that holds 4, and its QAT 4xxx, a gen4 PF with ``qat/state``; the GPU
host's T4, whose vGPU types are mdev types; an H100 whose VFs take a
vGPU type themselves), and ``[device_config] playbook_dir`` at a
directory of operator pairs. The shipped pairs make the writes the kernel
needs, in order (a ``sysfs.Binder`` plays the kernel's part in a driver
binding, a ``sysfs.VFKernel`` in a QAT PF's VF count); every refused call
leaves the tree as it was.
"""

import os
import textwrap

import pytest

from cyborg.agent import device_config
from cyborg.device_config import kinds
from cyborg.privsep import playbook
from tests import privsep_rig
from tests.functional.privsep.test_daemon import Host
from tests.functional.privsep.test_daemon import refused
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

PF = hosts.X710_P0.bdf
VF = hosts.X710_P0_VFS[0].bdf
T4 = hosts.T4.bdf
H100 = hosts.H100.bdf
QAT = hosts.QAT_C62X.bdf
QAT4 = hosts.QAT_4XXX.bdf
FUNCTIONS = ([f for f in hosts.IO_HOST
              if f.bdf in {PF, hosts.X710_P0.parent, QAT,
                           hosts.QAT_C62X.parent, QAT4,
                           hosts.QAT_4XXX.parent}
              or f in hosts.X710_P0_VFS + hosts.QAT_C62X_VFS
              + hosts.QAT_4XXX_VFS]
             + [f for f in hosts.GPU_HOST if f.bdf in {T4, hosts.T4.parent}]
             + [f for f in hosts.H100_HOST
                if f.bdf in {H100, hosts.H100.parent}
                or f in hosts.H100_VFS])
OPERATOR_PAIR = '''\
- name: Operator's own
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Set the function's driver_override
      cyborg_sysfs_attribute:
        root: "{{ sysfs_root }}"
        device: "{{ pci_address }}"
        attribute: driver_override
        value: "{{ driver }}"
'''
OPERATOR_VARIABLES = '''\
pci_address: {type: pci_address}
driver: {type: choice, values: [vfio-pci, iavf]}
'''

# What the processes of a run may do: their own /proc status, written out.
PROBE_PAIR = '''\
- name: Probe
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Read the module's process status
      ansible.builtin.slurp:
        src: /proc/self/status
      register: status
    - name: Write it out
      ansible.builtin.copy:
        content: "{{ status.content | b64decode }}"
        dest: "{{ dest }}"
'''
PROBE_VARIABLES = '''\
dest: {type: string, pattern: '/[A-Za-z0-9_./-]+'}
'''


# An operator's pair that hands its driver to the shipped module as it
# is: the module is what refuses a name that is none.
ANY_DRIVER_PAIR = '''\
- name: Any driver
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Set the driver override
      cyborg_pci_driver:
        root: "{{ sysfs_root }}"
        device: "{{ pci_address }}"
        override: "{{ driver }}"
'''
ANY_DRIVER_VARIABLES = '''\
pci_address: {type: pci_address}
driver: {type: string, pattern: '[a-z0-9./_-]+'}
'''


class IOHost(Host):
    functions = FUNCTIONS

    def binder(self):
        """The kernel's part in a driver binding, for this tree."""
        return sysfs.Binder(str(self.root), {f.bdf: f.driver
                                             for f in self.functions})

    def driver(self, address):
        link = self.path('sys/bus/pci/devices/%s/driver' % address)
        return os.path.basename(os.readlink(link)) if link.is_symlink() \
            else None

    def vfs(self, pf):
        """The drivers of ``pf``'s VFs, in VF order (None: no driver)."""
        directory = self.path('sys/bus/pci/devices/%s' % pf).resolve()
        links = sorted((int(p.name[6:]), p) for p in
                       directory.glob('virtfn*'))
        return [self.driver(os.path.basename(os.readlink(link)))
                for _, link in links]

    def vgpu_types(self):
        """What nvidia/current_vgpu_type holds on each H100 VF."""
        return [self.path('sys/bus/pci/devices/%s/nvidia/current_vgpu_type'
                          % vf.bdf).read_text().strip()
                for vf in hosts.H100_VFS]


def write_pair(top, name, mode=0o755, playbook=OPERATOR_PAIR,
               variables=OPERATOR_VARIABLES):
    directory = top / name
    directory.mkdir(mode=mode)
    directory.chmod(mode)
    (directory / 'setup.yml').write_text(playbook)
    (directory / 'teardown.yml').write_text(playbook)
    (directory / 'variables.yml').write_text(variables)
    return directory


@pytest.fixture(scope='module')
def daemon(tmp_path_factory):
    directory = tmp_path_factory.mktemp('playbooks')
    host = IOHost(directory).fresh()
    operator = directory / 'operator'
    operator.mkdir(mode=0o755)
    write_pair(operator, 'own_driver')
    # Group-writable: another user could change what root runs.
    write_pair(operator, 'loose', mode=0o775)
    write_pair(operator, 'probe', playbook=PROBE_PAIR,
               variables=PROBE_VARIABLES)
    write_pair(operator, 'any_driver', playbook=ANY_DRIVER_PAIR,
               variables=ANY_DRIVER_VARIABLES)
    started = privsep_rig.Daemon(directory, host.root)
    with open(started.config_file, 'a') as f:
        f.write(textwrap.dedent('''\
            [device_config]
            playbook_dir = %s
            playbook_timeout = 120
            ''' % operator))
    started.start()
    yield started, host
    started.stop()


@pytest.fixture
def host(daemon):
    return daemon[1].fresh()


def numvfs(host):
    return host.path('sys/bus/pci/devices/%s/sriov_numvfs'
                     % PF).read_text().strip()


def changed(result):
    return [t['name'] for t in result['tasks'] if t['status'] == 'changed']


def test_a_vf_count_goes_through_zero_and_is_a_no_op_once_applied(host):
    assert numvfs(host) == '4'

    result = playbook.run_playbook('sriov_vfs', 'setup',
                                   {'pci_address': PF, 'num_vfs': 8})

    assert result['status'] == 'successful', result
    # The kernel changes a count only from 0: the 4 VFs go first.
    assert changed(result) == ['Remove the VFs that exist', 'Create the VFs']
    assert numvfs(host) == '8'

    again = playbook.run_playbook('sriov_vfs', 'setup',
                                  {'pci_address': PF, 'num_vfs': 8})
    assert again['status'] == 'successful'
    assert changed(again) == []

    down = playbook.run_playbook('sriov_vfs', 'teardown',
                                 {'pci_address': PF, 'num_vfs': 8})
    assert changed(down) == ['Remove the VFs']
    assert numvfs(host) == '0'


def test_check_mode_says_what_would_change_and_changes_nothing(host):
    before = host.snapshot()

    result = playbook.run_playbook('sriov_vfs', 'setup',
                                   {'pci_address': PF, 'num_vfs': 16},
                                   check_mode=True)

    assert result['status'] == 'successful', result
    assert changed(result) == ['Remove the VFs that exist', 'Create the VFs']
    assert host.snapshot() == before


def test_a_count_above_the_limit_fails_at_its_task_changing_nothing(host):
    before = host.snapshot()

    result = playbook.run_playbook('sriov_vfs', 'setup',
                                   {'pci_address': PF, 'num_vfs': 65})

    assert result['status'] == 'failed'
    assert result['failed_task'] == 'Refuse a count above the VF limit'
    assert 'offers at most 64 VFs, not 65' in result['message']
    assert host.snapshot() == before


def test_an_operator_pair_runs_with_the_shipped_modules(host):
    result = playbook.run_playbook('own_driver', 'setup',
                                   {'pci_address': PF, 'driver': 'vfio-pci'})

    assert result['status'] == 'successful', result
    assert host.path('sys/bus/pci/devices/%s/driver_override'
                     % PF).read_text() == 'vfio-pci'


def test_a_run_is_root_without_any_capability(host):
    dest = host.record / 'status'

    result = playbook.run_playbook('probe', 'setup', {'dest': str(dest)})

    assert result['status'] == 'successful', result
    status = dict(line.split(':', 1) for line in
                  dest.read_text().splitlines() if ':' in line)
    status = {k: v.strip() for k, v in status.items()}
    assert status['Uid'].split()[0] == '0'
    assert (status['CapBnd'], status['CapEff'], status['CapPrm'],
            status['CapInh']) == ('0' * 16,) * 4
    assert status['NoNewPrivs'] == '1'


@pytest.mark.parametrize('name, action, variables, match', [
    # Not a pair of the allowed directories.
    ('../../tmp/evil', 'setup', {}, 'is not a playbook pair name'),
    ('/etc/evil', 'setup', {}, 'is not a playbook pair name'),
    ('no_such_pair', 'setup', {}, 'no such pair'),
    ('loose', 'setup', {'pci_address': PF, 'driver': 'iavf'},
     'may be changed by others than root'),
    ('sriov_vfs', 'install', {'pci_address': PF, 'num_vfs': 8},
     'is not a playbook action'),
    # Variables the pair does not declare, or leaves out.
    ('sriov_vfs', 'setup', {'pci_address': PF, 'num_vfs': 8,
                            'sysfs_root': '/'},
     'declare no variable sysfs_root'),
    ('sriov_vfs', 'setup', {'pci_address': PF, 'num_vfs': 8,
                            'ansible_python_interpreter': '/tmp/x'},
     'declare no variable ansible_python_interpreter'),
    ('sriov_vfs', 'setup', {'pci_address': PF}, 'need the variable num_vfs'),
    # Values that fail their declared type.
    ('sriov_vfs', 'setup', {'pci_address': PF, 'num_vfs': '8'},
     'num_vfs must be a whole number from 0 to 2048'),
    ('sriov_vfs', 'setup', {'pci_address': PF, 'num_vfs': 4096},
     'num_vfs must be a whole number from 0 to 2048'),
    ('sriov_vfs', 'setup', {'pci_address': PF, 'num_vfs': True},
     'num_vfs must be a whole number'),
    ('sriov_vfs', 'setup', {'pci_address': '{{ lookup("pipe", "id") }}',
                            'num_vfs': 8}, 'pci_address must be a PCI'),
    ('sriov_vfs', 'setup', {'pci_address': PF + '/../..', 'num_vfs': 8},
     'pci_address must be a PCI'),
    ('own_driver', 'setup', {'pci_address': PF, 'driver': 'nvidia'},
     'driver must be one of vfio-pci, iavf'),
    ('driver_binding', 'setup', {'pci_address': VF,
                                 'driver': 'vfio-pci/../x'},
     'driver must be one of vfio-pci, own'),
    ('vgpu_type', 'setup', {'pci_address': T4,
                            'mdev_type': '../nvidia-222'},
     'mdev_type must match'),
])
def test_the_daemon_refuses_what_it_may_not_run(host, name, action,
                                                variables, match):
    refused(host, playbook.run_playbook, name, action, variables,
            match=match)


def test_a_pair_through_a_link_is_refused(host, tmp_path):
    operator = os.path.dirname(host.root) + '/operator'
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir(mode=0o755)
    write_pair(elsewhere, 'linked')
    os.symlink(elsewhere / 'linked', os.path.join(operator, 'linked'))
    try:
        refused(host, playbook.run_playbook, 'linked', 'setup',
                {'pci_address': PF, 'driver': 'iavf'},
                match='no such pair')
    finally:
        os.unlink(os.path.join(operator, 'linked'))


# -- driver_binding -----------------------------------------------------------

def test_a_function_is_bound_to_vfio_pci_and_given_back(host):
    with host.binder() as kernel:
        result = playbook.run_playbook('driver_binding', 'setup',
                                       {'pci_address': VF,
                                        'driver': 'vfio-pci'})

    assert result['status'] == 'successful', result
    assert changed(result) == ['Set the driver override',
                               'Unbind the function from its driver',
                               'Have the kernel probe the function']
    # The override first: the probe binds the function to what it names.
    assert kernel.writes == [('driver_override', 'vfio-pci'),
                             ('iavf/unbind', VF), ('drivers_probe', VF)]
    assert host.driver(VF) == 'vfio-pci'

    with host.binder() as kernel:
        again = playbook.run_playbook('driver_binding', 'setup',
                                      {'pci_address': VF,
                                       'driver': 'vfio-pci'})
    assert again['status'] == 'successful', again
    assert changed(again) == []
    assert kernel.writes == []

    with host.binder() as kernel:
        down = playbook.run_playbook('driver_binding', 'teardown',
                                     {'pci_address': VF,
                                      'driver': 'vfio-pci'})
    assert down['status'] == 'successful', down
    assert kernel.writes == [('driver_override', ''),
                             ('vfio-pci/unbind', VF), ('drivers_probe', VF)]
    assert host.driver(VF) == 'iavf'


def test_a_binding_in_check_mode_changes_nothing(host):
    before = host.snapshot()

    result = playbook.run_playbook('driver_binding', 'setup',
                                   {'pci_address': VF, 'driver': 'vfio-pci'},
                                   check_mode=True)

    assert result['status'] == 'successful', result
    assert changed(result) == ['Set the driver override',
                               'Unbind the function from its driver',
                               'Have the kernel probe the function']
    assert host.snapshot() == before


def test_a_binding_the_kernel_does_not_make_fails(host):
    """No kernel acts on the writes here, as with vfio-pci not loaded."""
    result = playbook.run_playbook('driver_binding', 'setup',
                                   {'pci_address': VF, 'driver': 'vfio-pci'})

    assert result['status'] == 'failed'
    assert result['failed_task'] == 'Refuse a binding the kernel did not make'
    assert result['message'] == (
        '%s is bound to iavf after the probe, not to vfio-pci: is that '
        'driver loaded?' % VF)


def test_a_driver_name_with_a_slash_fails_at_its_task(host):
    before = host.snapshot()

    result = playbook.run_playbook('any_driver', 'setup',
                                   {'pci_address': VF,
                                    'driver': '../../vfio-pci'})

    assert result['status'] == 'failed'
    assert result['failed_task'] == 'Set the driver override'
    assert "'../../vfio-pci' is not a driver name" in result['message']
    assert host.snapshot() == before


# -- vgpu_type ----------------------------------------------------------------

def test_the_free_vfs_of_an_h100_take_the_type_and_give_it_back(host):
    # The middle VF holds it already.
    assert host.vgpu_types() == ['0', '1062', '0']

    result = playbook.run_playbook('vgpu_type', 'setup',
                                   {'pci_address': H100,
                                    'mdev_type': 'nvidia-1062'})

    assert result['status'] == 'successful', result
    assert changed(result) == ['Give the free VFs the type']
    assert host.vgpu_types() == ['1062', '1062', '1062']

    again = playbook.run_playbook('vgpu_type', 'setup',
                                  {'pci_address': H100,
                                   'mdev_type': 'nvidia-1062'})
    assert again['status'] == 'successful', again
    assert changed(again) == []

    down = playbook.run_playbook('vgpu_type', 'teardown',
                                 {'pci_address': H100,
                                  'mdev_type': 'nvidia-1062'})
    assert changed(down) == ['Set the VFs of the type back to none']
    assert host.vgpu_types() == ['0', '0', '0']


def test_a_vgpu_type_in_check_mode_changes_nothing(host):
    before = host.snapshot()

    result = playbook.run_playbook('vgpu_type', 'setup',
                                   {'pci_address': H100,
                                    'mdev_type': 'nvidia-1062'},
                                   check_mode=True)

    assert result['status'] == 'successful', result
    assert changed(result) == ['Give the free VFs the type']
    assert host.snapshot() == before


def test_a_vgpu_type_not_offered_fails_at_its_task(host):
    before = host.snapshot()

    # A VF holds nvidia-1062: set outside the policy, it is not cleared.
    result = playbook.run_playbook('vgpu_type', 'setup',
                                   {'pci_address': H100,
                                    'mdev_type': 'nvidia-1061'})

    assert result['status'] == 'failed'
    assert result['failed_task'] == 'Refuse VFs that hold another type'
    assert result['message'].startswith(
        '0000:4e:00.5 holds nvidia-1062; a policy gives a GPU one vGPU '
        'type')
    assert host.snapshot() == before

    host.path('sys/bus/pci/devices/0000:4e:00.5/nvidia/current_vgpu_type'
              ).write_text('0\n')
    before = host.snapshot()

    result = playbook.run_playbook('vgpu_type', 'setup',
                                   {'pci_address': H100,
                                    'mdev_type': 'nvidia-1063'})

    assert result['status'] == 'failed'
    assert result['failed_task'] == 'Refuse a type the GPU does not offer'
    assert result['message'] == (
        '%s does not offer the vGPU type nvidia-1063; it offers '
        'nvidia-1061, nvidia-1062' % H100)
    assert host.snapshot() == before


def test_an_mdev_type_is_only_checked(host):
    """A T4's types are mdev types: nothing to write, once offered."""
    before = host.snapshot()

    result = playbook.run_playbook('vgpu_type', 'setup',
                                   {'pci_address': T4,
                                    'mdev_type': 'nvidia-222'})

    assert result['status'] == 'successful', result
    assert changed(result) == []
    assert host.snapshot() == before


# -- qat_vfs ------------------------------------------------------------------

def _devfn(bdf):
    slot, function = bdf.split(':')[2].split('.')
    return int(slot, 16) * 8 + int(function)


class QATCard:
    """A QAT PF of the recorded trees (``pf``, ``recorded_vfs``), with
    its VFs' driver and its own."""

    def __init__(self, pf, recorded_vfs, vf_driver, pf_driver):
        self.pf = pf
        self.recorded_vfs = recorded_vfs
        self.vf_driver = vf_driver
        self.pf_driver = pf_driver

    def kernel(self, host, vf_driver='own'):
        """The kernel's part in the PF's VF count: VFs bound to
        ``vf_driver`` (the card's own unless given; None: to none), at
        the offset of the recorded ones."""
        return sysfs.VFKernel(
            str(host.root), self.pf, self.recorded_vfs[0].device,
            self.vf_driver if vf_driver == 'own' else vf_driver,
            _devfn(self.recorded_vfs[0].bdf) - _devfn(self.pf.bdf))

    def apply(self, host, applied, wanted):
        """An sriov_vfs policy from ``applied`` to ``wanted`` settings, as
        the agent applies it; (its result, the kernel's record)."""
        with self.kernel(host) as kernel:
            result = device_config.apply(
                kinds.SRIOV_VFS, self.pf.bdf, applied, wanted,
                playbook.run_playbook, kernel_driver=self.pf_driver)
        return result, kernel


C62X = QATCard(hosts.QAT_C62X, hosts.QAT_C62X_VFS, 'c6xxvf', 'c6xx')
GEN4 = QATCard(hosts.QAT_4XXX, hosts.QAT_4XXX_VFS, '4xxxvf', '4xxx')


def test_a_qat_pf_gets_its_vfs_through_zero_bound_to_their_driver(host):
    """An sriov_vfs policy on a C62x PF (4 VFs, for vfio-pci): the agent
    runs the QAT pair, as the PF's driver is c6xx."""
    result, kernel = C62X.apply(host, None, {'num_vfs': 8})

    assert result['state'] == 'applied', result
    assert result['changed'] == ['qat_vfs setup: Remove the VFs that exist',
                                 'qat_vfs setup: Create the VFs']
    assert kernel.writes == [('sriov_numvfs', '0'), ('sriov_numvfs', '8')]
    assert kernel.refused == []
    assert host.vfs(QAT) == ['c6xxvf'] * 8

    again, kernel = C62X.apply(host, {'num_vfs': 8}, {'num_vfs': 8})
    assert (again['state'], again['changed']) == ('applied', [])
    assert kernel.writes == []


@pytest.mark.parametrize('num_vfs, cfg_services, task, message', [
    (17, 'keep', 'Refuse a count above the VF limit',
     '%s offers at most 16 VFs, not 17' % QAT),
    # A gen2 device runs the services its firmware has.
    (8, 'dc', 'Refuse services the device does not take',
     '%s has no qat/state and qat/cfg_services: only a QAT gen4 device '
     '(4xxx, 420xx) takes the services dc; give keep' % QAT),
], ids=['above-the-limit', 'services-of-a-gen2-device'])
def test_what_a_qat_pf_cannot_take_fails_at_its_task_changing_nothing(
        host, num_vfs, cfg_services, task, message):
    before = host.snapshot()

    result = playbook.run_playbook('qat_vfs', 'setup', {
        'pci_address': QAT, 'num_vfs': num_vfs, 'vf_driver': 'c6xxvf',
        'cfg_services': cfg_services})

    assert result['status'] == 'failed'
    assert (result['failed_task'], result['message']) == (task, message)
    assert host.snapshot() == before


def test_qat_vfs_that_come_up_without_their_driver_fail(host):
    """As with qat_c62xvf not loaded: no driver takes the new VFs (after
    a wait of a few seconds for udev to load it)."""
    def made(num_vfs, vf_driver):
        with C62X.kernel(host, vf_driver=None):
            return playbook.run_playbook('qat_vfs', 'setup', {
                'pci_address': QAT, 'num_vfs': num_vfs,
                'vf_driver': vf_driver, 'cfg_services': 'keep'})

    result = made(2, 'c6xxvf')
    assert result['status'] == 'failed'
    assert result['failed_task'] == 'Refuse VFs their driver does not hold'
    assert result['message'] == (
        '0 of the 2 VFs of %s came up bound to c6xxvf: is that driver '
        'loaded (and sriov_drivers_autoprobe 1)?' % QAT)

    # none: VFs to be bound for passthrough, not checked.
    result = made(3, 'none')
    assert result['status'] == 'successful', result
    assert host.vfs(QAT) == [None] * 3


def test_a_gen4_qat_pf_is_down_while_its_vfs_and_services_change(host):
    state = host.path('sys/bus/pci/devices/%s/qat/state' % QAT4)
    with GEN4.kernel(host) as kernel:
        result = playbook.run_playbook('qat_vfs', 'setup', {
            'pci_address': QAT4, 'num_vfs': 8, 'vf_driver': '4xxxvf',
            'cfg_services': 'dc'})

    assert result['status'] == 'successful', result
    # Services only while down; VFs made again, to take them.
    assert kernel.writes == [
        ('qat/state', 'down'), ('sriov_numvfs', '0'),
        ('qat/cfg_services', 'dc'), ('sriov_numvfs', '8'),
        ('qat/state', 'up')]
    assert kernel.refused == []
    assert host.vfs(QAT4) == ['4xxxvf'] * 8

    # The policy's count goes to 0: the teardown takes the VFs (down and
    # up again), the setup finds nothing to do.
    down, kernel = GEN4.apply(host, {'num_vfs': 8}, {'num_vfs': 0})

    assert down['state'] == 'applied', down
    assert kernel.writes == [('qat/state', 'down'), ('sriov_numvfs', '0'),
                             ('qat/state', 'up')]
    assert (host.vfs(QAT4), state.read_text().strip()) == ([], 'up')
