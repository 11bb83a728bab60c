"""A cyborg-agent that is not root: its vGPU writes go through its privsep
daemon, which is.

The agent runs as ``nobody``, with no capability it could ever regain,
with the NVIDIA driver over the recorded GPU host, whose sysfs files
belong to root and are not writable by others.
Its ``[privsep_agent] helper_command`` is ``cyborg-privsep-launcher``
with ``privsep_launcher`` in the place of sudo, which runs as root only
the command line of the sudoers rule that ``sudoers_rule`` writes. The
test calls the
agent over RabbitMQ as the conductor would: the mdev of a T4 is created
and removed through the daemon, and a handle UUID that is a path is
refused before anything is written.
"""

import os
import pathlib
import pwd
import shutil
import stat
import sys
import tempfile
import time

from oslo_config import cfg
import pytest

from cyborg import context as cyborg_context
from cyborg import privsep
from cyborg import service
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.privsep import launcher as cyborg_launcher
from tests import privsep_rig
from tests.functional.services import privsep_launcher
from tests.functional.services.conftest import ServiceProcess
from tests.unit.drivers.conftest import make_driver_conf
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

AGENT_USER = 'nobody'
HOST = 'unprivileged-compute'
T4 = hosts.T4.bdf
VGPU_TYPE = 'nvidia-222'
T4_VGPU = {('gpu_devices', 'enabled_vgpu_types'): [VGPU_TYPE],
           ('vgpu_%s' % VGPU_TYPE, 'device_addresses'): [T4]}
HANDLE_UUID = '7e57a9e1-5b1d-4c2e-9f3a-0b1c2d3e4f50'
ARQ_UUID = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f0a1b2c3d'


