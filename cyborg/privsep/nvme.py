"""Erasing an NVMe controller that a VM had, with nvme-cli, as root.

The agent names a PCI function, never a device node: the daemon finds the
function below its own ``[pci] sysfs_root``, requires an NVMe controller
(class 0108) of ``VENDOR_IDS`` bound to the kernel's ``nvme`` driver, and
takes the controller (``nvme/nvmeN``) and its namespaces (``nvmeNnM``, or
the ``nvmeScNnM`` paths of a multipath namespace ``nvmeSnM``) from that
function's sysfs directory. Nothing is rebound: a function bound to
``vfio-pci`` (a VM may still hold it) has no controller on the host, and
every call on it is refused with a sentence that says so.

``nvme`` is found on the daemon's own ``PATH`` and runs with one of the
fixed argument shapes of ``SHAPES``, no standard input, a bounding set of
``TOOL_CAPABILITIES`` with no new privileges (``setpriv``; its admin
commands need CAP_SYS_ADMIN) and a time limit. The reads answer in JSON
(``-o json``), parsed here: the agent gets a few checked numbers.

What erases refuses first:

- a controller whose erase reaches another tenant: a sanitize erases the
  whole NVM subsystem, so it is refused on a VF, on a controller with
  VFs enabled and on one whose subsystem has other controllers; a format
  is refused there too when the controller says (FNA bits 0 and 1) that a
  format or its secure erase applies to every namespace of the subsystem;
- a controller whose namespaces the host uses: a namespace or one of its
  partitions mounted or swapped on (the root's ``proc/self/mounts`` and
  ``proc/swaps``), held by another block device (device mapper, md:
  ``holders``), or that the kernel will not open exclusively (``EBUSY``).
  A sanitize keeps the namespaces open exclusively while it is started,
  so that nothing mounts one in between. The host's own disk is always
  mounted: it can never be erased.
"""

import collections
import contextlib
import errno
import json
import os
import re
import shutil
import subprocess

from oslo_privsep import capabilities

from cyborg.privsep import agent_pctxt
from cyborg.privsep import checks
from cyborg.privsep import tool_args

# Those of the Inspur NVMe driver (cyborg.accelerator.drivers.ssd.
# inspur_nvme), which offers no other make: the host's boot disk is an
# NVMe drive too, and the daemon erases nothing it does not offer.
VENDOR_IDS = ('1bd4',)
NVME_CLASS = '0x0108'
HOST_DRIVER = 'nvme'
TOOL = 'nvme'
TOOL_CAPABILITIES = (capabilities.CAP_SYS_ADMIN,)

# The kernel aborts an admin command after 60 s (nvme admin_timeout): a
# read or a sanitize start that is not back by then has failed. nvme-cli
# gives a Format NVM 600 s of its own.
ADMIN_SECONDS = 70
FORMAT_SECONDS = 620
# The end of the tool's output that comes back in an error.
_QUOTED_CHARS = 1000

SANITIZE_ACTIONS = {'block': 2, 'crypto': 4}
SECURE_ERASES = {'user-data': 1, 'crypto': 2}

# Sanitize status log, SSTAT bits 2:0.
NEVER_SANITIZED = 0
SANITIZE_COMPLETED = 1
SANITIZE_IN_PROGRESS = 2
SANITIZE_FAILED = 3

_CONTROLLER = re.compile(r'nvme(\d+)', re.ASCII)
_NAMESPACE = re.compile(r'nvme(\d+)n(\d+)', re.ASCII)
_PATH = re.compile(r'nvme(\d+)c(\d+)n(\d+)', re.ASCII)
_STATUS = re.compile(r'\((\d+)\)')
_CONTROLLER_NODE = re.compile(r'/dev/nvme\d+', re.ASCII)
_NAMESPACE_NODE = re.compile(r'/dev/nvme\d+n\d+', re.ASCII)

