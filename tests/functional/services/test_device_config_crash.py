"""An agent SIGKILLed while it applies a device configuration finishes it
after its restart.

Real processes over RabbitMQ (the per-test virtual host of
``conftest.py``) and a real Placement: ``cyborg-conductor`` runs the
rollout; ``cyborg-agent``, with the Intel NIC driver over a copy of the
recorded X710 PF (4 VFs), runs the playbooks through its privsep daemon
(the test runs as root, so ``privsep-helper`` without sudo) with the real
ansible-runner. The API is the test's own WSGI application on the same
database.

The policy asks 8 VFs of the PF through an operator's pair,
``sriov_vfs_settled``: the shipped SR-IOV steps, each followed by a wait
until the driver has done what was written (for drivers that remove and
make VFs after the write returns). ``Kernel`` plays that driver on the
tree: it follows ``sriov_numvfs``, and removes the VFs only once the test
lets it. So the first run writes 0 and then waits, deterministically; the
agent is SIGKILLed there. The device stays drained and applying, and
nothing of that run goes on writing (the privsep daemon and every
process of the run end with the agent). Restarted, the agent is asked
again at the conductor's next pass (once the call to the dead agent has
timed out); the second run finds 0 and writes 8; the device ends applied
and released.
"""

import os
import shutil
import signal
import threading
import time

import sqlalchemy as sa
import webtest

from cyborg import privsep
from cyborg.api import app as api_app
from cyborg.db import models
from cyborg.db import session as db_session
from tests import privsep_rig
from tests.conftest import make_conf
from tests.functional.api.test_device_config_policies import ADMIN
from tests.functional.api.test_device_config_policies import POLICIES
from tests.functional.conductor import test_device_config_rollout as rollout
from tests.functional.services import arq_services
from tests.functional.services.conftest import ServiceProcess
from tests.functional.services.conftest import on_engine
from tests.unit.drivers.trees import sysfs

PF = rollout.PF
PAIR = 'sriov_vfs_settled'
# The shipped sriov_vfs setup, with a wait for the driver after each write.
SETUP = """\
- name: SR-IOV VF count, once the driver has followed
  hosts: localhost
  gather_facts: false
  vars:
    vfs: "{{ sysfs_root }}/sys/bus/pci/devices/{{ pci_address }}/virtfn"
  tasks:
    - name: Read the VF count
      cyborg_sysfs_attribute:
        root: "{{ sysfs_root }}"
        device: "{{ pci_address }}"
        attribute: sriov_numvfs
      register: current

    - name: Remove the VFs that exist
      cyborg_sysfs_attribute:
        root: "{{ sysfs_root }}"
        device: "{{ pci_address }}"
        attribute: sriov_numvfs
        value: "0"
      when: current.current | int not in [0, num_vfs | int]

    - name: Wait until the driver has removed them
      ansible.builtin.wait_for:
        path: "{{ vfs }}0"
        state: absent
        timeout: 120
      when: current.current | int != num_vfs | int

    - name: Create the VFs
      cyborg_sysfs_attribute:
        root: "{{ sysfs_root }}"
        device: "{{ pci_address }}"
        attribute: sriov_numvfs
        value: "{{ num_vfs }}"
      when: current.current | int != num_vfs | int

    - name: Wait until the driver has made them
      ansible.builtin.wait_for:
        path: "{{ vfs }}{{ num_vfs | int - 1 }}"
        timeout: 120
      when: current.current | int != num_vfs | int and num_vfs | int > 0
"""
TEARDOWN = """\
- name: SR-IOV VFs removed
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Remove the VFs
      cyborg_sysfs_attribute:
        root: "{{ sysfs_root }}"
        device: "{{ pci_address }}"
        attribute: sriov_numvfs
        value: "0"
"""
VARIABLES = """\
pci_address: {type: pci_address}
num_vfs: {type: integer, min: 0, max: 64}
"""
WANTED = {'playbook': PAIR, 'variables': {'num_vfs': 8}}
# How long the conductor waits for an apply: the call that the killed
# agent never answers ends then. Short, but above one run on a loaded
# machine: a call that times out is asked again, and the new call waits
# behind the run still going.
AGENT_CONFIG_TIMEOUT = 15