@pytest.fixture
def shared_directory():
    """A directory that ``nobody`` can read (pytest's belong to root,
    mode 0700)."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix='cyborg-unprivileged-'))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory)


# Run by ``unprivileged``: $1 the directory to bind back, $2 a staging
# directory, $3 the directory to cover; then the command.
_EXPOSE = ('mount --bind "$1" "$2" && mount -t tmpfs -o mode=755 tmpfs "$3" '
           '&& mkdir -p "$1" && mount --bind "$2" "$1" && shift 3 '
           '&& exec "$@"')


def unprivileged(uid, gid, home, staging):
    """A command prefix: run as ``uid``:``gid`` with no capability, none
    to regain (empty bounding set, no new privileges).

    When this Python lives below a directory that others may not search
    (pyenv below /root, mode 0700), the command runs in a mount namespace
    of its own where a tmpfs (0755) covers that directory and the Python
    installation is bound back in place: reachable, nothing more.
    """
    command = ['env', 'HOME=%s' % home, 'setpriv', '--reuid=%d' % uid,
               '--regid=%d' % gid, '--clear-groups', '--inh-caps=-all',
               '--bounding-set=-all', '--no-new-privs', '--']
    path = pathlib.Path(os.path.realpath(sys.executable))
    for closed in reversed(path.parents):
        if not closed.stat().st_mode & stat.S_IXOTH:
            inside = path.parents[len(path.parents) - len(closed.parts) - 1]
            staging.mkdir()
            return ['unshare', '--mount', '--propagation', 'private', '--',
                    'sh', '-c', _EXPOSE, 'sh', str(inside), str(staging),
                    str(closed), *command]
    return command


def agent_config(vhost_url, log_file, sysfs_root, helper_command):
    return '\n'.join([
        '[DEFAULT]',
        'host = %s' % HOST,
        'transport_url = %s' % vhost_url,
        'log_file = %s' % log_file,
        '[agent]',
        'enabled_drivers = nvidia_gpu_driver',
        'report_interval = 60',
        'report_timeout = 5',
        'retry_interval = 1',
        '[gpu_devices]',
        'enabled_vgpu_types = %s' % VGPU_TYPE,
        '[vgpu_%s]' % VGPU_TYPE,
        'device_addresses = %s' % T4,
        '[pci]',
        'sysfs_root = %s' % sysfs_root,
        '[%s]' % privsep.CONFIG_SECTION,
        'helper_command = %s' % helper_command,
        '',
    ])


def t4_handle(root):
    """The first vGPU attach handle of the T4, as the conductor sends it."""
    driver = nvidia.NvidiaGPUDriver(make_driver_conf(T4_VGPU),
                                    pci.PCIReader(root))
    [device] = [d for d in driver.discover()
                if d.controlpath_info == inventory_info(T4)]
    handle = device.deployables[0].attach_handles[0]
    return {'uuid': HANDLE_UUID, 'attach_type': handle.attach_type,
            'attach_info': dict(handle.attach_info)}


def rpc_transport(url):
    conf = cfg.ConfigOpts()
    conf([], project='cyborg', default_config_files=[])
    return service.get_transport(conf, url=url)


def inventory_info(address):
    domain, bus, rest = address.split(':')
    device, function = rest.split('.')
    return {'domain': domain, 'bus': bus, 'device': device,
            'function': function}


def wait_until_gone(pids, timeout=15):
    deadline = time.monotonic() + timeout
    while any(os.path.exists('/proc/%d' % pid) for pid in pids):
        assert time.monotonic() < deadline, '%s still running' % pids
        time.sleep(0.2)


def test_an_unprivileged_agent_makes_vgpus_through_its_privsep_daemon(
        vhost_url, shared_directory):
    user = pwd.getpwnam(AGENT_USER)
    root = sysfs.build(str(shared_directory / 'sysfs'), hosts.HOSTS['gpu'],
                       pci_ids=hosts.PCI_IDS)
    create = pathlib.Path(root, 'sys/class/mdev_bus', T4,
                          'mdev_supported_types', VGPU_TYPE, 'create')
    # Root's, and no one else may write it: only the daemon can.
    assert create.stat().st_uid == 0 and not create.stat().st_mode & 0o022
    pci_remove = pathlib.Path(root, 'sys/bus/pci/devices', T4, 'remove')
    pci_remove.write_text('')

    directory = shared_directory / 'agent'
    directory.mkdir()
    os.chown(directory, user.pw_uid, user.pw_gid)
    # The agent's own directory for the link to its daemon's socket.
    links = shared_directory / 'privsep'
    links.mkdir(mode=0o700)
    os.chown(links, user.pw_uid, user.pw_gid)
    link = str(links / 'agent.sock')
    launcher = None
    agent = ServiceProcess('cyborg-agent', directory, '')
    try:
        helper = [privsep_rig.privsep_helper(), '--config-file',
                  str(agent.config_file)]
        rule = cyborg_launcher.sudoers_rule(AGENT_USER, helper, link)
        assert '*' not in rule
        launcher = privsep_launcher.Launcher(
            shared_directory, rule, shared_directory / 'launcher.log')
        helper_command = ' '.join([
            *privsep_rig.launcher_command(link),
            *privsep_launcher.sudo_command(launcher.socket_path), *helper])
        agent.config_file.write_text(agent_config(
            vhost_url, agent.log_file, root, helper_command))
        agent.log_file.touch()
        os.chown(agent.log_file, user.pw_uid, user.pw_gid)
        agent.start(prefix=unprivileged(user.pw_uid, user.pw_gid, directory,
                                        shared_directory / 'staging'))
        agent.wait_for_log(r'cyborg-agent started')
        status = privsep_rig.process_status(agent.process.pid)
        assert status['Uid'].split() == [str(user.pw_uid)] * 4
        assert status['CapEff'] == status['CapBnd'] == '0' * 16

        handle = t4_handle(root)
        transport = rpc_transport(vhost_url)
        context = cyborg_context.admin_context(None)
        api = agent_rpcapi.AgentAPI(transport, timeout=30)
        try:
            api.prepare_attach_handle(context, HOST, 'nvidia_gpu_driver',
                                      handle, ARQ_UUID)
            assert create.read_text() == HANDLE_UUID

            # The daemon: root, the context's capabilities only, started
            # once, through the launcher, for the agent's user, with the
            # rule's command line; the link to its socket is gone.
            [daemon] = privsep_rig.processes_with_arguments(
                str(agent.config_file), '--privsep_context')
            status = privsep_rig.process_status(daemon)
            assert status['Uid'].split()[0] == '0'
            assert status['CapEff'] == privsep_rig.capability_mask(
                privsep.CAPABILITIES)
            assert [r[:3] for r in launcher.requests] == [
                (user.pw_uid, privsep_launcher.parse_rule(rule)[1], 0)]
            assert not os.path.lexists(link)

            mdev = sysfs.kernel_creates_mdev(root, T4, VGPU_TYPE)
            api.release_attach_handle(context, HOST, 'nvidia_gpu_driver',
                                      handle, ARQ_UUID)
            with open(os.path.join(mdev, 'remove')) as f:
                assert f.read() == '1'

            # A handle UUID from the message that is a path: refused, and
            # the PCI function's remove is left alone.
            traversal = dict(handle, uuid='../../pci/devices/%s' % T4)
            with pytest.raises(base.DriverError,
                               match='is not a UUID in canonical form'):
                api.release_attach_handle(context, HOST,
                                          'nvidia_gpu_driver', traversal,
                                          ARQ_UUID)
            assert pci_remove.read_text() == ''
        finally:
            transport.cleanup()

        status, _seconds = agent.stop()
        assert status == 0, agent.tail()
        # The daemon does not outlive its agent.
        wait_until_gone([daemon])
        assert 'Running privsep helper' in agent.log()
    finally:
        agent.kill()
        if launcher is not None:
            launcher.close()
