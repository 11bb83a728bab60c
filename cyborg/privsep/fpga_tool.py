"""Running a vendor's FPGA programming tool as root.

Only a tool of ``TOOLS`` runs, found on the daemon's own ``PATH`` (sudo's
``secure_path`` in production, never the agent's), and only with
arguments of one of the shapes listed for it: fixed words, PCI address
parts, and one bitstream, an absolute path to a regular file whose real
path ends with the tool's suffix. The tool gets the real path, no
standard input, a bounding set of ``TOOL_CAPABILITIES`` with no new
privileges (``setpriv``), and at most ``timeout`` seconds.

A failed run is no error here: the exit status and the end of what the
tool wrote come back for the driver to report.
"""

import collections
import os
import re
import shutil
import stat
import subprocess

from cyborg import privsep
from cyborg.conf import agent as agent_conf
from cyborg.privsep import agent_pctxt
from cyborg.privsep import checks

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


def _fits(shape, args):
    if len(shape) != len(args):
        return False
    for expected, arg in zip(shape, args, strict=True):
        if expected is BITSTREAM:
            ok = arg.startswith('/')
        elif isinstance(expected, str):
            ok = arg == expected
        else:
            ok = expected.fullmatch(arg) is not None
        if not ok:
            return False
    return True


def _bitstream(path, suffix):
    """The real path of the bitstream ``path``, a regular file."""
    real = os.path.realpath(path)
    if not real.endswith(suffix):
        raise checks.InvalidArgument('bitstream %s (%s) is not a %s file'
                                     % (path, real, suffix))
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        raise checks.InvalidArgument('bitstream %s: %s' % (path,
                                                           exc.strerror))
    if not stat.S_ISREG(mode):
        raise checks.InvalidArgument('bitstream %s (%s) is not a regular '
                                     'file' % (path, real))
    return real


def checked_args(tool_name, args):
    """``args`` with the bitstream's real path, if the tool is known and
    ``args`` has one of its shapes; else InvalidArgument."""
    tool = TOOLS.get(tool_name) if isinstance(tool_name, str) else None
    if tool is None:
        raise checks.InvalidArgument('%r is not a known FPGA tool (known: '
                                     '%s)' % (tool_name, ', '.join(TOOLS)))
    if not (isinstance(args, (list, tuple))
            and all(isinstance(a, str) for a in args)):
        raise checks.InvalidArgument('the arguments of %s must be a list of '
                                     'strings, not %r' % (tool_name, args))
    for shape in tool.shapes:
        if _fits(shape, args):
            return [_bitstream(arg, tool.suffix) if expected is BITSTREAM
                    else arg
                    for expected, arg in zip(shape, args, strict=True)]
    raise checks.InvalidArgument('%s does not take the arguments %s'
                                 % (tool_name, ' '.join(args)))


def _seconds(timeout):
    if (isinstance(timeout, bool) or not isinstance(timeout, int)
            or not 1 <= timeout <= MAX_SECONDS):
        raise checks.InvalidArgument('a tool may run 1 to %d seconds, not '
                                     '%r' % (MAX_SECONDS, timeout))
    return timeout


def _tail(text):
    text = (text or '').strip()
    if len(text) > _QUOTED_CHARS:
        return '...' + text[-_QUOTED_CHARS:]
    return text


def _bounding_set():
    names = privsep.capability_names(privsep.TOOL_CAPABILITIES)
    return ','.join(['-all'] + ['+' + n.lower().removeprefix('cap_')
                                for n in names])


@agent_pctxt.entrypoint_with_timeout(MAX_SECONDS + 30)
def run_fpga_tool(tool_name, args, timeout):
    """Run the tool; ``{'status', 'stdout', 'stderr'}`` (output ends)."""
    args = checked_args(tool_name, args)
    timeout = _seconds(timeout)
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
        result = subprocess.run(argv, stdin=subprocess.DEVNULL,
                                capture_output=True, text=True,
                                errors='replace', timeout=timeout,
                                check=False)
    except subprocess.TimeoutExpired:
        raise ToolError('%s did not finish within %d s' % (command, timeout))
    except OSError as exc:
        raise ToolError('cannot run %s: %s' % (tool_name, exc))
    return {'status': result.returncode, 'stdout': _tail(result.stdout),
            'stderr': _tail(result.stderr)}
