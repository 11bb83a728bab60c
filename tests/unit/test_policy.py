"""Every policy rule of the contract, checked through oslo.policy.

The callers are contexts shaped like Keystone tokens: a project-scoped
token carries the roles implied by its role (admin implies manager, member
and reader), Nova's service user holds ``service`` in its own project, and
a system-scoped token has no project at all.
"""

from oslo_policy import opts as policy_opts
import pytest

from cyborg import context
from cyborg import exception
from cyborg import policies
from cyborg import policy
from tests.conftest import make_conf

# With the new defaults off, oslo.policy warns about every deprecated rule
# it evaluates: expected here, and it would drown the report.
pytestmark = pytest.mark.filterwarnings(
    'ignore:Policy .* was deprecated in .* in favor of:UserWarning')

PROJECT = 'project-a'
OTHER_PROJECT = 'project-b'
TARGET = {'project_id': PROJECT}

IMPLIED_ROLES = {
    'reader': ['reader'],
    'member': ['member', 'reader'],
    'manager': ['manager', 'member', 'reader'],
    'admin': ['admin', 'manager', 'member', 'reader'],
}

# name: (roles, project of the token)
CALLERS = {
    'reader': (IMPLIED_ROLES['reader'], PROJECT),
    'member': (IMPLIED_ROLES['member'], PROJECT),
    'manager': (IMPLIED_ROLES['manager'], PROJECT),
    'admin': (IMPLIED_ROLES['admin'], PROJECT),
    'service': (['service'], 'service'),
    'other_member': (IMPLIED_ROLES['manager'], OTHER_PROJECT),
    'other_admin': (IMPLIED_ROLES['admin'], OTHER_PROJECT),
    'no_role': (['some-other-role'], PROJECT),
}

READERS = {'reader', 'member', 'manager', 'admin', 'other_admin'}
MEMBERS_OR_SERVICE = {'member', 'manager', 'admin', 'service'}
MANAGERS = {'manager', 'admin', 'other_admin'}
ADMINS = {'admin', 'other_admin'}

# The "Policy" table of the contract: rule name -> who the new defaults
# allow.
CONTRACT = {
    'cyborg:device_profile:get_all': READERS,
    'cyborg:device_profile:get_one': READERS,
    'cyborg:device_profile:create': ADMINS,
    'cyborg:device_profile:delete': ADMINS,
    'cyborg:device_profile:update': ADMINS,
    'cyborg:device_profile:all_profiles': ADMINS,
    'cyborg:device_profile:get_projects': ADMINS,
    'cyborg:device_profile:add_project': ADMINS,
    'cyborg:device_profile:remove_project': ADMINS,
    'cyborg:arq:get_all': READERS,
    'cyborg:arq:get_one': READERS,
    'cyborg:arq:create': MEMBERS_OR_SERVICE,
    'cyborg:arq:update': MEMBERS_OR_SERVICE,
    'cyborg:arq:delete': MEMBERS_OR_SERVICE,
    # Ours: who sees every project's ARQs (and may set /project_id).
    'cyborg:arq:all_projects': ADMINS,
    # Ours: the inventory of every host is no project's business.
    'cyborg:device:get_all': ADMINS,
    'cyborg:device:get_one': ADMINS,
    'cyborg:deployable:get_all': ADMINS,
    'cyborg:deployable:get_one': ADMINS,
    'cyborg:attribute:get_all': ADMINS,
    'cyborg:attribute:get_one': ADMINS,
    'cyborg:device:disable': ADMINS,
    'cyborg:device:enable': ADMINS,
    'cyborg:device:health_override': ADMINS,
    # Ours: who sees the devices' usage (other callers get null).
    'cyborg:device:get_usage': ADMINS,
    'cyborg:deployable:program': ADMINS,
    'cyborg:attribute:create': ADMINS,
    'cyborg:attribute:delete': ADMINS,
    'cyborg:service:get_all': ADMINS,
    # Ours: a project's limits and usage; an admin's of any project.
    'cyborg:limits:get': READERS,
    'cyborg:device_config_policy:get_all': ADMINS,
    'cyborg:device_config_policy:get_one': ADMINS,
    'cyborg:device_config_policy:create': ADMINS,
    'cyborg:device_config_policy:update': ADMINS,
    'cyborg:device_config_policy:delete': ADMINS,
}