# The argument shapes run, after the subcommand: the device node (a path
# below the daemon's root), then fixed words.
SHAPES = {
    'id-ctrl': (_CONTROLLER_NODE, '-o', 'json'),
    'sanitize-log': (_CONTROLLER_NODE, '-o', 'json'),
    'sanitize': (_CONTROLLER_NODE,
                 re.compile(r'--sanact=[%s]' % ''.join(
                     str(v) for v in SANITIZE_ACTIONS.values()))),
    'format': (_NAMESPACE_NODE,
               re.compile(r'--ses=[%s]' % ''.join(
                   str(v) for v in SECURE_ERASES.values())), '--force'),
}


class NvmeFailed(Exception):
    """nvme-cli could not be run, failed, or answered what is not
    understood."""


Controller = collections.namedtuple(
    'Controller', 'address device name namespaces shared')


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _bound_driver(device):
    link = os.path.join(device, 'driver')
    return (os.path.basename(os.path.realpath(link))
            if os.path.lexists(link) else None)


def _controller(pci_address):
    """The controller of the function ``pci_address``, checked."""
    checks.pci_address(pci_address)
    root = checks.sysfs_root()
    what = 'NVMe controller %s' % pci_address
    device = checks.pci_function(root, pci_address, what)
    vendor = (_read(os.path.join(device, 'vendor')) or '').lower()
    pci_class = (_read(os.path.join(device, 'class')) or '').lower()
    if (vendor.removeprefix('0x') not in VENDOR_IDS
            or not pci_class.startswith(NVME_CLASS)):
        raise checks.InvalidArgument(
            '%s: vendor %s, class %s is not an NVMe controller of %s, the '
            'only makes erased' % (what, vendor or '?', pci_class or '?',
                                   ', '.join(VENDOR_IDS)))
    bound = _bound_driver(device)
    if bound != HOST_DRIVER:
        raise checks.InvalidArgument(
            '%s: the function is bound to %s, not %s: the host cannot reach '
            'the controller to erase it, and nothing is rebound while a VM '
            'may hold it; once no VM has it, bind it to %s (or let libvirt '
            'give it back) and the next scrub erases it'
            % (what, bound or 'no driver', HOST_DRIVER, HOST_DRIVER))
    try:
        names = [n for n in os.listdir(os.path.join(device, 'nvme'))
                 if _CONTROLLER.fullmatch(n)]
    except OSError:
        names = []
    if len(names) != 1:
        raise checks.InvalidArgument(
            '%s: the nvme driver shows %s controller for it (nvme/): it '
            'is still probing, or failed to' % (what, len(names) or 'no'))
    [name] = names
    controller_dir = os.path.join(device, 'nvme', name)
    namespaces = set()
    for entry in os.listdir(controller_dir):
        if _NAMESPACE.fullmatch(entry):
            namespaces.add(entry)
        else:
            path = _PATH.fullmatch(entry)
            if path:  # a path of the multipath namespace nvmeSnM
                namespaces.add('nvme%sn%s' % (path.group(1),
                                              path.group(3)))
    return Controller(pci_address, device, name,
                      tuple(sorted(namespaces, key=_namespace_order)),
                      _shared(root, device, name))


def _namespace_order(name):
    return tuple(int(n) for n in _NAMESPACE.fullmatch(name).groups())


def _shared(root, device, name):
    """Why an erase of the whole subsystem would reach past this
    function; '' when it would not."""
    physfn = os.path.join(device, 'physfn')
    if os.path.lexists(physfn):
        return 'it is a VF of %s' % os.path.basename(
            os.path.realpath(physfn))
    numvfs = _read(os.path.join(device, 'sriov_numvfs'))
    if numvfs and numvfs != '0':
        return 'it has %s VFs enabled' % numvfs
    subsystems = os.path.join(root, 'sys/class/nvme-subsystem')
    try:
        entries = os.listdir(subsystems)
    except OSError:
        return ''
    for subsystem in entries:
        try:
            members = [n for n in os.listdir(os.path.join(subsystems,
                                                          subsystem))
                       if _CONTROLLER.fullmatch(n)]
        except OSError:
            continue
        if name in members and len(members) > 1:
            return 'its NVM subsystem %s has other controllers (%s)' % (
                subsystem, ', '.join(sorted(set(members) - {name})))
    return ''