class Kernel:
    """The PF's driver on the tree at ``root``: after a write of N to
    ``sriov_numvfs`` it makes N VFs, as i40e does, once none is left;
    after a write of 0 it removes them, but only once ``may_remove`` is
    set. ``numvfs`` holds each value the file came to hold, in order.
    A VF's links are made after its directory and removed before it, so
    that a reader never follows a link into a missing directory. Watched
    by ``wait_until`` as the services are: ``alive`` until it fails."""

    name = 'the kernel stand-in'

    def __init__(self, root):
        self.root = root
        self.numvfs = []
        self.may_remove = threading.Event()
        self._stop = threading.Event()
        self._failure = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='kernel')

    def pf(self, *parts):
        return os.path.join(self.root, 'sys/bus/pci/devices', PF, *parts)

    def virtfns(self):
        return sorted(e for e in os.listdir(self.pf()) if e.startswith(
            'virtfn'))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def alive(self):
        return self._failure is None

    def tail(self):
        return repr(self._failure)

    def _run(self):
        try:
            while not self._stop.wait(0.01):
                self._pass()
        except Exception as exc:  # the test fails with it (alive)
            self._failure = exc

    def _pass(self):
        with open(self.pf('sriov_numvfs')) as f:
            text = f.read().strip()
        if not text.isdigit():
            return  # being written
        if not self.numvfs or self.numvfs[-1] != text:
            self.numvfs.append(text)
        count, present = int(text), self.virtfns()
        if count == 0 and present and self.may_remove.is_set():
            self._remove(present)
        elif count and not present:
            self._make(count)

    def _remove(self, links):
        for link in links:
            vf = os.path.realpath(self.pf(link))
            os.unlink(self.pf(link))
            os.unlink(os.path.join(self.root, 'sys/bus/pci/devices',
                                   os.path.basename(vf)))
            shutil.rmtree(vf)

    def _make(self, count):
        # The same tree with ``count`` VFs, laid out as this one: its
        # relative links hold here too.
        scratch = self.root + '.scratch'
        shutil.rmtree(scratch, ignore_errors=True)
        sysfs.build(scratch, rollout.functions(count))
        made = Kernel(scratch)
        links = made.virtfns()
        for link in links:
            vf = os.path.realpath(made.pf(link))
            address = os.path.basename(vf)
            shutil.copytree(vf, os.path.join(os.path.dirname(
                os.path.realpath(self.pf())), address), symlinks=True)
            bus = os.path.join('sys/bus/pci/devices', address)
            os.symlink(os.readlink(os.path.join(scratch, bus)),
                       os.path.join(self.root, bus))
        for link in links:
            os.symlink(os.readlink(made.pf(link)), self.pf(link))
        shutil.rmtree(scratch)


def write_pair(directory):
    """The operator's pair in ``directory``, root's alone as the privsep
    daemon requires."""
    pair = directory / PAIR
    pair.mkdir(parents=True, mode=0o755)
    for name, text in (('setup.yml', SETUP), ('teardown.yml', TEARDOWN),
                       ('variables.yml', VARIABLES)):
        (pair / name).write_text(text)
        (pair / name).chmod(0o644)
    directory.chmod(0o755)


def agent(deployment, sysfs_root, playbook_dir):
    directory = deployment.directory / 'agent'
    directory.mkdir()
    config_file = directory / 'cyborg-agent.conf'
    text = arq_services.common_config(
        deployment, directory / 'cyborg-agent.log',
        deployment.host) + '\n'.join([
        '[agent]',
        'enabled_drivers = intel_nic_driver',
        # Discovery only at the start and after the apply: the test's
        # kernel changes the tree in between.
        'report_interval = 600',
        'report_timeout = 10',
        'retry_interval = 1',
        '[intel_nic]',
        'physical_device_mappings = physnet1:eth2',
        '[pci]',
        'sysfs_root = %s' % sysfs_root,
        '[device_config]',
        'playbook_dir = %s' % playbook_dir,
        '[metrics]',
        'agent_port = 0',
        # The daemon reads the agent's own configuration (its sysfs root
        # and playbook directory); the test runs as root: no sudo.
        '[%s]' % privsep.CONFIG_SECTION,
        'helper_command = %s --config-file %s' % (
            privsep_rig.privsep_helper(), config_file),
        '',
    ])
    return ServiceProcess('cyborg-agent', directory, text)


def conductor(deployment):
    directory = deployment.directory / 'conductor'
    directory.mkdir()
    text = arq_services.common_config(
        deployment, directory / 'cyborg-conductor.log',
        'conductor-' + deployment.host) + '\n'.join([
        '[conductor]',
        'retry_interval = 1',
        'config_interval = 1',
        'agent_config_timeout = %d' % AGENT_CONFIG_TIMEOUT,
        '[metrics]',
        'conductor_port = 0',
        '',
    ])
    return ServiceProcess('cyborg-conductor', directory, text)


def process_tree(pid):
    """``{(pid, start time)}`` of ``pid`` and every process below it."""
    children = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append((int(entry),
                                                         stat[1]))
    found, todo = set(), [(pid, _stat(pid)[1])]
    while todo:
        process = todo.pop()
        found.add(process)
        todo += children.get(process[0], [])
    return found


