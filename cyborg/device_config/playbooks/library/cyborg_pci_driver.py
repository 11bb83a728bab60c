# The driver a PCI function is bound to (and, asked, the drivers of its
# SR-IOV VFs), and the three writes that bind it to another: its
# driver_override, its driver's unbind and the bus's drivers_probe. Used
# by the playbooks the agent's privileged helper runs; every path is
# confined below the sysfs root, whatever links it goes through, and
# nothing is written but a validated driver name or the function's own
# address.

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cyborg_sysfs import Sysfs

DOCUMENTATION = r'''
module: cyborg_pci_driver
short_description: Read a PCI function's driver, set its driver_override,
  unbind it or have the kernel probe it
description:
  - Without an action, only reads. One action per task.
options:
  root:
    description: The root sysfs lies under ("/" on a host).
    type: path
    required: true
  device:
    description: The PCI function, dddd:bb:dd.f in lower case.
    type: str
    required: true
  override:
    description: What driver_override must hold, a driver name; "" for
      none (the kernel then picks the function's own driver).
    type: str
  unbind:
    description: Unbind the function from the driver it is bound to, if
      any.
    type: bool
    default: false
  probe:
    description: Ask the kernel to bind the function, by writing its
      address to drivers_probe.
    type: bool
    default: false
  vfs:
    description: Also read the function's VFs (its virtfn links) and the
      driver of each.
    type: bool
    default: false
'''

RETURN = r'''
driver:
  description: The driver the function was bound to before the task; ""
    for none.
  type: str
override:
  description: What driver_override held before the task; "" for none.
  type: str
vfs:
  description: With vfs, the function's VFs in VF order, each as
    {address, driver} (driver "" for none).
  type: list
'''

DRIVER = re.compile(r'[a-z0-9_-]{1,32}')
# What the kernel shows in driver_override when none is set.
NO_OVERRIDE = ('', '(null)')


def _driver(tree, function):
    """(directory, name) of the driver bound to ``function`` (a real
    path); (None, '') when none is."""
    link = os.path.join(function, 'driver')
    if not os.path.lexists(link):
        return None, ''
    directory = tree.inside(link, tree.drivers)
    if os.path.dirname(directory) != tree.drivers:
        tree.module.fail_json(msg='%s leads to %s, not a driver of %s'
                              % (link, directory, tree.drivers))
    return directory, os.path.basename(directory)


def main():
    module = AnsibleModule(
        argument_spec={
            'root': {'type': 'path', 'required': True},
            'device': {'type': 'str', 'required': True},
            'override': {'type': 'str'},
            'unbind': {'type': 'bool', 'default': False},
            'probe': {'type': 'bool', 'default': False},
            'vfs': {'type': 'bool', 'default': False},
        },
        supports_check_mode=True)
    params = module.params
    address = params['device']
    tree = Sysfs(module, params['root'])
    link = tree.function_link(address)
    override = params['override']
    if override is not None and override != '' and not DRIVER.fullmatch(
            override):
        module.fail_json(msg='%r is not a driver name (a-z, 0-9, _ and -, '
                         'at most 32)' % override)
    if sum([override is not None, params['unbind'], params['probe']]) > 1:
        module.fail_json(msg='one of override, unbind and probe per task')

    function = tree.inside(link)
    driver_dir, driver = _driver(tree, function)
    override_path = tree.inside(os.path.join(link, 'driver_override'),
                                what='driver_override')
    try:
        with open(override_path) as f:
            previous = f.read().strip()
    except OSError as exc:
        module.fail_json(msg='cannot read %s/driver_override: %s'
                         % (link, exc.strerror))
    previous = '' if previous in NO_OVERRIDE else previous
    facts = {'driver': driver, 'override': previous}
    if params['vfs']:
        facts['vfs'] = [
            {'address': vf, 'driver': _driver(tree, directory)[1]}
            for vf, directory in tree.virtual_functions(function)]

    if override is not None:
        if override == previous:
            module.exit_json(changed=False, **facts)
        if not module.check_mode:
            # A bare newline clears the override.
            tree.write(override_path, override or '\n',
                       '%s/driver_override' % link)
        module.exit_json(changed=True, **facts)
    if params['unbind']:
        if driver_dir is None:
            module.exit_json(changed=False, **facts)
        if not module.check_mode:
            tree.write(os.path.join(driver_dir, 'unbind'), address,
                       '%s/unbind' % driver_dir)
        module.exit_json(changed=True, **facts)
    if params['probe']:
        probe = os.path.join(tree.root, 'sys', 'bus', 'pci',
                             'drivers_probe')
        if os.path.realpath(probe) != probe:
            module.fail_json(msg='%s goes through a link' % probe)
        if not module.check_mode:
            tree.write(probe, address)
        module.exit_json(changed=True, **facts)
    module.exit_json(changed=False, **facts)


if __name__ == '__main__':
    main()