def _node(name):
    return os.path.join(checks.sysfs_root(), 'dev', name)


def _unescape(field):
    return re.sub(r'\\([0-7]{3})', lambda m: chr(int(m.group(1), 8)), field)


def _of_namespace(source, namespaces):
    """The namespace of ``namespaces`` that the block device ``source``
    (a path) is, or a partition of; None."""
    if not source.startswith('/dev/'):
        return None
    root = checks.sysfs_root()
    real = os.path.realpath(os.path.join(root, source.lstrip('/')))
    name = os.path.basename(real)
    for namespace in namespaces:
        if name == namespace or re.fullmatch(re.escape(namespace) + r'p\d+',
                                             name):
            return name
    return None


def _uses(controller):
    """How the host uses the controller's namespaces, one sentence each."""
    root = checks.sysfs_root()
    found = []
    mounts = os.path.join(root, 'proc/self/mounts')
    try:
        with open(mounts) as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise checks.InvalidArgument(
            'NVMe controller %s: cannot read %s to tell whether one of its '
            'namespaces is mounted (%s)' % (controller.address, mounts,
                                            exc.strerror))
    for line in lines:
        fields = line.split()
        if len(fields) >= 2:
            used = _of_namespace(_unescape(fields[0]), controller.namespaces)
            if used:
                found.append('%s is mounted on %s' % (used,
                                                      _unescape(fields[1])))
    try:
        with open(os.path.join(root, 'proc/swaps')) as f:
            swaps = f.read().splitlines()[1:]
    except OSError:
        swaps = []
    for line in swaps:
        fields = line.split()
        used = fields and _of_namespace(_unescape(fields[0]),
                                        controller.namespaces)
        if used:
            found.append('%s is swapped on' % used)
    for namespace in controller.namespaces:
        found += _holders(root, controller, namespace)
    return found


def _holders(root, controller, namespace):
    what = 'NVMe controller %s, namespace %s' % (controller.address,
                                                 namespace)
    block = checks.resolve(root, os.path.join(root, 'sys/block', namespace),
                           what)
    found = []
    for name in [namespace] + sorted(
            e for e in os.listdir(block)
            if re.fullmatch(re.escape(namespace) + r'p\d+', e)):
        directory = block if name == namespace else os.path.join(block, name)
        try:
            held = sorted(os.listdir(os.path.join(directory, 'holders')))
        except OSError:
            held = []
        if held:
            found.append('%s is held by %s' % (name, ', '.join(held)))
    return found


@contextlib.contextmanager
def _claimed(controller):
    """The controller's namespaces, checked unused and open exclusively
    while the context lasts: the kernel refuses to mount one meanwhile."""
    uses = _uses(controller)
    if uses:
        raise checks.InvalidArgument(
            'NVMe controller %s: the host uses its namespaces (%s): it is '
            'not erased' % (controller.address, '; '.join(uses)))
    fds = []
    try:
        for namespace in controller.namespaces:
            node = _node(namespace)
            try:
                fds.append(os.open(node, os.O_RDONLY | os.O_EXCL
                                   | os.O_NONBLOCK | os.O_CLOEXEC))
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    raise checks.InvalidArgument(
                        'NVMe controller %s: the host uses namespace %s '
                        '(the kernel refuses to open %s exclusively): it is '
                        'not erased' % (controller.address, namespace, node))
                raise checks.InvalidArgument(
                    'NVMe controller %s: cannot open %s (%s)'
                    % (controller.address, node, exc.strerror))
        yield
    finally:
        for fd in fds:
            os.close(fd)


