"""The agent's part of device configuration: the playbook runs that take
one device from what was applied to what is wanted.

Each kind of setting maps to a playbook pair and its variables. The
teardown playbook runs with the settings applied before (when there were
some and they differ), then the setup playbook with the wanted ones (none
when the device is put back as discovered: the teardown alone); the
privileged side (``cyborg.privsep.playbook``) checks the pair and every
variable before it runs anything. Kinds without a shipped pair yet are
answered as failed with that reason, never half applied.

An FPGA base image is no pair: it is loaded through the agent's own
programming path (``load_bitstream``), the one a bind's bitstream takes:
the Glance download with its hashes checked, the driver's vendor tool
run by the privileged helper, under the FPGA's programming lock. A pair
would have to call back into the agent for all of that; see
``cyborg.device_config.base_image`` for the steps and why the teardown
has nothing to undo.
"""

from cyborg.device_config import base_image
from cyborg.device_config import kinds
from cyborg.device_config import status as config_status

# A kind -> (pair, variables of the device's PCI address and settings).
PAIRS = {
    kinds.SRIOV_VFS: lambda address, settings: (
        'sriov_vfs', {'pci_address': address,
                      'num_vfs': settings['num_vfs']}),
    kinds.DRIVER_BINDING: lambda address, settings: (
        'driver_binding', {'pci_address': address,
                           'driver': settings['driver']}),
    # The GPU's address, not a list of its VFs: the pair finds the VFs
    # from the GPU's virtfn links as it runs (an sriov_vfs run may have
    # remade them since the last discovery), and a list from here could
    # name functions of another device. How many VFs take the type is
    # the card's to say: each free one that can still take it.
    kinds.VGPU_TYPE: lambda address, settings: (
        'vgpu_type', {'pci_address': address,
                      'mdev_type': settings['mdev_type']}),
    kinds.MIG_LAYOUT: lambda address, settings: (
        'mig_layout', {'pci_address': address,
                       'mig_enabled': settings['mig_enabled'],
                       'mig_devices': dict(settings.get('mig_devices')
                                           or {})}),
    # An operator's own pair: its variables, and the device's address
    # (which the pair must declare).
    kinds.PLAYBOOK: lambda address, settings: (
        settings['playbook'], dict(settings.get('variables') or {},
                                   pci_address=address)),
}

# The kernel drivers of Intel QAT physical functions (the device ids of
# ``cyborg.accelerator.drivers.qat.intel``), as sysfs names them and by
# their in-tree module, -> the driver of their VFs. 401xx and 402xx are
# the 4xxx driver's; d15xx and 200xx are Intel's out-of-tree ones.
QAT_VF_DRIVERS = {
    'dh895xcc': 'dh895xccvf', 'qat_dh895xcc': 'dh895xccvf',
    'c6xx': 'c6xxvf', 'qat_c62x': 'c6xxvf',
    'c3xxx': 'c3xxxvf', 'qat_c3xxx': 'c3xxxvf',
    'd15xx': 'd15xxvf', 'qat_d15xx': 'd15xxvf',
    '200xx': '200xxvf', 'qat_200xx': '200xxvf',
    # The upstream kernel has no driver for gen4 VFs: they come up bound
    # to none, to be given to instances through vfio-pci. (Intel's
    # out-of-tree package binds them to 4xxxvf: a playbook policy naming
    # qat_vfs says so there.)
    '4xxx': 'none', 'qat_4xxx': 'none',
    '420xx': 'none', 'qat_420xx': 'none',
}


def _qat_vfs(vf_driver):
    """The PAIRS entry of a VF count on a QAT PF whose VFs take
    ``vf_driver``: the qat_vfs pair, which also brings a gen4 device
    down and up around the change; its services are kept (a playbook
    policy naming qat_vfs sets them)."""
    return lambda address, settings: (
        'qat_vfs', {'pci_address': address, 'num_vfs': settings['num_vfs'],
                    'vf_driver': vf_driver, 'cfg_services': 'keep'})


def pair_for(kind, kernel_driver=None):
    """The PAIRS entry for settings of ``kind`` on a device that the
    kernel driver ``kernel_driver`` holds (None: not known): a VF count
    on a QAT PF takes the QAT pair, any other the kind's own."""
    if kind == kinds.SRIOV_VFS and kernel_driver in QAT_VF_DRIVERS:
        return _qat_vfs(QAT_VF_DRIVERS[kernel_driver])
    return PAIRS[kind]


def runs(kind, address, applied, wanted, kernel_driver=None):
    """[(pair, action, variables)] that take the device at ``address``,
    held by ``kernel_driver``, from ``applied`` to ``wanted`` (either
    None: as discovered)."""
    pair_of = pair_for(kind, kernel_driver)
    planned = []
    if applied is not None and applied != wanted:
        pair, variables = pair_of(address, applied)
        planned.append((pair, 'teardown', variables))
    if wanted is not None:
        pair, variables = pair_of(address, wanted)
        planned.append((pair, 'setup', variables))
    return planned


def apply(kind, address, applied, wanted, run_playbook,
          load_bitstream=None, kernel_driver=None):
    """Run what ``runs`` plans with ``run_playbook(pair, action,
    variables)`` (the privileged entry point, or a stand-in), stopping at
    the first failure; the result as ``AgentAPI.apply_device_config``
    answers it. ``kernel_driver`` is the one that holds the device, as
    sysfs shows it now (it picks the pair of a QAT PF's VF count). An
    FPGA base image is loaded by ``load_bitstream(image id)`` instead:
    True if it programmed the card, False if the card held the image
    already; ``base_image.StepFailed`` names a failed step. ``wanted``
    None puts the device back as discovered: an FPGA base image has
    nothing to undo."""
    if kind == kinds.FPGA_BASE_IMAGE:
        if wanted is None:
            return dict(base_image.applied(False),
                        message='An FPGA base image has nothing to undo.')
        return _load_base_image(wanted, load_bitstream)
    if kind not in PAIRS:
        return {'state': config_status.FAILED,
                'failed_task': 'choose the playbooks',
                'message': 'This agent has no playbook pair for %s '
                           'settings yet.' % kind, 'changed': []}
    changed = []
    for pair, action, variables in runs(kind, address, applied, wanted,
                                        kernel_driver):
        result = run_playbook(pair, action, variables)
        changed += ['%s %s: %s' % (pair, action, task['name'])
                    for task in result['tasks']
                    if task['status'] == 'changed']
        if result['status'] != 'successful':
            return {'state': config_status.FAILED,
                    'failed_task': result['failed_task'] or '%s %s' % (
                        pair, action),
                    'message': result['message'] or 'ansible-runner ended '
                               '%s (exit %s)' % (result['status'],
                                                 result['rc']),
                    'changed': changed}
    return {'state': config_status.APPLIED, 'failed_task': None,
            'message': '', 'changed': changed}


def _load_base_image(wanted, load_bitstream):
    if load_bitstream is None:
        return base_image.failed(base_image.PROGRAM,
                                 'This agent cannot program FPGAs.')
    try:
        programmed = load_bitstream(wanted['bitstream_uuid'])
    except base_image.StepFailed as exc:
        return base_image.failed(exc.task, exc.message)
    return base_image.applied(programmed)
