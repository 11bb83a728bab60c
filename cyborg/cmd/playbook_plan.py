"""cyborg-playbooks plan: what a device configuration policy would do on
this host, found without changing anything.

    cyborg-playbooks plan [POLICY] [--applied SETTINGS] [--json]
        [--sysfs-root DIR] [--config-file FILE ...] [--drivers A,B]
        [--host NAME] [--timeout SECONDS]

Run as root on the host, with the agent's configuration. It shows:

1. every device the agent's drivers discover (``[agent]
   enabled_drivers``, else every registered driver but the fake one);
2. with a POLICY (a JSON file, ``-`` for standard input, or the JSON
   itself, in the form ``POST /v2/device_config_policies`` takes: kind,
   devices, settings and maybe hosts), the devices it selects here, what
   each holds now as the playbooks read it (VF counts, driver, vGPU
   types, MIG mode through read-only NVML calls) against what is wanted;
3. the playbooks the agent would run for each (the teardown with
   ``--applied``, the settings applied before, then the setup), run in
   Ansible's check mode: each task says whether it would change
   something, and none writes. Each run is checked against the host as
   it is now, so a setup after a teardown may show changes the teardown
   would already have made. A pair with a task that sets ``check_mode``
   to anything but true, or that brings in tasks from other files or
   roles, is not run (``config_plan.escapes_check_mode``).

Exit status: 0, or 2 when the policy is not valid or a check-mode run
failed or could not run.
"""

import json
import os
import sys

from oslo_config import cfg

from cyborg import conf as cyborg_conf
from cyborg import exception
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.agent import config_plan
from cyborg.agent import device_state
from cyborg.device_config import kinds
from cyborg.privsep import checks

HELP = ('Show what a device configuration policy would do on this host, '
        'changing nothing: the devices the agent\'s drivers discover, those '
        'the policy selects with what they hold now, and the playbooks the '
        'agent would run, in Ansible\'s check mode (no task writes, and a '
        'pair with a task that turns check mode off is not run; NVML is '
        'only read). Run as root on the host.')


def add_parser(commands):
    parser = commands.add_parser('plan', help=HELP, description=HELP)
    parser.add_argument('policy', nargs='?',
                        help='the policy as the API takes it: a JSON file, '
                             '"-" for standard input, or the JSON itself; '
                             'without it, discovery only')
    parser.add_argument('--applied', metavar='SETTINGS',
                        help='settings applied before, as JSON: the '
                             'teardown with them is checked first')
    parser.add_argument('--sysfs-root', help='root of the tree to read '
                        '(default: [pci] sysfs_root, "/")')
    parser.add_argument('--config-file', action='append', default=[],
                        help='the agent\'s configuration file (repeatable; '
                             'default: oslo.config\'s search, '
                             '/etc/cyborg/cyborg.conf)')
    parser.add_argument('--drivers', help='comma-separated driver names '
                        '(default: [agent] enabled_drivers, else all)')
    parser.add_argument('--host', help='this host\'s name as the agent '
                        'reports it (default: [DEFAULT] host)')
    parser.add_argument('--timeout', type=int, help='seconds one check-mode '
                        'run may take (default: [device_config] '
                        'playbook_timeout)')
    parser.add_argument('--json', action='store_true',
                        help='print one JSON document')
    return parser


def _json_argument(text, what):
    """The JSON of ``text``: the JSON itself, ``-`` (standard input) or a
    file's name."""
    try:
        if text.lstrip().startswith(('{', '[')):
            return json.loads(text)
        if text == '-':
            return json.load(sys.stdin)
        with open(text) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise exception.Invalid('%s: %s' % (what, exc))


def _driver_names(conf, given):
    if given:
        return [n.strip() for n in given.split(',') if n.strip()]
    if conf.agent.enabled_drivers:
        return list(conf.agent.enabled_drivers)
    import stevedore  # only here: listing every registered driver
    return sorted(n for n in stevedore.ExtensionManager(
        base.NAMESPACE).names() if n != 'fake_driver')


def _shown(value):
    return json.dumps(value, sort_keys=True)


def _state_text(state):
    parts = []
    for key, value in state.items():
        if isinstance(value, list):
            value = ', '.join(value) or 'none'
        elif isinstance(value, dict):
            value = ', '.join('%s %s' % (k, v or 'none')
                              for k, v in value.items())
        parts.append('%s %s' % (key, 'none' if value is None else value))
    return '; '.join(parts)