# Before the new defaults, device profile and ARQ reads and ARQ writes
# were open to any authenticated caller (ARQs stay within the caller's
# project) and the rest needed the admin role, except the inventory of
# every host (devices, deployables, attributes): project managers read it
# too, and still do under the legacy defaults.
LEGACY_OPEN = {
    'cyborg:device_profile:get_all', 'cyborg:device_profile:get_one',
    'cyborg:arq:get_all', 'cyborg:arq:get_one', 'cyborg:arq:create',
    'cyborg:arq:update', 'cyborg:arq:delete',
}
INVENTORY_READS = {
    'cyborg:device:get_all', 'cyborg:device:get_one',
    'cyborg:deployable:get_all', 'cyborg:deployable:get_one',
    'cyborg:attribute:get_all', 'cyborg:attribute:get_one',
}


def legacy_allowed(rule):
    if rule in LEGACY_OPEN:
        return set(CALLERS)
    return MANAGERS if rule in INVENTORY_READS else CONTRACT[rule]


@pytest.fixture
def make_enforcer(tmp_path):
    """An enforcer on a fresh configuration with ``[oslo_policy]`` set."""

    def make(**policy_overrides):
        conf = make_conf('sqlite://')
        # Registers [oslo_policy] so it can be overridden before the
        # enforcer reads it.
        policy_opts.set_defaults(conf)
        # A policy file that does not exist: the defaults in code apply,
        # whatever policy.yaml the machine has in /etc.
        policy_overrides.setdefault('policy_file',
                                    str(tmp_path / 'absent.yaml'))
        for name, value in policy_overrides.items():
            conf.set_override(name, value, group='oslo_policy')
        return policy.make_enforcer(conf)

    return make


def caller(name):
    roles, project_id = CALLERS[name]
    return context.RequestContext(user_id='user-' + name, roles=roles,
                                  project_id=project_id)


def system_admin():
    return context.RequestContext(user_id='cloud-admin',
                                  roles=IMPLIED_ROLES['admin'],
                                  system_scope='all')


def is_allowed(enforcer, ctx, rule, target=TARGET):
    try:
        policy.authorize(enforcer, ctx, rule, dict(target))
    except exception.Forbidden as e:
        assert e.status == 403
        assert e.code == 'cyborg.policy.forbidden'
        return False
    return True


def test_registered_rules_are_the_contract():
    assert sorted(r.name for r in policies.list_rules()) == sorted(CONTRACT)


def test_every_rule_is_project_scoped_with_a_legacy_default():
    for rule in policies.list_rules():
        assert rule.scope_types == ['project'], rule.name
        # None where the default did not change: the admin-only rules.
        if rule.deprecated_rule is not None:
            assert rule.deprecated_rule.name == rule.name
            assert rule.deprecated_rule.check_str != rule.check_str


@pytest.mark.parametrize('rule', sorted(CONTRACT))
def test_new_defaults(make_enforcer, rule):
    enforcer = make_enforcer()
    allowed = {name for name in CALLERS
               if is_allowed(enforcer, caller(name), rule)}
    assert allowed == CONTRACT[rule]


@pytest.mark.parametrize('rule', sorted(CONTRACT))
def test_legacy_defaults_when_new_defaults_are_off(make_enforcer, rule):
    enforcer = make_enforcer(enforce_new_defaults=False)
    allowed = {name for name in CALLERS
               if is_allowed(enforcer, caller(name), rule)}
    assert allowed == legacy_allowed(rule)


