"""What a device configuration policy would do on this host, found
without changing anything.

``plan`` discovers the host's devices with the agent's drivers, selects
those a policy would select (as the conductor does, from what the agent
would report), reads what each holds now (``device_state``) and runs the
playbooks the agent would run for it (``device_config.runs``) in
Ansible's check mode, where a task only says whether it would change
something. The answer is a plain dict, ready for JSON.

A pair is run in check mode only if nothing in its playbooks can escape
it: a task that sets ``check_mode`` to anything but true runs for real
under ``--check``, and tasks brought in from other files or roles are
not read here, so such a pair is reported and not run.
"""

import dataclasses
import os

import yaml

from cyborg import exception
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import loader
from cyborg.agent import device_config
from cyborg.agent import device_state
from cyborg.device_config import device_checks
from cyborg.device_config import kinds
from cyborg.device_config import selection
from cyborg.objects import inventory
from cyborg.privsep import checks
from cyborg.privsep import playbook

# The fields of a policy as the API takes it; those that do not change
# what a host does (name, priority, restore_on_delete) are accepted and
# left aside.
POLICY_FIELDS = ('name', 'kind', 'priority', 'hosts', 'devices', 'settings',
                 'restore_on_delete')
# Keywords that bring in tasks from elsewhere (last component, so that
# ansible.builtin.include_tasks is one too).
_INCLUDES = {'include', 'include_tasks', 'import_tasks', 'include_role',
             'import_role', 'import_playbook', 'roles'}


def read_policy(body):
    """{kind, hosts, devices, settings} of a policy in the API's form, as
    the API would store them; Invalid with its sentence if not."""
    if not isinstance(body, dict):
        raise exception.Invalid('A policy is a JSON object with kind, '
                                'devices, settings and maybe hosts.')
    unknown = sorted(set(body) - set(POLICY_FIELDS))
    if unknown:
        raise exception.Invalid('A device configuration policy has no field '
                                '%s.' % ', '.join(unknown))
    for field in ('kind', 'devices', 'settings'):
        if field not in body:
            raise exception.Invalid('A device configuration policy needs '
                                    'the field %s.' % field)
    kind = kinds.check_kind(body['kind'])
    return {'kind': kind,
            'hosts': selection.check_hosts(body.get('hosts', ['*'])),
            'devices': selection.check_devices(body['devices']),
            'settings': kinds.check(kind, body['settings'])}


def load_drivers(conf, names, reader):
    """(drivers, problems): each driver of ``names`` that loads, and a
    sentence for each that does not."""
    drivers, problems = [], []
    for name in names:
        try:
            drivers += loader.load_drivers(conf, [name], reader)
        except base.DriverError as exc:
            problems.append(str(exc))
    return drivers, problems


def _described(driver_name, device):
    address = inventory.controlpath_address(device.controlpath_type,
                                            device.controlpath_info)
    board = device.std_board_info or {}
    return {
        'driver': driver_name, 'type': device.type,
        'pci_address': address if device.controlpath_type == 'PCI'
        else None, 'control_path': address,
        'vendor_id': (device.vendor or '').lower(),
        'product_id': (board.get('product_id') or '').lower() or None,
        'model': device.model,
        'deployables': [{'name': d.name, 'driver': d.driver_name,
                         'resource_class': d.resource_class,
                         'count': d.num_accelerators}
                        for d in device.deployables],
        'sriov_totalvfs': board.get('sriov_totalvfs'),
        'mdev_types': board.get('mdev_types'),
    }


def discover(drivers):
    """(devices described, problems) of what ``drivers`` find now."""
    found, problems = [], []
    for driver in drivers:
        try:
            devices = driver.discover()
        except Exception as exc:  # one broken driver must not hide others
            problems.append('%s: discovery failed: %s' % (driver.name, exc))
            continue
        found += [_described(driver.name, d) for d in devices]
    return found, problems


def _facts(hostname, described):
    """``selection.DeviceFacts`` of each device, one per control path, as
    the conductor would hold them once the agent reported them."""
    merged = {}
    for device in described:
        key = device['control_path']
        drivers = {d['driver'] for d in device['deployables'] if d['driver']}
        if key in merged:
            merged[key] = dataclasses.replace(
                merged[key], drivers=merged[key].drivers | drivers)
            continue
        total = device['sriov_totalvfs']
        merged[key] = selection.DeviceFacts(
            id=len(merged), uuid='discovered', hostname=hostname,
            vendor_id=device['vendor_id'], product_id=device['product_id'],
            drivers=frozenset(drivers), pci_address=device['pci_address'],
            sriov_totalvfs=int(total) if str(total).isdigit() else None,
            mdev_types=(tuple(device['mdev_types'])
                        if isinstance(device['mdev_types'], list) else None))
    return list(merged.values())


