# The vGPU types an NVIDIA GPU offers, and the type of its SR-IOV VFs.
#
# A GPU whose VFs have nvidia/current_vgpu_type (H100 and later, with
# NVIDIA's own VFIO framework) holds one vGPU per VF: writing a type's
# number there makes the VF that vGPU, 0 undoes it, and the VF's
# nvidia/creatable_vgpu_types lists what may still be made ("ID : name"
# lines). On other GPUs (T4, or A100 under mdev) the types are the mdev
# types under mdev_supported_types of the GPU or its VFs, and nothing is
# written. Used by the playbooks the agent's privileged helper runs;
# every path is confined below the sysfs root.

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cyborg_sysfs import Sysfs

DOCUMENTATION = r'''
module: cyborg_vgpu_type
short_description: Read the vGPU types of an NVIDIA GPU; give its VFs
  one, or take it back
options:
  root:
    description: The root sysfs lies under ("/" on a host).
    type: path
    required: true
  device:
    description: The GPU (its physical function), dddd:bb:dd.f.
    type: str
    required: true
  mdev_type:
    description: The vGPU type, as its mdev type directory is named
      (nvidia-<number>).
    type: str
    required: true
  state:
    description: present gives every free VF that can still take it the
      type, in VF order; absent sets each VF of the type back to 0; not
      given, only reads. Both do nothing on a GPU without such VFs.
    type: str
    choices: [present, absent]
'''

RETURN = r'''
sriov:
  description: Whether the GPU's VFs take a vGPU type themselves.
  type: bool
offered:
  description: Whether the GPU offers mdev_type (a VF holds it or can
    take it; without such VFs, an mdev type of the GPU or its VFs).
  type: bool
offers:
  description: The types it offers, by name.
  type: list
others:
  description: The VFs that hold another type, as "<VF> holds <type>".
  type: list
changed_vfs:
  description: The VFs the task wrote to (would write, in check mode).
  type: list
'''

MDEV_TYPE = re.compile(r'[A-Za-z0-9_]+-[A-Za-z0-9_.]+')
NVIDIA_TYPE = re.compile(r'nvidia-([1-9][0-9]{0,8})')


class Tree(Sysfs):
    """The GPU's function directories, every path checked to lie below
    ``<root>/sys/devices``."""

    def __init__(self, module, root, address):
        super().__init__(module, root)
        self.gpu = self.inside(self.function_link(address))

    def vfs(self):
        """[(address, directory)] of the GPU's VFs, in VF order."""
        return self.virtual_functions(self.gpu)

    def read(self, path):
        try:
            with open(self.inside(path)) as f:
                return f.read()
        except OSError as exc:
            self.module.fail_json(msg='cannot read %s: %s'
                                  % (path, exc.strerror))

    def write(self, path, text):
        super().write(self.inside(path), text, path)

    def mdev_types(self, directory):
        types = os.path.join(directory, 'mdev_supported_types')
        if not os.path.isdir(types):
            return []
        return [name for name in os.listdir(self.inside(types))
                if MDEV_TYPE.fullmatch(name)]


def _current(tree, directory):
    """The number in the VF's current_vgpu_type; None if it has none."""
    path = os.path.join(directory, 'nvidia', 'current_vgpu_type')
    if not os.path.exists(path):
        return None
    text = tree.read(path).strip()
    if not text.isdigit():
        tree.module.fail_json(msg='%s holds %r, not a vGPU type number'
                              % (path, text))
    return int(text)


def _creatable(tree, directory):
    """The type numbers the VF's creatable_vgpu_types lists (its lines
    after the header)."""
    text = tree.read(os.path.join(directory, 'nvidia',
                                  'creatable_vgpu_types'))
    numbers = []
    for line in text.splitlines():
        number = line.split(':', 1)[0].strip()
        if number.isdigit():
            numbers.append(int(number))
    return numbers


def main():
    module = AnsibleModule(
        argument_spec={
            'root': {'type': 'path', 'required': True},
            'device': {'type': 'str', 'required': True},
            'mdev_type': {'type': 'str', 'required': True},
            'state': {'type': 'str', 'choices': ['present', 'absent']},
        },
        supports_check_mode=True)
    params = module.params
    mdev_type = params['mdev_type']
    if len(mdev_type) > 255 or not MDEV_TYPE.fullmatch(mdev_type):
        module.fail_json(msg='%r is not an mdev type name' % mdev_type)
    numbered = NVIDIA_TYPE.fullmatch(mdev_type)
    number = int(numbered.group(1)) if numbered else None

    tree = Tree(module, params['root'], params['device'])
    vfs = tree.vfs()
    typed = [(address, directory, _current(tree, directory))
             for address, directory in vfs]
    typed = [vf for vf in typed if vf[2] is not None]
    if typed:
        held = {current for _, _, current in typed if current}
        creatable = set()
        for _, directory, current in typed:
            if not current:
                creatable.update(_creatable(tree, directory))
        offers = ['nvidia-%d' % n for n in sorted(held | creatable)]
        others = ['%s holds nvidia-%d' % (address, current)
                  for address, _, current in typed
                  if current and current != number]
    else:
        offers = sorted({name for directory in
                         [tree.gpu] + [d for _, d in vfs]
                         for name in tree.mdev_types(directory)})
        others = []
    facts = {'sriov': bool(typed), 'offered': mdev_type in offers,
             'offers': offers, 'others': others}

    state = params['state']
    if not typed or state is None:
        module.exit_json(changed=False, changed_vfs=[], **facts)
    if number is None:
        module.fail_json(msg='%s is not an NVIDIA vGPU type (nvidia-<n>)'
                         % mdev_type, **facts)
    written = []
    for address, directory, current in typed:
        path = os.path.join(directory, 'nvidia', 'current_vgpu_type')
        if state == 'absent' and current == number:
            value = '0'
        # Read again: each VF given the type may take it from the next.
        elif (state == 'present' and current == 0
              and number in _creatable(tree, directory)):
            value = str(number)
        else:
            continue
        if not module.check_mode:
            tree.write(path, value)
        written.append(address)
    module.exit_json(changed=bool(written), changed_vfs=written, **facts)


if __name__ == '__main__':
    main()