@pytest.mark.parametrize('enforce_new_defaults', [True, False])
@pytest.mark.parametrize('rule', sorted(CONTRACT))
def test_system_scoped_admin_is_refused(make_enforcer, rule,
                                        enforce_new_defaults):
    enforcer = make_enforcer(enforce_new_defaults=enforce_new_defaults)
    with pytest.raises(exception.Forbidden) as raised:
        policy.authorize(enforcer, system_admin(), rule)
    assert raised.value.status == 403
    assert raised.value.code == 'cyborg.policy.scope'


def test_scenarios_named_in_the_contract(make_enforcer):
    enforcer = make_enforcer()
    reader, member = caller('reader'), caller('member')
    manager, admin = caller('manager'), caller('admin')
    service = caller('service')

    assert is_allowed(enforcer, reader, 'cyborg:device_profile:get_all')
    assert is_allowed(enforcer, reader, 'cyborg:device_profile:get_one')
    assert not is_allowed(enforcer, reader, 'cyborg:device_profile:create')
    assert not is_allowed(enforcer, member, 'cyborg:device_profile:create')
    assert is_allowed(enforcer, admin, 'cyborg:device_profile:create')

    for action in ('create', 'update', 'delete'):
        rule = 'cyborg:arq:' + action
        assert is_allowed(enforcer, member, rule)
        assert is_allowed(enforcer, service, rule)
        assert not is_allowed(enforcer, reader, rule)

    for resource in ('device', 'deployable', 'attribute'):
        rule = 'cyborg:%s:get_all' % resource
        assert is_allowed(enforcer, admin, rule)
        assert not is_allowed(enforcer, manager, rule)
        assert not is_allowed(enforcer, member, rule)


def test_legacy_defaults_still_allow_what_they_allowed(make_enforcer):
    enforcer = make_enforcer(enforce_new_defaults=False)
    # Refused under the new defaults, allowed by the legacy '@'.
    assert is_allowed(enforcer, caller('reader'), 'cyborg:arq:create')
    # Admin-only before and after.
    assert not is_allowed(enforcer, caller('member'),
                          'cyborg:device_profile:create')


@pytest.mark.parametrize('rule', sorted(INVENTORY_READS))
def test_inventory_reads_keep_managers_only_under_legacy(make_enforcer,
                                                         rule):
    legacy = make_enforcer(enforce_new_defaults=False)
    new = make_enforcer()
    defaults, = [r for r in policies.list_rules() if r.name == rule]

    assert {name for name in CALLERS
            if is_allowed(new, caller(name), rule)} == ADMINS
    # The deprecated default is the one before: managers of any project
    # and admins; no reader or member of any project.
    assert {name for name in CALLERS
            if is_allowed(legacy, caller(name), rule)} == MANAGERS
    assert defaults.check_str == 'role:admin'
    deprecated = defaults.deprecated_rule
    assert deprecated.check_str == (
        '(role:manager and project_id:%(project_id)s) or role:admin')
    assert deprecated.deprecated_since == '2027.1'
    assert 'admins' in deprecated.deprecated_reason


def test_default_target_is_the_callers_project(make_enforcer):
    enforcer = make_enforcer()
    member = caller('other_member')
    # Without a target the caller acts on its own project.
    policy.authorize(enforcer, member, 'cyborg:arq:create')
    with pytest.raises(exception.Forbidden):
        policy.authorize(enforcer, member, 'cyborg:arq:create',
                         {'project_id': PROJECT})


def test_policy_file_overrides_a_default(make_enforcer, tmp_path):
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text(
        '"cyborg:device_profile:create": "role:manager"\n')
    enforcer = make_enforcer(policy_file=str(policy_file))
    assert is_allowed(enforcer, caller('manager'),
                      'cyborg:device_profile:create')
    assert not is_allowed(enforcer, caller('member'),
                          'cyborg:device_profile:create')
    # Rules the file does not name keep their defaults.
    assert not is_allowed(enforcer, caller('manager'),
                          'cyborg:device:enable')