def render(report, out):
    """``report`` (``config_plan.plan``'s) as text."""
    def say(text=''):
        print(text, file=out)

    say('Dry run on host %s (sysfs root %s): nothing is changed.'
        % (report['host'], report['sysfs_root']))
    say()
    say('Discovered devices (drivers: %s):'
        % (', '.join(report['drivers']) or 'none'))
    for device in report['devices']:
        say('  %-24s %-6s %-14s %s:%s %s; %s' % (
            device['driver'], device['type'], device['control_path'],
            device['vendor_id'], device['product_id'] or '-',
            device['model'], ', '.join(
                '%s (%s x%d)' % (d['name'], d['resource_class'], d['count'])
                for d in device['deployables']) or 'no deployable'))
    if not report['devices']:
        say('  none')
    for problem in report['problems']:
        say('  problem: %s' % problem)
    policy = report['policy']
    if policy is None:
        return
    say()
    say('Policy: %s %s; hosts %s; devices %s' % (
        policy['kind'], _shown(policy['settings']), _shown(policy['hosts']),
        _shown(policy['devices'])))
    if not report['host_selected']:
        say('Its hosts do not include %s: it selects nothing here.'
            % report['host'])
        return
    if report['unfit']:
        say('The API would refuse it: %s' % report['unfit'])
    if not report['selected']:
        say('It selects no device on this host.')
        return
    say('It selects %d device(s) on this host.' % len(report['selected']))
    for entry in report['selected']:
        say()
        say('%s (%s:%s, reported by %s)' % (
            entry['pci_address'], entry['vendor_id'],
            entry['product_id'] or '-',
            ', '.join(entry['drivers']) or 'no driver on record'))
        if entry.get('state'):
            say('  now: %s' % _state_text(entry['state']))
        for line in entry.get('compare', []):
            say('  %s' % line)
        if entry.get('not_planned'):
            say('  no playbook run: %s' % entry['not_planned'])
        for run in entry['runs']:
            head = '  %s %s %s' % (run['pair'], run['action'],
                                   _shown(run['variables']))
            if 'error' in run:
                say('%s: not checked: %s' % (head, run['error']))
                continue
            say('%s: check mode %s, %d of %d tasks would change' % (
                head, run['status'], len(run['would_change']),
                len(run['tasks'])))
            for task in run['tasks']:
                status = ('would change' if task['status'] == 'changed'
                          else task['status'])
                say('    %-13s %s%s' % (status, task['name'],
                                        ': ' + task['message']
                                        if task['status'] == 'failed'
                                        else ''))


def _failed(report):
    return any('error' in run or run['status'] != 'successful'
               for entry in report.get('selected', [])
               for run in entry['runs'])


def main(args, out=None):
    """Run ``plan`` with the parsed ``args``; the exit status."""
    out = out or sys.stdout
    conf = cyborg_conf.load(
        [a for f in args.config_file for a in ('--config-file', f)],
        conf=cfg.ConfigOpts())
    try:
        policy = applied = None
        if args.policy is not None:
            policy = config_plan.read_policy(
                _json_argument(args.policy, 'the policy'))
        if args.applied is not None:
            if policy is None:
                raise exception.Invalid('--applied needs a policy.')
            applied = kinds.check(policy['kind'], _json_argument(
                args.applied, 'the applied settings'))
    except exception.Invalid as exc:
        print('Invalid policy: %s' % exc, file=sys.stderr)
        return 2
    root = os.path.realpath(args.sysfs_root or conf.pci.sysfs_root)
    reader = pci.PCIReader(root)
    drivers, problems = config_plan.load_drivers(
        conf, _driver_names(conf, args.drivers), reader)
    # The privileged helper finds operators' pairs in its own
    # [device_config] playbook_dir: the agent's configuration names it.
    daemon = checks.daemon_conf()
    daemon.set_override('playbook_dir', conf.device_config.playbook_dir,
                        group='device_config')
    try:
        with device_state.MIGModes() as mig_modes:
            report = config_plan.plan(
                reader, drivers, args.host or conf.host, policy, applied,
                sysfs_root=root, timeout=args.timeout
                or conf.device_config.playbook_timeout,
                nvml_library=conf.device_config.nvml_library,
                mig_modes=mig_modes)
    finally:
        daemon.clear_override('playbook_dir', group='device_config')
    report['problems'][:0] = problems
    if args.json:
        json.dump(report, out, indent=1, sort_keys=True)
        print(file=out)
    else:
        render(report, out)
    return 2 if _failed(report) else 0
