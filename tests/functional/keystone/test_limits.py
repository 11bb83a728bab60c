"""Per-project limits on accelerator requests, from the session's real
Keystone, on each database engine.

Keystone holds this service (type ``accelerator``) and Nova (``compute``)
in its catalog, each with a public endpoint in RegionOne. The API runs
with ``[quota] driver = unified_limits``; oslo.limit reads the limits as
``auditor``, a reader of the system, through ``[oslo_limit]`` of the
process's ``cfg.CONF``. ``limits_cache_seconds = 0``: each creation reads
the limits it is held to (the cache has its own test below).

Each test makes its own project and member, so that the limits it sets
touch no other test; registered limits are shared by all.
"""

import threading
import uuid

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_limit import limit as oslo_limit  # registers [oslo_limit]
import pytest
import requests

from cyborg.cmd import limits as limits_cmd
from cyborg.db.api import arqs
from cyborg.quota import limits
from tests import arq_stack
from tests.arq_stack import ARQS
from tests.conftest import ServedAPI
from tests.functional.keystone.conftest import Caller

pytestmark = pytest.mark.xdist_group('keystone')

V28 = {'OpenStack-API-Version': 'accelerator 2.8'}
LIMITS = '/v2/limits'
# One FPGA, one ARQ; two FPGAs, two ARQs.
ONE = [{'resources:FPGA': '1'}]
TWO = [{'resources:FPGA': '2'}]
# Plenty, for projects with no limit of their own.
REGISTERED_ARQS = 1000


@pytest.fixture(scope='session')
def services(keystone_service):
    """{service type: id} of this service and Nova in Keystone's catalog,
    ``accelerator_requests`` registered, and oslo.limit pointed at this
    Keystone (as ``auditor``) until the session ends."""
    found = {kind: keystone_service.ensure_service(kind, name)
             for kind, name in (('accelerator', 'cyborg'),
                                ('compute', 'nova'))}
    keystone_service.set_registered_limit(
        found['accelerator'], 'accelerator_requests', REGISTERED_ARQS)
    group = 'oslo_limit'
    cfg.CONF.register_opts(
        ks_loading.get_auth_plugin_conf_options('password'), group=group)
    auditor = keystone_service.users['auditor']
    overrides = {
        'auth_type': 'password', 'auth_url': keystone_service.auth_url,
        'username': auditor.name, 'password': auditor.password,
        'user_domain_id': 'default', 'system_scope': 'all',
        'endpoint_service_type': 'accelerator',
        'endpoint_region_name': 'RegionOne'}
    for name, value in overrides.items():
        cfg.CONF.set_override(name, value, group=group)
    yield found
    for name in overrides:
        cfg.CONF.clear_override(name, group=group)


@pytest.fixture
def member(keystone_service, request):
    """A new project and its member: (user name, project id)."""
    name = 'quota-%s' % uuid.uuid4().hex[:8]
    keystone_service.add_user(name, name, ('member',))
    return name, keystone_service.projects[name]


@pytest.fixture
def limited(conf, db, transport, keystone_service, services, admin_context):
    """A ``Caller`` of the API served under unified limits, with the
    profiles ``one`` and ``two``."""
    conf.set_override('driver', 'unified_limits', group='quota')
    conf.set_override('limits_cache_seconds', 0, group='quota')
    conf.set_override('threads', 24, group='api')
    keystone_service.configure_authtoken(conf)
    arq_stack.make_profile(admin_context, 'one', ONE)
    arq_stack.make_profile(admin_context, 'two', TWO)
    served = ServedAPI(conf, db, transport)
    yield Caller(served.url, keystone_service)
    served.stop()


def _count(admin_context, project_id):
    return len(arqs.list_arqs(admin_context, project_id=project_id))


def _refused(response):
    assert response.status_code == 403, response.text
    body = response.json()
    assert body['code'] == 'cyborg.quota.exceeded'
    return body['error_message']


