# One attribute file of a PCI function in sysfs (or of a directory of
# it, as QAT's qat/state): read it, and write it when a value is given
# that it does not hold. Used by the playbooks the agent's privileged
# helper runs; the path is confined to the devices below the sysfs root,
# whatever links it goes through.

import errno
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cyborg_sysfs import Sysfs

DOCUMENTATION = r'''
module: cyborg_sysfs_attribute
short_description: Read, and write if it differs, one sysfs attribute of a
  PCI function
options:
  root:
    description: The root sysfs lies under ("/" on a host).
    type: path
    required: true
  device:
    description: The PCI function, dddd:bb:dd.f in lower case.
    type: str
    required: true
  attribute:
    description: The attribute file's name, e.g. sriov_numvfs, or one
      directory down, e.g. qat/state.
    type: str
    required: true
  value:
    description: What it must hold; not given, the file is only read.
      Letters, digits and _ . : ; - (a list such as QAT's sym;asym).
    type: str
  missing_ok:
    description: Answer exists false, and write nothing, where the
      function has no such attribute (a device of another generation),
      rather than fail.
    type: bool
    default: false
'''

RETURN = r'''
current:
  description: What the attribute holds after the task (in check mode,
    what it would hold).
  type: str
previous:
  description: What it held before.
  type: str
exists:
  description: Whether the function has the attribute (false only with
    missing_ok).
  type: bool
'''

ATTRIBUTE = re.compile(r'[a-z][a-z0-9_]{0,63}(/[a-z][a-z0-9_]{0,63})?')
VALUE = re.compile(r'[A-Za-z0-9_.:;-]{1,64}')


def main():
    module = AnsibleModule(
        argument_spec={
            'root': {'type': 'path', 'required': True},
            'device': {'type': 'str', 'required': True},
            'attribute': {'type': 'str', 'required': True},
            'value': {'type': 'str'},
            'missing_ok': {'type': 'bool', 'default': False},
        },
        supports_check_mode=True)
    params = module.params
    tree = Sysfs(module, params['root'])
    device = tree.function_link(params['device'])
    if not ATTRIBUTE.fullmatch(params['attribute']):
        module.fail_json(msg='%r is not an attribute name'
                         % params['attribute'])
    value = params['value']
    if value is not None and not VALUE.fullmatch(value):
        module.fail_json(msg='%r is not a value for a sysfs attribute'
                         % value)
    link = os.path.join(device, params['attribute'])
    path = tree.inside(link, what=link)
    try:
        with open(path) as f:
            previous = f.read().strip()
    except OSError as exc:
        if exc.errno == errno.ENOENT and params['missing_ok']:
            module.exit_json(changed=False, exists=False, current='',
                             previous='')
        module.fail_json(msg='cannot read %s: %s' % (link, exc.strerror))
    if value is None or value == previous:
        module.exit_json(changed=False, exists=True, current=previous,
                         previous=previous)
    if not module.check_mode:
        tree.write(path, value, link)
    module.exit_json(changed=True, exists=True, current=value,
                     previous=previous)


if __name__ == '__main__':
    main()
