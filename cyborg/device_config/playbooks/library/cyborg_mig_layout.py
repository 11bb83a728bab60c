# The MIG mode and the MIG layout of one NVIDIA GPU, through NVML.
#
# A layout is how many instances of each MIG profile the GPU holds
# ({"1g.10gb": 7}, as mig-parted writes it). Setting one destroys the
# instances the GPU holds (compute instance, then GPU instance) and
# creates the layout's at the start slots the card's placement table
# allows, each a GPU instance and the one compute instance that takes it
# whole. NVML refuses to destroy an instance that runs processes: the
# task then fails and says which, and creates nothing. A change of MIG
# mode takes effect at the GPU's next reset, which this never makes: it
# fails and says so, and the operator resets the GPU when it is idle.
#
# Unlike the sysfs modules, this one needs the cyborg package (its MIG
# table and its NVML operations), installed wherever the agent runs, and
# NVML's Python bindings (nvidia-ml-py).

import collections
import ctypes
import importlib.util
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cyborg_sysfs import PCI_ADDRESS

DOCUMENTATION = r'''
module: cyborg_mig_layout
short_description: Read, set or clear the MIG mode and layout of an
  NVIDIA GPU
options:
  root:
    description: The root sysfs lies under ("/" on a host); the GPU's PCI
      ids are read there to choose its MIG table.
    type: path
    required: true
  device:
    description: The GPU, dddd:bb:dd.f.
    type: str
    required: true
  nvml_library:
    description: The NVML library to load (a name the dynamic loader
      finds, or an absolute path); a .py file is a replay of a recorded
      card, whose install(pynvml) puts it under the bindings.
    type: str
    required: true
  mig_enabled:
    description: The MIG mode wanted.
    type: bool
    required: true
  mig_devices:
    description: The layout wanted, MIG profile name -> count.
    type: dict
    default: {}
  state:
    description: present sets the mode and the layout; absent destroys
      the instances of the layout's profiles and leaves the mode.
    type: str
    choices: [present, absent]
    default: present
'''

RETURN = r'''
mig_enabled:
  description: The MIG mode of the GPU now (after its last reset).
  type: bool
instances:
  description: The instances the GPU holds at the end, each with its
    profile, start slot, GPU and compute instance ids and MIG UUID.
  type: list
destroyed:
  description: The instances destroyed (to be destroyed, in check mode).
  type: list
created:
  description: The placements created (to be created, in check mode), as
    "<profile> at <start>".
  type: list
'''

PROFILE = re.compile(r'[1-9][0-9]*g\.[1-9][0-9]*gb(\+me)?')


def _pynvml(module, library):
    try:
        import pynvml
    except ImportError:
        module.fail_json(msg='NVML\'s Python bindings (nvidia-ml-py) are '
                             'not installed')
    try:
        if library.endswith('.py'):
            spec = importlib.util.spec_from_file_location(
                'cyborg_nvml_replay', library)
            replay = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(replay)
            replay.install(pynvml)
        else:
            pynvml.nvmlLib = ctypes.CDLL(library)
        pynvml.nvmlInit()
    except (OSError, pynvml.NVMLError) as exc:
        module.fail_json(msg='NVML (%s) cannot start: %s' % (library, exc))
    return pynvml


def _pci_ids(module, root, device):
    directory = os.path.join(root, 'sys/bus/pci/devices', device)
    ids = []
    for name in ('vendor', 'device'):
        try:
            with open(os.path.join(directory, name)) as f:
                ids.append(f.read().strip().lower().removeprefix('0x'))
        except OSError as exc:
            module.fail_json(msg='%s: %s cannot be read (%s)'
                             % (device, name, exc.strerror))
    return ids


def _shown(instance):
    return {'profile': instance.profile, 'start': instance.start,
            'gi_id': instance.gi_id, 'ci_id': instance.ci_id,
            'mig_uuid': instance.mig_uuid}