def test_limits_are_read_through_oslo_limit_and_kept_for_a_time(
        conf, keystone_service, services, member):
    """Registered defaults and a project's own limits, as oslo.limit
    reads them; a change is seen once the kept copy is older than
    ``limits_cache_seconds``."""
    accelerator = services['accelerator']
    _, project_id = member
    keystone_service.set_registered_limit(accelerator, 'class:CUSTOM_READ', 8)
    keystone_service.set_project_limit(accelerator, project_id,
                                       'accelerator_requests', 5)
    conf.set_override('limits_cache_seconds', 60, group='quota')
    now = [0.0]
    reader = limits.UnifiedLimits(conf, clock=lambda: now[0])
    read = reader.limits_of(project_id)
    assert read['accelerator_requests'] == 5  # the project's own
    assert read['class:CUSTOM_READ'] == 8  # the registered default
    assert isinstance(reader._enforcer, oslo_limit.Enforcer)

    keystone_service.set_project_limit(accelerator, project_id,
                                       'accelerator_requests', 7)
    now[0] = 59.0
    assert reader.limits_of(project_id)['accelerator_requests'] == 5
    now[0] = 60.0
    assert reader.limits_of(project_id)['accelerator_requests'] == 7


def test_a_project_at_its_limit_is_refused_with_the_limit_usage_and_request(
        limited, keystone_service, services, member, admin_context):
    accelerator = services['accelerator']
    user, project_id = member
    keystone_service.set_project_limit(accelerator, project_id,
                                       'accelerator_requests', 2)
    limited.create(user, 'one')
    limited.create(user, 'one')
    message = _refused(limited('POST', ARQS, user,
                               json={'device_profile_name': 'one'}))
    assert message == (
        'Project %s is over its limits, so no accelerator request was '
        'created: accelerator_requests limit 2, in use 2, requested 1. '
        'Delete accelerator requests it no longer needs, or ask an '
        'administrator to raise the limits.' % project_id)
    assert _count(admin_context, project_id) == 2

    # Units of a resource class, and ARQs of one profile, both named.
    keystone_service.set_project_limit(accelerator, project_id,
                                       'accelerator_requests', 100)
    keystone_service.set_registered_limit(accelerator, 'class:FPGA', -1)
    keystone_service.set_project_limit(accelerator, project_id,
                                       'class:FPGA', 5)
    keystone_service.set_registered_limit(
        accelerator, 'device_profile:two', -1)
    keystone_service.set_project_limit(accelerator, project_id,
                                       'device_profile:two', 2)
    limited.create(user, 'two')  # FPGA 2 + 2 = 4
    message = _refused(limited('POST', ARQS, user,
                               json={'device_profile_name': 'two'}))
    assert ('class:FPGA limit 5, in use 4, requested 2; '
            'device_profile:two limit 2, in use 2, requested 2.'
            in message), message
    assert _count(admin_context, project_id) == 4
    # Deleting gives the room back.
    for arq in limited.list(user):
        deleted = limited('DELETE', ARQS + '/' + arq['uuid'], user)
        assert deleted.status_code == 204, deleted.text
    assert len(limited.create(user, 'two')) == 2