def _below_root(node):
    """A check that an argument is the device node ``node`` matches, in
    ``/dev`` below the daemon's sysfs root."""
    def check(arg):
        prefix = os.path.join(checks.sysfs_root(), '')
        return (arg.startswith(prefix) and node.fullmatch(
            '/' + arg[len(prefix):]) is not None)
    return check


_NODE_CHECKS = {node: _below_root(node)
                for node in (_CONTROLLER_NODE, _NAMESPACE_NODE)}


def _tail(text):
    return tool_args.tail(text, _QUOTED_CHARS)


def _run(subcommand, args, timeout):
    """Run ``nvme subcommand args``; its standard output. A run that
    fails raises NvmeFailed."""
    if (subcommand not in SHAPES
            or not tool_args.fits(SHAPES[subcommand], args, _NODE_CHECKS)):
        # Built here from checked parts: a mismatch is a bug, refused.
        raise checks.InvalidArgument('nvme %s does not take the arguments '
                                     '%s' % (subcommand, ' '.join(args)))
    command = ' '.join([TOOL, subcommand, *args])
    executable = shutil.which(TOOL)
    if executable is None:
        raise NvmeFailed('nvme-cli is not installed (no %s on the privileged '
                         "helper's PATH)" % TOOL)
    setpriv = shutil.which('setpriv')
    if setpriv is None:
        raise NvmeFailed('setpriv (util-linux), which runs nvme with only '
                         'CAP_SYS_ADMIN, is not installed')
    bounding = ','.join(['-all'] + [
        '+' + capabilities.CAPS_BYVALUE[c].lower().removeprefix('cap_')
        for c in TOOL_CAPABILITIES])
    argv = [setpriv, '--bounding-set', bounding, '--inh-caps', '-all',
            '--no-new-privs', '--', executable, subcommand, *args]
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL,
                                capture_output=True, text=True,
                                errors='replace', timeout=timeout,
                                check=False)
    except subprocess.TimeoutExpired:
        raise NvmeFailed('%s did not finish within %d s' % (command, timeout))
    except OSError as exc:
        raise NvmeFailed('cannot run %s: %s' % (command, exc))
    if result.returncode != 0:
        raise NvmeFailed('%s failed (exit status %d): %s' % (
            command, result.returncode,
            _tail(result.stderr) or _tail(result.stdout) or 'no message'))
    return result.stdout


def _json(subcommand, args):
    text = _run(subcommand, args, ADMIN_SECONDS)
    try:
        answer = json.loads(text)
    except ValueError:
        raise NvmeFailed('nvme %s answered no JSON: %s'
                         % (subcommand, _tail(text) or 'nothing'))
    if not isinstance(answer, dict):
        raise NvmeFailed('nvme %s answered %s, not a JSON object'
                         % (subcommand, type(answer).__name__))
    return answer


def _number(answer, key, subcommand):
    value = answer.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NvmeFailed('nvme %s answered no number %s (%r)'
                         % (subcommand, key, value))
    return value


def _identify(controller):
    answer = _json('id-ctrl', [_node(controller.name), '-o', 'json'])
    return {'sanicap': _number(answer, 'sanicap', 'id-ctrl'),
            'fna': _number(answer, 'fna', 'id-ctrl'),
            'model': str(answer.get('mn', '')).strip(),
            'serial': str(answer.get('sn', '')).strip()}


@agent_pctxt.entrypoint_with_timeout(ADMIN_SECONDS + 30)
def identify_controller(pci_address):
    """What the controller of ``pci_address`` can erase: ``{'controller'
    (nvmeN), 'namespaces' (nvmeNnM...), 'shared' ('' or why an erase of
    its subsystem reaches past it), 'sanicap', 'fna', 'model',
    'serial'}``."""
    controller = _controller(pci_address)
    return dict(_identify(controller), controller=controller.name,
                namespaces=list(controller.namespaces),
                shared=controller.shared)