def escapes_check_mode(directory):
    """Sentences on what in the pair at ``directory`` would run for real
    under ``--check``, or could; [] when nothing would."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            if 'check_mode' in node and node['check_mode'] is not True:
                found.append('%s: task %r sets check_mode to %r, so it would '
                             'run for real' % (where, node.get('name', '?'),
                                               node['check_mode']))
            for key in node:
                if str(key).rsplit('.', 1)[-1] in _INCLUDES:
                    found.append('%s: %s brings in tasks this check does '
                                 'not read' % (where, key))
            for value in node.values():
                walk(value, where)
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    for action in ('setup', 'teardown'):
        name = action + '.yml'
        with open(os.path.join(directory, name)) as f:
            walk(yaml.safe_load(f), name)
    return found


def check_run(pair, action, variables, sysfs_root, timeout, nvml_library):
    """The runner's summary of ``action`` of ``pair`` in check mode, with
    ``would_change`` (the names of the tasks that would change
    something); or {'error': sentence} where it was not run."""
    try:
        escapes = escapes_check_mode(playbook.find_pair(pair))
        if escapes:
            return {'error': 'not run, even in check mode: '
                    + '; '.join(escapes)}
        result = playbook.run(pair, action, variables, True, sysfs_root,
                              timeout, nvml_library=nvml_library)
    except (checks.InvalidArgument, playbook.PlaybookError, OSError,
            yaml.YAMLError) as exc:
        return {'error': str(exc)}
    result['would_change'] = [t['name'] for t in result['tasks']
                              if t['status'] == 'changed']
    return result


def compare(kind, state, settings):
    """Sentences on what the device holds against what is wanted."""
    if kind == kinds.SRIOV_VFS and 'sriov_numvfs' in state:
        now, wanted = state['sriov_numvfs'], settings['num_vfs']
        return ['VFs: %s now, %d wanted (sriov_totalvfs %s)%s' % (
            now, wanted, state['sriov_totalvfs'],
            '' if now != wanted else ': as wanted')]
    if kind == kinds.SRIOV_VFS:
        return ['VFs: the device has no sriov_numvfs (no SR-IOV)']
    if kind == kinds.DRIVER_BINDING:
        wanted = settings['driver']
        return ['driver: %s now, %s wanted' % (
            state['driver'] or 'none',
            'its own' if wanted == 'own' else wanted)]
    if kind == kinds.VGPU_TYPE:
        offered = (state.get('creatable_vgpu_types', [])
                   + [t for t in (state.get('vf_vgpu_types') or {}).values()
                      if t] + state.get('mdev_types', []))
        wanted = settings['mdev_type']
        return ['vGPU type %s wanted: %s' % (
            wanted, 'offered' if wanted in offered else 'not offered (it '
            'offers %s)' % (', '.join(sorted(set(offered))) or 'none'))]
    if kind == kinds.MIG_LAYOUT:
        return ['MIG mode: %s now, %s wanted%s' % (
            state.get('mig_mode', 'not an NVIDIA GPU'),
            'on' if settings['mig_enabled'] else 'off',
            ', with %s' % ', '.join('%d x %s' % (c, n) for n, c in sorted(
                settings['mig_devices'].items()))
            if settings['mig_devices'] else '')]
    return []


def plan(reader, drivers, hostname, policy=None, applied=None,
         sysfs_root='/', timeout=900, nvml_library=playbook.DEFAULT_NVML,
         mig_modes=None):
    """What ``policy`` (``read_policy``'s, or None for discovery only)
    would do to the devices ``drivers`` find on host ``hostname``, the
    device settings having been ``applied`` before (None: none); the
    playbooks run against ``sysfs_root`` and the NVML of
    ``nvml_library``, as the privileged helper runs them."""
    described, problems = discover(drivers)
    report = {'host': hostname, 'sysfs_root': sysfs_root,
              'drivers': [d.name for d in drivers], 'devices': described,
              'problems': problems, 'policy': policy}
    if policy is None:
        return report
    kind, settings = policy['kind'], policy['settings']
    report['host_selected'] = selection.host_selected(policy['hosts'],
                                                      hostname)
    chosen = [f for f in _facts(hostname, described)
              if selection.selects(policy['hosts'], policy['devices'], f)]
    report['unfit'] = None
    try:
        device_checks.check(kind, settings, policy['devices'], chosen)
    except exception.Invalid as exc:
        report['unfit'] = str(exc)
    report['selected'] = []
    for facts in chosen:
        entry = {'pci_address': facts.pci_address,
                 'drivers': sorted(facts.drivers),
                 'vendor_id': facts.vendor_id,
                 'product_id': facts.product_id, 'runs': []}
        report['selected'].append(entry)
        if facts.pci_address is None:
            entry['not_planned'] = 'the device has no PCI address'
            continue
        state = device_state.read(reader, facts.pci_address, mig_modes)
        entry['state'] = state
        if state is None:
            entry['not_planned'] = 'the device is no longer there'
            continue
        entry['compare'] = compare(kind, state, settings)
        if kind == kinds.FPGA_BASE_IMAGE:
            entry['not_planned'] = ('an FPGA base image is loaded by the '
                                    'FPGA driver\'s tool, as for a bind, '
                                    'not by a playbook: nothing to check '
                                    'here.')
            continue
        if kind not in device_config.PAIRS:
            entry['not_planned'] = ('This agent has no playbook pair for %s '
                                    'settings yet.' % kind)
            continue
        # The PF's driver chooses the pair of a VF count (QAT's own).
        for pair, action, variables in device_config.runs(
                kind, facts.pci_address, applied, settings,
                kernel_driver=state.get('driver')):
            result = check_run(pair, action, variables, sysfs_root, timeout,
                               nvml_library)
            entry['runs'].append(dict(result, pair=pair, action=action,
                                      variables=variables))
    return report