def test_twenty_concurrent_creations_with_room_for_ten_make_ten(
        limited, conf, keystone_service, services, member, admin_context):
    # Limits kept, and the token checked once, by the first creation:
    # the twenty meet in the database, not in Keystone.
    conf.set_override('limits_cache_seconds', 300, group='quota')
    user, project_id = member
    keystone_service.set_registered_limit(services['accelerator'],
                                          'class:FPGA', -1)
    keystone_service.set_project_limit(
        services['accelerator'], project_id, 'accelerator_requests', 12)
    limited.create(user, 'two')  # room left: 10
    token = keystone_service.token(user)
    start = threading.Barrier(20)
    codes = []

    def create():
        # A connection of its own: the caller's pool holds ten.
        http = requests.Session()
        start.wait()
        try:
            codes.append(http.post(
                limited.url + ARQS, headers={'X-Auth-Token': token},
                json={'device_profile_name': 'one'}, timeout=60).status_code)
        except requests.RequestException as e:
            codes.append(repr(e))
        finally:
            http.close()

    threads = [threading.Thread(target=create) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    made, refused = codes.count(201), codes.count(403)
    print('20 concurrent creations with room for 10: %d created, %d '
          'refused (403), %d other' % (made, refused, 20 - made - refused))
    assert (made, refused) == (10, 10), [c for c in codes if c != 201]
    assert _count(admin_context, project_id) == 12


def test_the_limits_call_shows_limits_and_usage(
        limited, keystone_service, services, member):
    accelerator = services['accelerator']
    user, project_id = member
    keystone_service.set_registered_limit(accelerator, 'class:FPGA', -1)
    keystone_service.set_project_limit(accelerator, project_id,
                                       'class:FPGA', 6)
    limited.create(user, 'two')
    limited.create(user, 'one')
    shown = limited('GET', LIMITS, user, headers=V28)
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert body['project_id'] == project_id
    assert body['enforced'] is True
    rows = {r['resource_name']: (r['limit'], r['usage'])
            for r in body['limits']}
    assert rows['accelerator_requests'] == (REGISTERED_ARQS, 3)
    assert rows['class:FPGA'] == (6, 3)
    assert rows['device_profile:one'] == (-1, 1)
    assert rows['device_profile:two'][1] == 2

    # An admin asks for any project; a member only for its own.
    other = limited('GET', LIMITS, 'admin', headers=V28,
                    params={'project_id': project_id})
    assert other.status_code == 200, other.text
    assert other.json()['limits'] == body['limits']
    refused = limited('GET', LIMITS, 'bob', headers=V28,
                      params={'project_id': project_id})
    assert refused.status_code == 403, refused.text
    # Below 2.8 the path does not exist.
    assert limited('GET', LIMITS, user).status_code == 404


def test_the_register_command_makes_novas_class_limits_once(
        conf, db_url, keystone_service, services, admin_context, tmp_path,
        monkeypatch, capsys):
    """Each resource class of the device profiles gets Nova's
    ``class:`` limit; a second run changes nothing."""
    custom = 'CUSTOM_QUOTA_%s' % uuid.uuid4().hex[:8].upper()
    arq_stack.make_profile(admin_context, 'gpu', [
        {'resources:%s' % custom: '1'}, {'resources:PGPU': '2'}])
    config = tmp_path / 'cyborg.conf'
    config.write_text('[database]\nconnection = %s\n' % db_url)
    admin = keystone_service.users['admin']
    for name, value in {
            'OS_AUTH_URL': keystone_service.auth_url,
            'OS_AUTH_TYPE': 'password',
            'OS_USERNAME': admin.name, 'OS_PASSWORD': admin.password,
            'OS_USER_DOMAIN_ID': 'default', 'OS_SYSTEM_SCOPE': 'all',
            'OS_IDENTITY_API_VERSION': '3',
            'OS_REGION_NAME': 'RegionOne'}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv('OS_CLOUD', raising=False)
    argv = ['--config-file', str(config), 'register']

    assert limits_cmd.main(argv) == 0
    first = capsys.readouterr().out
    nova = keystone_service.registered_limits(services['compute'])
    ours = keystone_service.registered_limits(services['accelerator'])
    for name in ('class:' + custom, 'class:PGPU'):
        assert nova[name][1] == -1
        assert ours[name][1] == -1
    assert 'device_profile:gpu' in ours
    assert ('compute class:%s in region RegionOne: created (default -1)'
            % custom) in first

    assert limits_cmd.main(argv) == 0
    second = capsys.readouterr().out
    assert 'created' not in second
    assert ('compute class:%s in region RegionOne: exists (default -1)'
            % custom) in second
    assert keystone_service.registered_limits(services['compute']) == nova
    assert keystone_service.registered_limits(
        services['accelerator']) == ours
