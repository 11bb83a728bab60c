"""The device profile API on each database engine."""

import uuid

import pytest
import sqlalchemy as sa
import webtest

from cyborg.api import app as api_app
from cyborg.db import models

DP = '/v2/device_profiles'
V22 = {'OpenStack-API-Version': 'accelerator 2.2'}
FPGA_GROUP = {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}


def create(api, name, groups=None, **fields):
    body = dict(name=name, groups=groups or [dict(FPGA_GROUP)], **fields)
    return api.post_json(DP, [body]).json


def names(api, query=''):
    return [p['name'] for p in api.get(DP + query).json['device_profiles']]


def test_create_answers_201_with_the_bare_profile(api):
    response = api.post_json(DP, [{
        'name': 'fpga-dp', 'description': None,
        'groups': [dict(FPGA_GROUP),
                   {'resources:CUSTOM_ACCELERATOR_GPU': '2',
                    'accel:attach_target': 'VM'}]}])

    assert response.status_int == 201
    body = response.json
    assert set(body) == {'uuid', 'name', 'description', 'groups',
                         'created_at', 'updated_at', 'links'}
    assert body['name'] == 'fpga-dp'
    assert body['description'] is None
    assert body['updated_at'] is None
    assert body['created_at'].endswith('+00:00')
    assert str(uuid.UUID(body['uuid'])) == body['uuid']
    # Group order is identity: Nova numbers request groups by it.
    assert body['groups'] == [
        FPGA_GROUP,
        {'resources:CUSTOM_ACCELERATOR_GPU': '2', 'accel:attach_target': 'VM'}]
    assert body['links'] == [{
        'href': 'http://localhost/v2/device_profiles/' + body['uuid'],
        'rel': 'self'}]


def test_names_of_classes_and_traits_are_normalised(api):
    body = create(api, 'lower', groups=[{
        'resources:custom-accel_x': 1, 'trait:custom-fast': 'forbidden',
        'resources:pgpu': '2'}])

    assert body['groups'] == [{
        'resources:CUSTOM_ACCEL_X': '1', 'trait:CUSTOM_FAST': 'forbidden',
        'resources:PGPU': '2'}]


def test_given_uuid_is_kept(api):
    wanted = str(uuid.uuid4())
    assert create(api, 'with-uuid', uuid=wanted.upper())['uuid'] == wanted


def test_several_profiles_are_created_together(api):
    response = api.post_json(DP, [
        {'name': 'one', 'groups': [FPGA_GROUP]},
        {'name': 'two', 'groups': [FPGA_GROUP]}])

    assert response.status_int == 201
    assert [p['name'] for p in response.json] == ['one', 'two']
    assert names(api) == ['one', 'two']


def test_several_profiles_are_all_or_nothing(api):
    create(api, 'taken')

    response = api.post_json(DP, [
        {'name': 'fresh', 'groups': [FPGA_GROUP]},
        {'name': 'taken', 'groups': [FPGA_GROUP]}], expect_errors=True)

    assert response.status_int == 409
    assert 'taken' in response.json['error_message']
    assert names(api) == ['taken']


def test_duplicate_name_and_uuid_are_conflicts(api):
    first = create(api, 'dup')

    by_name = api.post_json(DP, [{'name': 'dup', 'groups': [FPGA_GROUP]}],
                            expect_errors=True)
    by_uuid = api.post_json(DP, [{'name': 'other', 'uuid': first['uuid'],
                                  'groups': [FPGA_GROUP]}],
                            expect_errors=True)

    assert by_name.status_int == 409
    assert 'name dup' in by_name.json['error_message']
    assert by_uuid.status_int == 409
    assert first['uuid'] in by_uuid.json['error_message']
    assert names(api) == ['dup']


def test_list_filters_by_names_in_sql(api, sql_counter):
    for name in ('a', 'b', 'c'):
        create(api, name)
    sql_counter.reset()

    assert names(api, '?name=a,c') == ['a', 'c']
    assert any('IN' in s and 'device_profiles.name' in s
               for s in sql_counter.statements)
    assert names(api, '?name=zzz') == []


def test_list_pages_with_limit_and_marker(api):
    made = [create(api, 'p%d' % i) for i in range(5)]

    first = api.get(DP + '?limit=2').json['device_profiles']
    rest = api.get(DP + '?limit=10&marker=' + first[-1]['uuid']).json[
        'device_profiles']
    newest_first = api.get(DP + '?sort_key=name&sort_dir=desc').json[
        'device_profiles']

    assert [p['uuid'] for p in first + rest] == [p['uuid'] for p in made]
    assert [p['name'] for p in newest_first] == [
        'p4', 'p3', 'p2', 'p1', 'p0']


def test_get_by_uuid_and_by_name_from_2_2(api):
    made = create(api, 'findme', description='d')

    by_uuid = api.get(DP + '/' + made['uuid'])
    by_name = api.get(DP + '/findme', headers=V22)
    by_name_old = api.get(DP + '/findme', expect_errors=True)

    assert by_uuid.json == {'device_profile': made}
    assert by_name.json == {'device_profile': made}
    assert by_name.headers['OpenStack-API-Version'] == 'accelerator 2.2'
    assert by_name_old.status_int == 406


