"""Running a vendor's FPGA programming tool (OPAE ``fpgaconf``, XRT
``xbmgmt``).

Programming an FPGA needs root: the agent, which does not run as root,
asks its privileged helper (``cyborg.privsep.fpga_tool``), which runs only
the tools and argument shapes it knows, found on its own ``PATH``. The
tool gets no standard input (a confirmation prompt fails rather than
hangs) and at most ``[agent] program_tool_timeout`` seconds (``TIMEOUT``
when called without one), which must end before the conductor stops
waiting for the program call, so that no card is still being written
after its bind failed.
"""

import logging

from cyborg.accelerator.drivers import base
from cyborg.privsep import fpga_tool

LOG = logging.getLogger(__name__)

# Loading a partial bitstream takes seconds; binding never flashes a
# shell. The agent passes [agent] program_tool_timeout.
TIMEOUT = 180


def run(argv, device_name, timeout=TIMEOUT):
    """Run ``argv``; raise ``DriverError`` unless it exits 0.

    The error names the device and the command, with the exit status and
    what the tool wrote to stderr (or stdout, if stderr is empty).
    """
    argv = [str(arg) for arg in argv]
    command = ' '.join(argv)
    LOG.info('Programming %s: %s', device_name, command)
    with base.privileged('Cannot program %s' % device_name):
        result = fpga_tool.run_fpga_tool(argv[0], argv[1:], timeout)
    if result['status'] != 0:
        output = result['stderr'] or result['stdout'] or 'no output'
        raise base.DriverError('Cannot program %s: %s exited with status %d: '
                               '%s' % (device_name, command,
                                       result['status'], output))
    LOG.debug('%s: %s', argv[0], result['stdout'])