def _set_mode(module, nvml, handle, device, enabled):
    """The GPU's MIG mode made ``enabled``, or the task failed."""
    wanted = (nvml.NVML_DEVICE_MIG_ENABLE if enabled
              else nvml.NVML_DEVICE_MIG_DISABLE)
    word = 'on' if enabled else 'off'
    if module.check_mode:
        return
    try:
        nvml.nvmlDeviceSetMigMode(handle, wanted)
    except nvml.NVMLError as exc:
        if exc.value == nvml.NVML_ERROR_IN_USE:
            module.fail_json(msg='%s holds MIG instances or runs processes: '
                                 'its MIG mode cannot be turned %s (NVML: %s)'
                                 % (device, word, exc))
        module.fail_json(msg='%s: MIG mode cannot be turned %s (NVML: %s)'
                         % (device, word, exc))
    current, _ = nvml.nvmlDeviceGetMigMode(handle)
    if current != wanted:
        module.fail_json(msg='MIG mode of %s turns %s at the GPU\'s next '
                             'reset, which is never forced: reset it when it '
                             'is idle (nvidia-smi -r -i %s), then the policy '
                             'applies' % (device, word, device))


def main():
    module = AnsibleModule(
        argument_spec={
            'root': {'type': 'path', 'required': True},
            'device': {'type': 'str', 'required': True},
            'nvml_library': {'type': 'str', 'required': True},
            'mig_enabled': {'type': 'bool', 'required': True},
            'mig_devices': {'type': 'dict', 'default': {}},
            'state': {'type': 'str', 'choices': ['present', 'absent'],
                      'default': 'present'},
        },
        supports_check_mode=True)
    params = module.params
    device = params['device']
    if not PCI_ADDRESS.fullmatch(device):
        module.fail_json(msg='%r is not a PCI address' % device)
    layout = {}
    for name, count in params['mig_devices'].items():
        if not PROFILE.fullmatch(str(name)):
            module.fail_json(msg='%r is not a MIG profile name' % name)
        try:
            layout[name] = int(count)
        except (TypeError, ValueError):
            module.fail_json(msg='the count of %s is not a number' % name)
    layout = {name: count for name, count in layout.items() if count}

    from cyborg.accelerator.drivers.gpu import mig_nvml
    from cyborg.device_config import mig

    table = mig.card_of(*_pci_ids(module, params['root'], device))
    if table is None:
        module.fail_json(msg='%s is not a GPU whose MIG table is known'
                         % device)
    nvml = _pynvml(module, params['nvml_library'])
    try:
        handle = nvml.nvmlDeviceGetHandleByPciBusId(device)
        current, _ = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError as exc:
        module.fail_json(msg='NVML cannot read the MIG mode of %s: %s'
                         % (device, exc))
    enabled = current == nvml.NVML_DEVICE_MIG_ENABLE
    result = {'changed': False, 'mig_enabled': enabled, 'instances': [],
              'destroyed': [], 'created': []}
    if params['state'] == 'present' and params['mig_enabled'] != enabled:
        _set_mode(module, nvml, handle, device, params['mig_enabled'])
        result.update(changed=True, mig_enabled=params['mig_enabled'])
        if module.check_mode or not params['mig_enabled']:
            module.exit_json(**result)
    elif not enabled:
        # Nothing to destroy, nothing to create on a GPU out of MIG mode.
        module.exit_json(**result)

    card = mig_nvml.MIGCard(device)
    try:
        held = card.instances()
        if params['state'] == 'absent':
            doomed = [i for i in held if i.profile in layout]
            placements = []
        else:
            have = collections.Counter(i.profile for i in held
                                       if i.ci_id is not None)
            if have == collections.Counter(layout) and all(
                    i.ci_id is not None for i in held):
                result['instances'] = [_shown(i) for i in held]
                module.exit_json(**result)
            try:
                placements = mig.place(table, layout)
            except mig.Unfit as exc:
                module.fail_json(msg=str(exc), **result)
            doomed = held
        result['destroyed'] = [_shown(i) for i in doomed]
        result['created'] = ['%s at %d' % p for p in placements]
        result['changed'] = bool(doomed or placements)
        if module.check_mode:
            result['instances'] = [_shown(i) for i in held]
            module.exit_json(**result)
        for instance in doomed:
            card.destroy(instance)
        for name, start in placements:
            card.create(name, start)
        result['instances'] = [_shown(i) for i in card.instances()]
    except mig_nvml.MIGError as exc:
        module.fail_json(msg=exc.message, **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
