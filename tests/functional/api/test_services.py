"""GET /v2/services: admins see each conductor and agent and whether it
is alive; below microversion 2.4 the path does not exist."""

import datetime

import pytest

from cyborg.db import models
from cyborg.db.api import services as services_db

SERVICES = '/v2/services'
V24 = {'OpenStack-API-Version': 'accelerator 2.4'}
ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin-project',
         **V24}
MEMBER = {'X-Roles': 'member,reader', 'X-Project-Id': 'demo', **V24}
FIELDS = {'host', 'binary', 'version', 'rpc_version', 'state',
          'last_seen_at', 'created_at', 'updated_at'}


def add_service(db, host, binary, version='1.0.0', rpc_version='1.4',
                age=0):
    """A heartbeat of ``binary`` on ``host``, ``age`` seconds old."""
    from cyborg import context as cyborg_context
    services_db.heartbeat(cyborg_context.admin_context(db), host, binary,
                          version, rpc_version)
    if age:
        table = models.Service.__table__
        with db.engine.begin() as connection:
            connection.execute(table.update().where(
                (table.c.host == host) & (table.c.binary == binary)).values(
                last_seen_at=models.utcnow()
                - datetime.timedelta(seconds=age)))


@pytest.fixture
def fleet(db):
    add_service(db, 'ctl-1', services_db.CONDUCTOR)
    add_service(db, 'ctl-2', services_db.CONDUCTOR, age=120)
    add_service(db, 'compute-1', services_db.AGENT, rpc_version='1.1')


def test_admin_lists_services_with_state(api, fleet):
    services = api.get(SERVICES, headers=ADMIN, status=200).json['services']

    assert [(s['binary'], s['host'], s['state']) for s in services] == [
        ('cyborg-agent', 'compute-1', 'up'),
        ('cyborg-conductor', 'ctl-1', 'up'),
        ('cyborg-conductor', 'ctl-2', 'down')]
    assert all(set(s) == FIELDS for s in services)
    assert services[0]['rpc_version'] == '1.1'
    assert services[1]['version'] == '1.0.0'
    assert services[2]['last_seen_at'] < services[1]['last_seen_at']


def test_down_time_is_the_configured_one(api, conf, fleet):
    conf.set_override('service_down_time', 300)
    services = api.get(SERVICES, headers=ADMIN).json['services']
    assert {s['state'] for s in services} == {'up'}


@pytest.mark.parametrize('query, hosts', [
    ({'binary': 'cyborg-conductor'}, ['ctl-1', 'ctl-2']),
    ({'binary': 'cyborg-agent'}, ['compute-1']),
    ({'host': 'ctl-2'}, ['ctl-2']),
    ({'host': 'nowhere'}, []),
    ({'binary': 'cyborg-agent', 'host': 'ctl-1'}, []),
])
def test_filters(api, fleet, query, hosts):
    services = api.get(SERVICES, query, headers=ADMIN).json['services']
    assert [s['host'] for s in services] == hosts


@pytest.mark.parametrize('query, code', [
    ('binary=cyborg-api', 'cyborg.service.invalid_filter'),
    ('binary=', 'cyborg.service.invalid_filter'),
    ('host=', 'cyborg.service.invalid_filter'),
    ('host=' + 'h' * 256, 'cyborg.service.invalid_filter'),
    # Refused before any resource reads it, as on every path.
    ('host=a%00b', 'cyborg.invalid_characters'),
    ('host=a%0Ab', 'cyborg.service.invalid_filter'),
    ('host=a&host=b', 'cyborg.service.invalid_filter'),
    ('binary=cyborg-agent&binary=cyborg-conductor',
     'cyborg.service.invalid_filter')])
def test_malformed_filters_are_400(api, fleet, query, code):
    response = api.get(SERVICES + '?' + query, headers=ADMIN, status=400)
    assert response.json['code'] == code
    assert response.json['error_message'].endswith('.')


def test_member_is_forbidden(api, fleet):
    api.get(SERVICES, headers=MEMBER, status=403)


@pytest.mark.parametrize('version', [None, '2.0', '2.3'])
def test_below_2_4_the_path_is_unknown(api, fleet, version):
    headers = {k: v for k, v in ADMIN.items()
               if k != 'OpenStack-API-Version'}
    if version:
        headers['OpenStack-API-Version'] = 'accelerator ' + version
    response = api.get(SERVICES, headers=headers, status=404)
    unknown = api.get('/v2/no_such_thing', headers=headers, status=404)
    assert response.json['code'] == unknown.json['code']
    assert 'could not be found' in response.json['error_message']


def test_latest_lists_and_the_item_path_is_404(api, fleet):
    latest = {**ADMIN, 'OpenStack-API-Version': 'accelerator latest'}
    assert len(api.get(SERVICES, headers=latest).json['services']) == 3
    api.get(SERVICES + '/ctl-1', headers=ADMIN, status=404)


def test_no_services_is_an_empty_list(api):
    assert api.get(SERVICES, headers=ADMIN).json == {'services': []}

