"""The agent's part of device configuration: the playbook runs that take
one device from what was applied to what is wanted.

Each kind of setting maps to a playbook pair and its variables. The
teardown playbook runs with the settings applied before (when there were
some and they differ), then the setup playbook with the wanted ones; the
privileged side (``cyborg.privsep.playbook``) checks the pair and every
variable before it runs anything. Kinds without a shipped pair yet are
answered as failed with that reason, never half applied.
"""

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
    # An operator's own pair: its variables, and the device's address
    # (which the pair must declare).
    kinds.PLAYBOOK: lambda address, settings: (
        settings['playbook'], dict(settings.get('variables') or {},
                                   pci_address=address)),
}


def runs(kind, address, applied, wanted):
    """[(pair, action, variables)] that take the device at ``address``
    from ``applied`` (None: as discovered) to ``wanted``."""
    pair_of = PAIRS[kind]
    planned = []
    if applied is not None and applied != wanted:
        pair, variables = pair_of(address, applied)
        planned.append((pair, 'teardown', variables))
    pair, variables = pair_of(address, wanted)
    planned.append((pair, 'setup', variables))
    return planned


def apply(kind, address, applied, wanted, run_playbook):
    """Run what ``runs`` plans with ``run_playbook(pair, action,
    variables)`` (the privileged entry point, or a stand-in), stopping at
    the first failure; the result as ``AgentAPI.apply_device_config``
    answers it."""
    if kind not in PAIRS:
        return {'state': config_status.FAILED,
                'failed_task': 'choose the playbooks',
                'message': 'This agent has no playbook pair for %s '
                           'settings yet.' % kind, 'changed': []}
    changed = []
    for pair, action, variables in runs(kind, address, applied, wanted):
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