def test_delete_by_uuid_by_name_and_by_value(api):
    one = create(api, 'one')
    create(api, 'two')
    create(api, 'three')
    create(api, 'four')

    assert api.delete(DP + '/' + one['uuid']).status_int == 204
    assert api.delete(DP + '/two').status_int == 204
    assert api.delete(DP + '?value=three,four').status_int == 204
    assert names(api) == []


def test_delete_of_several_is_all_or_nothing(api):
    create(api, 'kept')

    response = api.delete(DP + '?value=kept,ghost', expect_errors=True)

    assert response.status_int == 404
    assert 'ghost' in response.json['error_message']
    assert names(api) == ['kept']


def test_delete_of_a_profile_in_use_is_a_conflict(api, db):
    made = create(api, 'in-use')
    with db.engine.begin() as conn:
        profile_id = conn.execute(
            sa.select(models.DeviceProfile.id).where(
                models.DeviceProfile.uuid == made['uuid'])).scalar_one()
        conn.execute(sa.insert(models.ExtendedAcceleratorRequest).values(
            uuid=str(uuid.uuid4()), state='Initial',
            device_profile_id=profile_id, device_profile_group_id=0,
            created_at=models.utcnow()))

    by_name = api.delete(DP + '/in-use', expect_errors=True)
    by_uuid = api.delete(DP + '/' + made['uuid'], expect_errors=True)

    assert by_name.status_int == 409
    assert by_uuid.status_int == 409
    assert 'accelerator requests' in by_name.json['error_message']
    assert names(api) == ['in-use']


def test_list_makes_the_same_number_of_queries_for_any_number_of_rows(
        api, sql_counter):
    def queries_to_list():
        sql_counter.reset()
        count = len(api.get(DP).json['device_profiles'])
        return count, len(sql_counter)

    create(api, 'first')
    one = queries_to_list()
    api.post_json(DP, [{'name': 'n%d' % i, 'groups': [FPGA_GROUP] * 3}
                       for i in range(50)])
    many = queries_to_list()

    assert one[0] == 1 and many[0] == 51
    assert one[1] == many[1] == 1


def test_a_list_follows_every_change_of_its_rows(api):
    # Every list reads the rows as they are now.
    create(api, 'first')
    before = api.get(DP).body
    assert api.get(DP).body == before
    made = create(api, 'second')
    assert names(api) == ['first', 'second']
    api.delete(DP + '/second')
    assert api.get(DP).body == before
    assert names(api, '?limit=1') == ['first']
    assert made['name'] not in names(api)


def test_links_follow_the_mount_point_and_forwarded_host(conf, db):
    conf.set_override('enable_proxy_headers_parsing', True,
                      group='oslo_middleware')
    api = webtest.TestApp(api_app.build_app(conf, db))
    made = create(api, 'linked')

    mounted = api.get('/v2/device_profiles/' + made['uuid'],
                      extra_environ={'SCRIPT_NAME': '/accelerator'})
    proxied = api.get('/v2', headers={'X-Forwarded-Proto': 'https',
                                      'X-Forwarded-Host': 'cloud.example'})

    assert mounted.json['device_profile']['links'][0]['href'] == (
        'http://localhost/accelerator/v2/device_profiles/' + made['uuid'])
    assert proxied.json['links'][0]['href'] == 'https://cloud.example/v2/'


def test_public_endpoint_overrides_the_request_url(conf, db):
    conf.set_override('public_endpoint', 'https://api.example/accelerator/',
                      group='api')
    api = webtest.TestApp(api_app.build_app(conf, db))

    assert api.get('/').json['versions'][0]['links'][0]['href'] == (
        'https://api.example/accelerator/v2')
    assert create(api, 'p')['links'][0]['href'].startswith(
        'https://api.example/accelerator/v2/device_profiles/')


@pytest.mark.parametrize('count', ['64', 64])
def test_a_count_of_64_is_accepted(api, count):
    made = create(api, 'most', groups=[{'resources:FPGA': count}])

    assert made['groups'] == [{'resources:FPGA': '64'}]


@pytest.mark.parametrize('count,shown', [
    ('65', "'65'"), (65, "'65'"), ('999999999', "'999999999'"),
    ('9' * 5000, repr('9' * 5000))])
def test_a_count_above_64_is_refused(api, count, shown):
    refused = api.post_json(DP, [{'name': 'many', 'groups': [
        {'resources:FPGA': count}]}], expect_errors=True)

    assert refused.status_int == 400
    assert refused.json['error_message'] == (
        'The value of resources:FPGA may be at most 64, not %s: a request '
        'makes at most 64 accelerator requests.' % shown)
    assert names(api) == []


def test_the_counts_of_a_profile_add_up_to_at_most_64(api):
    groups = [{'resources:FPGA': '40'},
              {'resources:PGPU': '20', 'resources:VGPU': '5'}]

    refused = api.post_json(DP, [{'name': 'many', 'groups': groups}],
                            expect_errors=True)
    groups[1]['resources:VGPU'] = '4'
    made = create(api, 'just-enough', groups=groups)

    assert refused.status_int == 400
    assert refused.json['error_message'] == (
        'The groups ask for 65 accelerators in all; a device profile may '
        'ask for at most 64, as a request makes at most 64 accelerator '
        'requests.')
    assert names(api) == ['just-enough'] == [made['name']]
