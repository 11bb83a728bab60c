"""cyborg-device-config: where each device stands with the device
configuration policies, read from the database.

    cyborg-device-config [--config-file F ...] status [--host HOST]
        [--state STATE] [--policy NAME_OR_UUID] [--json]

Run it where the conductor runs, with its configuration. ``status``
prints one line per device that a policy selects: its host, its address
(the PCI address, or another control path), the policy that wins it,
its state, when the row last changed and its settings: those wanted,
and those applied where they differ; a failed device adds the task that
failed and why. A summary line counts the devices of each state.
``--json`` prints the same as one JSON document. The options narrow the
devices shown, and the counts, to a host, a state or a policy.

Exit status: 1 when a device shown is ``failed``, 2 when the database
cannot be read or no policy has the name or uuid given, else 0.

The operators' guide describes it in doc/source/admin/device-configuration.rst
("Device status on the controller").
"""

import json
import sys

from oslo_db import exception as db_exc

from cyborg import cmd
from cyborg import context as cyborg_context
from cyborg import exception
from cyborg.cmd import dbsync
from cyborg.db import session
from cyborg.db.api import device_config_policies as policies_db
from cyborg.device_config import status as config_status

_HEADER = ('HOST', 'DEVICE', 'POLICY', 'STATE', 'UPDATED')


def _compact(settings):
    """``num_vfs=8``: a setting's value in JSON unless it is a string."""
    if settings is None:
        return 'none'
    return ' '.join(
        '%s=%s' % (key, value if isinstance(value, str)
                   else json.dumps(value, sort_keys=True,
                                   separators=(',', ':')))
        for key, value in sorted(settings.items()))


def _time(value):
    # Naive UTC, as the database keeps it.
    return value.strftime('%Y-%m-%dT%H:%M:%SZ') if value else None


def _settings(row):
    if row.wanted_settings is None:  # its policy deleted: put back
        text = 'as discovered'
    else:
        text = _compact(row.wanted_settings)
    if row.applied_settings != row.wanted_settings:
        text += ' (applied: %s)' % _compact(row.applied_settings)
    if row.state == config_status.FAILED:
        text += '; %s failed: %s' % (row.failed_task or 'a task',
                                     row.message or 'no message')
    return text


def counts(rows):
    """{state: how many of ``rows`` are in it}, every state named."""
    found = dict.fromkeys(config_status.STATES, 0)
    for row in rows:
        found[row.state] = found.get(row.state, 0) + 1
    return found


def text(rows):
    """The table of ``rows`` (``DeviceStatus``) and the summary line."""
    cells = [_HEADER] + [
        (row.hostname, row.address or row.device_uuid, row.policy_name,
         row.state, _time(row.updated_at or row.created_at) or '-')
        for row in rows]
    tails = ['SETTINGS'] + [_settings(row) for row in rows]
    widths = [max(len(line[i]) for line in cells)
              for i in range(len(_HEADER))]
    lines = ['  '.join(cell.ljust(width) for cell, width
                       in zip(line, widths, strict=True)) + '  ' + tail
             for line, tail in zip(cells, tails, strict=True)] if rows else []
    summary = ', '.join('%d %s' % (n, state)
                        for state, n in counts(rows).items())
    lines.append('%d device%s: %s' % (len(rows), '' if len(rows) == 1
                                      else 's', summary))
    return '\n'.join(lines) + '\n'


def _view(row):
    return {
        'hostname': row.hostname,
        'device_uuid': row.device_uuid,
        'address': row.address,
        'policy_name': row.policy_name,
        'policy_uuid': row.policy_uuid,
        'state': row.state,
        'wanted_settings': row.wanted_settings,
        'applied_settings': row.applied_settings,
        'failed_task': row.failed_task,
        'message': row.message,
        'created_at': _time(row.created_at),
        'updated_at': _time(row.updated_at),
    }


def document(rows):
    """The ``--json`` document of ``rows``."""
    return json.dumps({'devices': [_view(row) for row in rows],
                       'counts': counts(rows)}, indent=2, sort_keys=True)


def status(conf, out=None):
    """Print the status of ``conf.command``'s devices; the exit status."""
    out = out or sys.stdout
    problem = dbsync.unreachable(conf.database.connection)
    if problem:
        print('cyborg-device-config: %s' % problem, file=sys.stderr)
        return 2
    db = session.Database(conf)
    try:
        context = cyborg_context.admin_context(db)
        rows = policies_db.list_device_status(
            context, hostname=conf.command.hostname, state=conf.command.state,
            policy=conf.command.policy)
    except exception.NotFound as e:
        print('cyborg-device-config: %s' % e.message, file=sys.stderr)
        return 2
    except db_exc.DBError as e:
        # A schema not migrated yet, for one.
        print('cyborg-device-config: cannot read the status: %s' % e,
              file=sys.stderr)
        return 2
    finally:
        db.dispose()
    if conf.command.json:
        print(document(rows), file=out)
    else:
        out.write(text(rows))
    return 1 if any(r.state == config_status.FAILED for r in rows) else 0


def _add_commands(subparsers):
    shown = subparsers.add_parser(
        'status', help='Show where each selected device stands; exit 1 '
                       'when one is failed.')
    # dest: oslo.config keeps [DEFAULT] host under that name.
    shown.add_argument('--host', dest='hostname', metavar='HOST',
                       help='Only the devices of this host.')
    shown.add_argument('--state', choices=config_status.STATES,
                       help='Only the devices in this state.')
    shown.add_argument('--policy', metavar='NAME_OR_UUID',
                       help='Only the devices this policy wins.')
    shown.add_argument('--json', action='store_true',
                       help='Print one JSON document.')
    shown.set_defaults(run=status)


def main(argv=None):
    return cmd.run_subcommand(_add_commands, 'What to show.', argv)


if __name__ == '__main__':
    sys.exit(main())
