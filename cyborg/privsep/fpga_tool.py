"""Running a vendor's FPGA programming tool as root.

Only a tool of ``TOOLS`` runs, found on the daemon's own ``PATH`` (sudo's
``secure_path`` in production, never the agent's), and only with
arguments of one of the shapes listed for it: fixed words, PCI address
parts, and one bitstream, an absolute path to a regular file whose real
path ends with the tool's suffix and which belongs to the agent's user.

The bitstream is opened once (the last component not followed if it is a
link) and the checks are made on the open file, whose path the kernel
reports; the tool reads that same file through ``/dev/fd/<n>``. A path
that the agent's user changes between the check and the tool's run
(a link swapped in, a file renamed over it) therefore changes nothing.

The tool gets no standard input, a bounding set of ``TOOL_CAPABILITIES``
with no new privileges (``setpriv``), and at most ``timeout`` seconds.

A failed run is no error here: the exit status and the end of what the
tool wrote come back for the driver to report.
"""

import collections
import contextlib
import errno
import os
import re
import shutil
import stat
import subprocess

from cyborg import privsep
from cyborg.conf import agent as agent_conf
from cyborg.privsep import agent_pctxt
from cyborg.privsep import checks
from cyborg.privsep import tool_args

# The longest run asked for, the most [agent] program_tool_timeout allows.
MAX_SECONDS = agent_conf.PROGRAM_TOOL_MAX_SECONDS
# The end of the tool's output that comes back.
_QUOTED_CHARS = 2000

BITSTREAM = object()  # the place of the bitstream in a shape


def _hex(digits):
    return re.compile(r'0x[0-9a-f]{%d}' % digits)


_FUNCTION = re.compile(r'0x[0-7]')


Tool = collections.namedtuple('Tool', 'suffix shapes')

TOOLS = {
    # OPAE: fpgaconf [--segment 0xSSSS] --bus 0xBB --device 0xDD
    # --function 0xF <file>.gbs
    'fpgaconf': Tool('.gbs', (
        ('--bus', _hex(2), '--device', _hex(2), '--function', _FUNCTION,
         BITSTREAM),
        ('--segment', _hex(4), '--bus', _hex(2), '--device', _hex(2),
         '--function', _FUNCTION, BITSTREAM),
    )),
    # XRT: xbmgmt program --device dddd:bb:dd.f --user <file>.xclbin
    'xbmgmt': Tool('.xclbin', (
        ('program', '--device',
         checks.PCI_ADDRESS,
         '--user', BITSTREAM),
    )),
}


class ToolError(Exception):
    """The tool could not be run to its end."""


# A bitstream's place takes an absolute path; checked_args checks the file.
_BITSTREAM_CHECK = {BITSTREAM: lambda arg: arg.startswith('/')}


def agent_uid():
    """The uid of the agent's user: sudo, which started the daemon, names
    the caller in SUDO_UID (the caller cannot set it); without sudo, the
    daemon was started by root itself."""
    return int(os.environ.get('SUDO_UID', os.getuid()))


def _open_bitstream(path, suffix):
    """A descriptor of the bitstream ``path``, checked: a regular file of
    the agent's user whose real path has the tool's suffix."""
    real = os.path.realpath(path)
    # Refused before it is opened: opening some device files acts.
    if not real.endswith(suffix):
        raise checks.InvalidArgument('bitstream %s (%s) is not a %s file'
                                     % (path, real, suffix))
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise checks.InvalidArgument('bitstream %s (%s) became a link '
                                         'when it was opened' % (path, real))
        raise checks.InvalidArgument('bitstream %s: %s' % (path,
                                                           exc.strerror))
    try:
        _check_open_bitstream(fd, path, suffix)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_open_bitstream(fd, path, suffix):
    info = os.fstat(fd)
    opened = os.readlink('/proc/self/fd/%d' % fd)
    if not stat.S_ISREG(info.st_mode):
        raise checks.InvalidArgument('bitstream %s (%s) is not a regular '
                                     'file' % (path, opened))
    if not opened.endswith(suffix):
        raise checks.InvalidArgument('bitstream %s (%s) is not a %s file'
                                     % (path, opened, suffix))
    owner = agent_uid()
    if info.st_uid != owner:
        raise checks.InvalidArgument(
            'bitstream %s (%s) belongs to uid %d, not to the agent\'s user '
            '(uid %d)' % (path, opened, info.st_uid, owner))