@agent_pctxt.entrypoint_with_timeout(ADMIN_SECONDS + 30)
def sanitize_log(pci_address):
    """The sanitize status log of the controller of ``pci_address``:
    ``{'status' (SSTAT bits 2:0), 'progress' (SPROG, of 65536),
    'action' (the SANACT that started the last sanitize),
    'global_erased'}``."""
    controller = _controller(pci_address)
    answer = _json('sanitize-log', [_node(controller.name), '-o', 'json'])
    # nvme-cli 2.x keys the log by the device's name.
    if 'sprog' not in answer and len(answer) == 1:
        [answer] = answer.values()
        if not isinstance(answer, dict):
            answer = {}
    sstat = answer.get('sstat')
    global_erased = None
    if isinstance(sstat, dict):  # {'global_erased', 'status': '(1) ...'}
        global_erased = sstat.get('global_erased')
        found = _STATUS.match(str(sstat.get('status', '')))
        status = int(found.group(1)) if found else None
    elif isinstance(sstat, int) and not isinstance(sstat, bool):
        status, global_erased = sstat & 0x7, (sstat >> 8) & 1
    else:
        status = None
    if status is None:
        raise NvmeFailed('nvme sanitize-log answered no status (sstat %r)'
                         % (sstat,))
    cdw10 = answer.get('cdw10_info', answer.get('scdw10'))
    return {'status': status,
            'progress': _number(answer, 'sprog', 'sanitize-log'),
            'action': cdw10 & 0x7 if isinstance(cdw10, int) else None,
            'global_erased': bool(global_erased)}


@agent_pctxt.entrypoint_with_timeout(ADMIN_SECONDS + 30)
def start_sanitize(pci_address, action):
    """Start a sanitize of the whole NVM subsystem of the controller of
    ``pci_address``: ``action`` 'crypto' (crypto erase) or 'block' (block
    erase). It runs on in the controller; its log tells when it ends."""
    checks.one_of(action, tuple(SANITIZE_ACTIONS), 'sanitize action')
    controller = _controller(pci_address)
    if controller.shared:
        raise checks.InvalidArgument(
            'NVMe controller %s: a sanitize erases its whole NVM subsystem '
            'and %s: refused' % (pci_address, controller.shared))
    with _claimed(controller):
        _run('sanitize', [_node(controller.name),
                          '--sanact=%d' % SANITIZE_ACTIONS[action]],
             ADMIN_SECONDS)


@agent_pctxt.entrypoint_with_timeout(FORMAT_SECONDS + 30)
def format_namespace(pci_address, namespace, erase):
    """Format the namespace ``namespace`` (nvmeNnM) of the controller of
    ``pci_address`` with the secure erase ``erase``: 'crypto' or
    'user-data'."""
    checks.one_of(erase, tuple(SECURE_ERASES), 'secure erase')
    controller = _controller(pci_address)
    if not isinstance(namespace, str) or (
            namespace not in controller.namespaces):
        raise checks.InvalidArgument(
            'NVMe controller %s: %r is not one of its namespaces (%s)'
            % (pci_address, namespace,
               ', '.join(controller.namespaces) or 'none'))
    if controller.shared:
        fna = _identify(controller)['fna']
        if fna & 0x3:
            raise checks.InvalidArgument(
                'NVMe controller %s: a format of one of its namespaces '
                'erases every namespace of the NVM subsystem (FNA %#x) and '
                '%s: refused' % (pci_address, fna, controller.shared))
    # Checked, not held: nvme-cli re-reads the partitions after a format,
    # which the kernel refuses while another holds the disk exclusively.
    with _claimed(controller):
        pass
    _run('format', [_node(namespace), '--ses=%d' % SECURE_ERASES[erase],
                    '--force'], FORMAT_SECONDS)
