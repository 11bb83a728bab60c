"""Running a vendor's FPGA programming tool (OPAE ``fpgaconf``, XRT
``xbmgmt``).

The tool is looked up on the agent's ``PATH`` and runs as the agent's own
user, with no ``sudo`` or rootwrap in between: programming an FPGA needs
root, or a user that the vendor's udev rules give the device nodes to, so
an agent that is to program FPGAs runs as such a user. The tool gets no
standard input (a confirmation prompt fails rather than hangs) and at most
``[agent] program_tool_timeout`` seconds (``TIMEOUT`` when called without
one), which must end before the conductor stops waiting for the program
call, so that no card is still being written after its bind failed.
"""

import logging
import subprocess

from cyborg.accelerator.drivers import base

LOG = logging.getLogger(__name__)

# Loading a partial bitstream takes seconds; binding never flashes a
# shell. The agent passes [agent] program_tool_timeout.
TIMEOUT = 180
# The end of the tool's output that an error quotes.
_QUOTED_CHARS = 2000


def _tail(text):
    text = (text or '').strip()
    if len(text) > _QUOTED_CHARS:
        return '...' + text[-_QUOTED_CHARS:]
    return text


def run(argv, device_name, timeout=TIMEOUT):
    """Run ``argv``; raise ``DriverError`` unless it exits 0.

    The error names the device and the command, with the exit status and
    what the tool wrote to stderr (or stdout, if stderr is empty).
    """
    command = ' '.join(argv)
    LOG.info('Programming %s: %s', device_name, command)
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL,
                                capture_output=True, text=True,
                                timeout=timeout, check=False)
    except FileNotFoundError:
        raise base.DriverError('Cannot program %s: %s is not installed (not '
                               'found on PATH)' % (device_name, argv[0]))
    except subprocess.TimeoutExpired:
        raise base.DriverError('Cannot program %s: %s did not finish within '
                               '%d s' % (device_name, command, timeout))
    except OSError as exc:
        raise base.DriverError('Cannot program %s: cannot run %s: %s'
                               % (device_name, argv[0], exc))
    if result.returncode != 0:
        output = _tail(result.stderr) or _tail(result.stdout) or 'no output'
        raise base.DriverError('Cannot program %s: %s exited with status %d: '
                               '%s' % (device_name, command,
                                       result.returncode, output))
    LOG.debug('%s: %s', argv[0], _tail(result.stdout))