def _stat(pid):
    """(parent pid, start time) of ``pid``; None once it has ended (a
    zombie has)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    if fields[0] == 'Z':
        return None
    return int(fields[1]), int(fields[19])


def running(processes):
    """Those of ``processes`` (from ``process_tree``) still running."""
    return {p for p in processes if (_stat(p[0]) or (0, None))[1] == p[1]}


def wait_until(what, predicate, timeout, *services):
    """The first true value of ``predicate``, while every one of
    ``services`` stays alive."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for service in services:
            assert service.alive, '%s exited:\n%s' % (service.name,
                                                      service.tail())
        assert time.monotonic() < deadline, '%s: not within %s s' % (
            what, timeout)
        time.sleep(0.1)


@on_engine('postgresql')
def test_an_agent_killed_during_an_apply_finishes_it_after_restart(
        deployment, tmp_path):
    root = str(tmp_path / 'host')
    sysfs.build(root, rollout.functions(4))
    playbooks = tmp_path / 'playbooks'
    write_pair(playbooks)
    conf = make_conf(deployment.db_url)
    database = db_session.Database(conf)
    api = webtest.TestApp(api_app.build_app(conf, database))
    placement = deployment.placement.adapter()
    compute = deployment.compute_node_name
    the_agent = agent(deployment, root, playbooks)
    the_conductor = conductor(deployment)
    started = time.monotonic()
    run = set()
    try:
        with Kernel(root) as kernel:
            # The agent's first report needs a conductor that serves.
            the_conductor.start().wait_for_log(r'cyborg-conductor started')
            the_agent.start()
            services = (the_conductor, the_agent, kernel)
            wait_until('the PF in Placement', lambda: rollout.nic_inventory(
                placement, compute) == (4, 0), 60, *services)

            policy = api.post_json(POLICIES, {
                'name': 'eight-vfs', 'kind': 'playbook',
                'devices': {'vendor_id': '8086', 'product_id': '1572',
                            'pci_addresses': [PF]},
                'settings': WANTED}, headers=ADMIN).json

            # The first run has written 0 and waits for the driver.
            wait_until('the write of 0', lambda: kernel.numvfs[-1:] == [
                '0'], 60, *services)
            [daemon] = privsep_rig.processes_with_arguments(
                str(the_agent.config_file), '--privsep_context')
            run = process_tree(daemon)
            assert len(run) > 2, run  # the daemon, its runner, ansible
            the_agent.process.kill()
            the_agent.process.wait()
            killed = time.monotonic()
            # Back at once (what a supervisor does); the conductor asks
            # again once its call to the killed agent has timed out.
            since = the_agent.log_size()
            the_agent.start()

            # Nothing of that run goes on: the daemon and every process
            # below it end with the agent.
            wait_until('the end of the killed run', lambda: not running(
                run), 10, *services)
            # Drained, still applying, the device as the run left it.
            assert rollout.nic_inventory(placement, compute) == (4, 4)
            row = status(api, policy['uuid'])
            assert (row['state'], row['applied_settings']) == ('applying',
                                                               None)
            assert kernel.numvfs == ['4', '0']
            assert kernel.virtfns() == ['virtfn%d' % n for n in range(4)]

            # The driver ends the removal once the restarted agent has
            # discovered the host (not while it reads the tree).
            the_agent.wait_for_log(r'Reported 1 devices', 60, since)
            kernel.may_remove.set()
            row = wait_until('the device applied', lambda: applied(
                api, policy['uuid']), 120, *services)
            resumed = time.monotonic()

            assert row['applied_settings'] == WANTED
            assert (row['failed_task'], row['message']) == (None, None)
            # Written as the kernel requires: 0, then 8.
            assert kernel.numvfs == ['4', '0', '8']
            assert kernel.virtfns() == sorted(
                'virtfn%d' % n for n in range(8))
            # Released, with the 8 VFs the agent found again.
            wait_until('the drain released', lambda: rollout.nic_inventory(
                placement, compute) == (8, 0), 30, *services)
            assert devices_of(deployment) == 1
            assert kernel.alive, kernel.tail()
        print('killed at %.1f s, applied %.1f s after the kill, %.1f s '
              'in all' % (killed - started, resumed - killed,
                          time.monotonic() - started))
    finally:
        the_agent.kill()
        the_conductor.kill()
        for pid, _started in running(run):  # a failed test's leftovers
            os.kill(pid, signal.SIGKILL)
        database.engine.dispose()


def status(api, policy_uuid):
    [row] = api.get('%s/%s/status' % (POLICIES, policy_uuid),
                    headers=ADMIN).json['status']
    return row


def applied(api, policy_uuid):
    row = status(api, policy_uuid)
    assert row['state'] in ('applying', 'applied'), row
    return row if row['state'] == 'applied' else None


def devices_of(deployment):
    with deployment.db_engine.connect() as connection:
        return connection.execute(sa.select(sa.func.count()).select_from(
            models.Device).where(
                models.Device.hostname == deployment.host)).scalar()