def _shape(tool_name, args):
    """The shape of ``tool_name`` that ``args`` has; else InvalidArgument."""
    tool = TOOLS.get(tool_name) if isinstance(tool_name, str) else None
    if tool is None:
        raise checks.InvalidArgument('%r is not a known FPGA tool (known: '
                                     '%s)' % (tool_name, ', '.join(TOOLS)))
    if not (isinstance(args, (list, tuple))
            and all(isinstance(a, str) for a in args)):
        raise checks.InvalidArgument('the arguments of %s must be a list of '
                                     'strings, not %r' % (tool_name, args))
    for shape in tool.shapes:
        if tool_args.fits(shape, args, _BITSTREAM_CHECK):
            return tool, shape
    raise checks.InvalidArgument('%s does not take the arguments %s'
                                 % (tool_name, ' '.join(args)))


@contextlib.contextmanager
def checked_args(tool_name, args):
    """``args`` with the bitstream as ``/dev/fd/<n>``, open while the
    context lasts, if the tool is known, ``args`` has one of its shapes
    and the bitstream passes its checks; else InvalidArgument."""
    tool, shape = _shape(tool_name, args)
    [path] = [arg for expected, arg in zip(shape, args, strict=True)
              if expected is BITSTREAM]
    fd = _open_bitstream(path, tool.suffix)
    try:
        yield [('/dev/fd/%d' % fd) if expected is BITSTREAM else arg
               for expected, arg in zip(shape, args, strict=True)], fd
    finally:
        os.close(fd)


def _seconds(timeout):
    if (isinstance(timeout, bool) or not isinstance(timeout, int)
            or not 1 <= timeout <= MAX_SECONDS):
        raise checks.InvalidArgument('a tool may run 1 to %d seconds, not '
                                     '%r' % (MAX_SECONDS, timeout))
    return timeout


def _bounding_set():
    names = privsep.capability_names(privsep.TOOL_CAPABILITIES)
    return ','.join(['-all'] + ['+' + n.lower().removeprefix('cap_')
                                for n in names])


@agent_pctxt.entrypoint_with_timeout(MAX_SECONDS + 30)
def run_fpga_tool(tool_name, args, timeout):
    """Run the tool; ``{'status', 'stdout', 'stderr'}`` (output ends)."""
    timeout = _seconds(timeout)
    with checked_args(tool_name, args) as (args, fd):
        return _run(tool_name, args, fd, timeout)


def _run(tool_name, args, fd, timeout):
    command = ' '.join([tool_name, *args])
    executable = shutil.which(tool_name)
    if executable is None:
        raise ToolError('%s is not installed (not found on PATH)'
                        % tool_name)
    setpriv = shutil.which('setpriv')
    if setpriv is None:
        raise ToolError('setpriv (util-linux), which runs %s with only the '
                        'capabilities it needs, is not installed'
                        % tool_name)
    argv = [setpriv, '--bounding-set', _bounding_set(), '--inh-caps', '-all',
            '--no-new-privs', '--', executable, *args]
    try:
        # The bitstream's descriptor is the tool's too, at the same number.
        result = subprocess.run(argv, stdin=subprocess.DEVNULL,
                                capture_output=True, text=True,
                                errors='replace', timeout=timeout,
                                pass_fds=(fd,), check=False)
    except subprocess.TimeoutExpired:
        raise ToolError('%s did not finish within %d s' % (command, timeout))
    except OSError as exc:
        raise ToolError('cannot run %s: %s' % (tool_name, exc))
    return {'status': result.returncode,
            'stdout': tool_args.tail(result.stdout, _QUOTED_CHARS),
            'stderr': tool_args.tail(result.stderr, _QUOTED_CHARS)}
