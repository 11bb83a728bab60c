"""Check strings shared by the rules of every resource.

Roles imply each other in Keystone: admin > manager > member > reader.
The ``service`` role (Nova's service user) stands apart.
"""

from oslo_policy import policy

ADMIN = 'role:admin'
SERVICE = 'role:service'
PROJECT_READER = 'role:reader and project_id:%(project_id)s'
PROJECT_MEMBER = 'role:member and project_id:%(project_id)s'
PROJECT_MANAGER = 'role:manager and project_id:%(project_id)s'

PROJECT_READER_OR_ADMIN = '(%s) or %s' % (PROJECT_READER, ADMIN)
PROJECT_MANAGER_OR_ADMIN = '(%s) or %s' % (PROJECT_MANAGER, ADMIN)
PROJECT_MEMBER_OR_SERVICE = '(%s) or %s' % (PROJECT_MEMBER, SERVICE)

# What the rules allowed before the new defaults, kept while operators
# run with [oslo_policy] enforce_new_defaults = False.
LEGACY_ANYONE = '@'
# The admin role, as now. (It read "is_admin:True or role:admin", but
# oslo.context deprecates rules that read ``is_admin``, and the only
# contexts with it, the services' own, carry the admin role too.)
LEGACY_ADMIN = ADMIN

DEPRECATED_REASON = (
    'The rules now know the reader, member, manager and service roles and '
    'project scope.')
DEPRECATED_SINCE = '2026.2'

# Project managers read the inventory of every host until 2027.1; their
# rule stays as the deprecated default of those reads.
INVENTORY_DEPRECATED_REASON = (
    'The inventory of every host (devices, deployables, attributes) shows '
    'the hardware, hosts and health of the whole cloud, which is no '
    'business of any one project: it is now for admins.')
INVENTORY_DEPRECATED_SINCE = '2027.1'


def rule(name, check_str, description, operations, legacy,
         deprecated_reason=DEPRECATED_REASON,
         deprecated_since=DEPRECATED_SINCE):
    """A project-scoped rule whose legacy default is ``legacy``; one whose
    default did not change has no deprecated rule."""
    deprecated = None
    if legacy != check_str:
        deprecated = policy.DeprecatedRule(
            name=name, check_str=legacy,
            deprecated_reason=deprecated_reason,
            deprecated_since=deprecated_since)
    return policy.DocumentedRuleDefault(
        name=name,
        check_str=check_str,
        description=description,
        operations=[{'method': m, 'path': p} for m, p in operations],
        scope_types=['project'],
        deprecated_rule=deprecated)


def inventory_read(name, description, operations):
    """A read of the inventory of every host: for admins; under the legacy
    defaults a manager of any project still reads it, as before."""
    return rule(name, ADMIN, description, operations,
                PROJECT_MANAGER_OR_ADMIN,
                deprecated_reason=INVENTORY_DEPRECATED_REASON,
                deprecated_since=INVENTORY_DEPRECATED_SINCE)
