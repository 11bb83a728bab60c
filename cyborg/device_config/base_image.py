"""An FPGA base image applied as device configuration: its steps.

The kind ``fpga_base_image`` has no playbook pair: loading a bitstream is
what a bind that asks for one already does, and it is done the same way.
The conductor takes the card's programming reservation (as a bind or an
operator's program call does: one program at a time per card, none while
a handle of it is in use), finds the image in Glance and checks that it
fits the card; the agent then downloads it, its hashes checked, and has
the driver's vendor tool load it through the privileged helper, one
program at a time per FPGA, as for a bind. The teardown has nothing to
undo: a bitstream is replaced whole by the next one loaded.

Each step is named here as a playbook names its tasks: the device's
status gives the one that failed as its ``failed_task``.
"""

from cyborg.device_config import status as config_status

FIND_FPGA = 'Find the FPGA to program'
FIND_IMAGE = 'Find the bitstream image'
CHECK_IMAGE = 'Check that the image fits the FPGA'
DOWNLOAD = 'Download and verify the bitstream'
PROGRAM = 'Program the FPGA'
# What ``changed`` lists once the card was programmed.
PROGRAMMED = 'fpga_base_image setup: ' + PROGRAM


class StepFailed(Exception):
    """A step failed; ``task`` names it, ``message`` says why."""

    def __init__(self, task, message):
        super().__init__('%s: %s' % (task, message))
        self.task = task
        self.message = message


def failed(task, message):
    """A configuration result that failed at ``task``."""
    return {'state': config_status.FAILED, 'failed_task': task,
            'message': message, 'changed': []}


def applied(programmed):
    """A configuration result that applied; ``programmed`` is False when
    the card already held the image and nothing ran."""
    return {'state': config_status.APPLIED, 'failed_task': None,
            'message': '', 'changed': [PROGRAMMED] if programmed else []}
