"""cyborg-limits: register in Keystone the limits that device profiles
need, for Nova and for this service.

    cyborg-limits [--config-file F ...] register [--default-limit N]
        [--region-id REGION] [--os-cloud CLOUD] [--dry-run]

Nova's unified limits count the resource classes of the device profiles
of a flavor as ``class:<resource class>``, but a class without a
registered limit is unlimited there, and Keystone refuses a project's
limit for a class that has no registered limit. ``register`` reads the
resource classes the device profiles ask for (the database of
``[database] connection``) and makes, where missing:

- for Nova (the ``compute`` service): ``class:<resource class>``;
- for this service (``accelerator``): ``accelerator_requests``,
  ``class:<resource class>`` and ``device_profile:<name>`` of every
  profile, which ``[quota] driver = unified_limits`` enforces.

Each is made with ``--default-limit`` (-1, unlimited, by default: set a
project's own limits, or a default, afterwards with ``openstack limit
create`` or ``openstack registered limit set``), in the region of each
endpoint of the service (or ``--region-id``). A limit that exists is left
as it is, whatever its value: running it again changes nothing. One line
is printed per limit, ``created`` or ``exists``.

Keystone is reached as the ``openstack`` client is: ``--os-cloud`` (or
``OS_CLOUD``) names a cloud of clouds.yaml, else the ``OS_*`` variables;
creating registered limits needs an admin of the system
(``OS_SYSTEM_SCOPE=all``). Exit status: 0 done, 2 when the database or
Keystone cannot be read or a service is missing from its catalog.
"""

import sys

from keystoneauth1 import exceptions as ksa_exceptions
import openstack
from openstack import exceptions as sdk_exceptions
from oslo_db import exception as db_exc

from cyborg import cmd
from cyborg import context as cyborg_context
from cyborg.cmd import dbsync
from cyborg.db import session
from cyborg.db.api import device_profiles
from cyborg.quota import resources

COMPUTE = 'compute'
ACCELERATOR = 'accelerator'
TIMEOUT = 30


class Failed(Exception):
    """What stops the command, in a sentence."""


def wanted(resource_classes, profile_names):
    """[(service type, resource name), ...] to register, in order."""
    names = [(COMPUTE, resources.resource_class(rc))
             for rc in resource_classes]
    names.append((ACCELERATOR, resources.ARQS))
    names += [(ACCELERATOR, resources.resource_class(rc))
              for rc in resource_classes]
    names += [(ACCELERATOR, resources.device_profile(name))
              for name in profile_names]
    return names


def _service(identity, service_type, region_id):
    """(service id, [region id, ...]) of the one service of that type."""
    found = list(identity.services(type=service_type))
    if len(found) != 1:
        raise Failed('Keystone\'s catalog has %d services of type %s, not '
                     'one.' % (len(found), service_type))
    service_id = found[0].id
    if region_id is not None:
        return service_id, [region_id]
    regions = sorted({e.region_id for e in identity.endpoints(
        service_id=service_id)}, key=lambda r: r or '')
    return service_id, regions or [None]


def register(identity, names, default_limit, region_id=None, dry_run=False,
             out=None):
    """Make each registered limit of ``names`` that Keystone lacks; the
    lines printed."""
    out = out or sys.stdout
    services = {}
    lines = []
    for service_type, name in names:
        if service_type not in services:
            services[service_type] = _service(identity, service_type,
                                              region_id)
        service_id, regions = services[service_type]
        for region in regions:
            exists = list(identity.registered_limits(
                service_id=service_id, region_id=region,
                resource_name=name))
            if exists:
                verdict = 'exists (default %d)' % exists[0].default_limit
            elif dry_run:
                verdict = 'would be created (default %d)' % default_limit
            else:
                identity.create_registered_limit(
                    service_id=service_id, region_id=region,
                    resource_name=name, default_limit=default_limit)
                verdict = 'created (default %d)' % default_limit
            line = '%s %s in region %s: %s' % (service_type, name,
                                               region or '(none)', verdict)
            print(line, file=out)
            lines.append(line)
    return lines


def _profiles(conf):
    problem = dbsync.unreachable(conf.database.connection)
    if problem:
        raise Failed(problem)
    db = session.Database(conf)
    try:
        context = cyborg_context.admin_context(db)
        classes = device_profiles.resource_classes_used(context)
        names = sorted(p.name for p in device_profiles.list_profiles(
            context))
    except db_exc.DBError as e:
        raise Failed('cannot read the device profiles: %s' % e) from e
    finally:
        db.dispose()
    return classes, names


def run_register(conf, out=None):
    command = conf.command
    try:
        classes, profile_names = _profiles(conf)
        cloud = openstack.connect(cloud=command.os_cloud,
                                  api_timeout=TIMEOUT)
        register(cloud.identity, wanted(classes, profile_names),
                 command.default_limit, region_id=command.region_id,
                 dry_run=command.dry_run, out=out)
    except Failed as e:
        print('cyborg-limits: %s' % e, file=sys.stderr)
        return 2
    except (ksa_exceptions.ClientException,
            sdk_exceptions.SDKException) as e:
        print('cyborg-limits: Keystone: %s' % e, file=sys.stderr)
        return 2
    return 0


def _add_commands(subparsers):
    made = subparsers.add_parser(
        'register', help='Register the limits device profiles need, for '
                         'Nova and for this service, where missing.')
    made.add_argument('--default-limit', type=int, default=-1,
                      help='The default limit of each limit made (-1: '
                           'unlimited).')
    made.add_argument('--region-id', default=None,
                      help='The region of the limits (default: that of '
                           'each endpoint of the service).')
    made.add_argument('--os-cloud', default=None,
                      help='The cloud of clouds.yaml to use (default: '
                           'OS_CLOUD, else the OS_* variables).')
    made.add_argument('--dry-run', action='store_true',
                      help='Print what would be made; make nothing.')
    made.set_defaults(run=run_register)


def main(argv=None):
    return cmd.run_subcommand(_add_commands, 'What to do.', argv)


if __name__ == '__main__':
    sys.exit(main())
