"""The attribute API on each database engine."""

import re
import uuid

import pytest
import sqlalchemy as sa

from cyborg.db import models
from tests import inventory_rows

ATTRIBUTES = '/v2/attributes'
FIELDS = {'uuid', 'deployable_id', 'key', 'value', 'created_at',
          'updated_at', 'links'}


def as_role(*roles, project='p1'):
    return {'X-Roles': ','.join(roles), 'X-Project-Id': project,
            'X-User-Id': 'u-' + roles[0]}


READER = as_role('reader')
MEMBER = as_role('member', 'reader')
MANAGER = as_role('manager', 'member', 'reader')
ADMIN = as_role('admin', 'manager', 'member', 'reader')


@pytest.fixture
def deployables(db):
    """Two fake FPGAs on two hosts: their deployables, by host."""
    found = {}
    for host in ('host1', 'host2'):
        device, = inventory_rows.add_host(db.engine, host,
                                          inventory_rows.fake_devices())
        found[host] = device.deployables['FakeDevice']
    return found


def keys(api, query=''):
    return [(a['deployable_id'], a['key']) for a in
            api.get(ATTRIBUTES + query).json['attributes']]


def stored_attributes(db):
    with db.engine.connect() as conn:
        return sorted(conn.execute(sa.select(
            models.Attribute.deployable_id, models.Attribute.key,
            models.Attribute.value)).all())


def test_list_shows_each_attribute_with_the_contract_fields(api,
                                                            deployables):
    response = api.get(ATTRIBUTES)

    assert list(response.json) == ['attributes']
    first = response.json['attributes'][0]
    host1 = deployables['host1']
    assert set(first) == FIELDS
    assert first['uuid'] == host1.attributes['rc']
    assert first['deployable_id'] == host1.uuid
    assert (first['key'], first['value']) == ('rc', 'FPGA')
    assert first['updated_at'] is None
    assert first['links'] == [{
        'href': 'http://localhost/v2/attributes/' + first['uuid'],
        'rel': 'self'}]
    assert len(response.json['attributes']) == 4


def test_get_one_answers_the_bare_attribute(api, deployables):
    trait = deployables['host2'].attributes['trait0']

    one = api.get(ATTRIBUTES + '/' + trait).json

    assert one['uuid'] == trait
    assert one['deployable_id'] == deployables['host2'].uuid
    assert (one['key'], one['value']) == ('trait0', 'CUSTOM_FAKE_DEVICE')


@pytest.mark.parametrize('key', ['3f1d2c6e-8a4b-4e0f-9c7d-5b2a1e0f9d84', 'rc'])
def test_unknown_attribute_is_404(api, deployables, key):
    response = api.get(ATTRIBUTES + '/' + key, expect_errors=True)

    assert response.status_int == 404
    assert key in response.json['error_message']


def test_list_filters_by_deployable_and_key_in_sql(api, deployables,
                                                   sql_counter):
    host1, host2 = deployables['host1'], deployables['host2']
    sql_counter.reset()

    # A deployable by uuid, or by row id as python-cyborgclient knows it.
    assert keys(api, '?deployable_id=' + host2.uuid) == [
        (host2.uuid, 'rc'), (host2.uuid, 'trait0')]
    assert keys(api, '?deployable_id=%d' % host1.id) == [
        (host1.uuid, 'rc'), (host1.uuid, 'trait0')]
    assert keys(api, '?key=trait0') == [
        (host1.uuid, 'trait0'), (host2.uuid, 'trait0')]
    assert keys(api, '?key=rc&deployable_id=' + host1.uuid) == [
        (host1.uuid, 'rc')]
    assert keys(api, '?deployable_id=' + str(uuid.uuid4())) == []
    assert keys(api, '?key=colour') == []
    statements = sql_counter.statements
    assert len(statements) == 6
    assert 'deployables.uuid =' in statements[0]
    assert 'deployables.id =' in statements[1]
    # key is quoted differently by each engine.
    assert re.search(r'attributes\.\W?key\W? =', statements[2])


def test_list_pages_with_limit_marker_and_sorting(api, deployables):
    everything = api.get(ATTRIBUTES).json['attributes']
    first = api.get(ATTRIBUTES + '?limit=3').json['attributes']
    rest = api.get(ATTRIBUTES + '?marker=' + first[-1]['uuid']).json[
        'attributes']
    by_key = api.get(ATTRIBUTES + '?sort_key=key&sort_dir=desc').json[
        'attributes']

    assert first + rest == everything
    assert [a['key'] for a in by_key] == ['trait0', 'trait0', 'rc', 'rc']


def test_list_makes_the_same_number_of_queries_for_any_number_of_rows(
        api, db, deployables, sql_counter):
    def queries_to_list(query=''):
        sql_counter.reset()
        count = len(api.get(ATTRIBUTES + query).json['attributes'])
        return count, len(sql_counter)

    few = queries_to_list()
    for i in range(60):
        api.post_json(ATTRIBUTES, {'deployable_id': deployables['host1'].uuid,
                                   'key': 'k%02d' % i, 'value': str(i)})
    many = queries_to_list()
    paged = queries_to_list('?limit=50&marker=' + deployables[
        'host1'].attributes['rc'])

    assert few == (4, 1)
    assert many == (64, 1)
    assert paged == (50, 2)


@pytest.mark.parametrize('wrapped', [False, True])
@pytest.mark.parametrize('reference', ['uuid', 'id', 'id-as-text'])
def test_create_takes_bare_or_wrapped_bodies_and_any_reference(
        api, db, deployables, wrapped, reference):
    host2 = deployables['host2']
    named = {'uuid': host2.uuid, 'id': host2.id,
             'id-as-text': str(host2.id)}[reference]
    attribute = {'deployable_id': named, 'key': 'region', 'value': 'r0'}

    response = api.post_json(
        ATTRIBUTES, {'attribute': attribute} if wrapped else attribute)

    assert response.status_int == 201
    body = response.json
    assert set(body) == FIELDS
    assert body['deployable_id'] == host2.uuid
    assert (body['key'], body['value']) == ('region', 'r0')
    assert api.get(ATTRIBUTES + '/' + body['uuid']).json == body
    assert (host2.id, 'region', 'r0') in stored_attributes(db)


def test_the_same_key_twice_on_a_deployable_is_a_conflict(api, db,
                                                          deployables):
    host1 = deployables['host1']
    before = stored_attributes(db)

    again = api.post_json(ATTRIBUTES, {'attribute': {
        'deployable_id': host1.uuid, 'key': 'rc', 'value': 'GPU'}},
        expect_errors=True)
    elsewhere = api.post_json(ATTRIBUTES, {
        'deployable_id': host1.uuid, 'key': 'function', 'value': 'gzip'})

    assert again.status_int == 409
    assert again.json['error_message'] == (
        'Deployable %s already has an attribute rc.' % host1.uuid)
    assert elsewhere.status_int == 201
    assert len(stored_attributes(db)) == len(before) + 1


def test_an_unknown_deployable_is_refused(api, db, deployables):
    before = stored_attributes(db)
    missing = str(uuid.uuid4())

    by_uuid = api.post_json(ATTRIBUTES, {'deployable_id': missing,
                                         'key': 'k', 'value': 'v'},
                            expect_errors=True)
    by_id = api.post_json(ATTRIBUTES, {'deployable_id': '999999',
                                       'key': 'k', 'value': 'v'},
                          expect_errors=True)

    assert by_uuid.status_int == by_id.status_int == 400
    assert missing in by_uuid.json['error_message']
    assert 'id 999999' in by_id.json['error_message']
    assert stored_attributes(db) == before


def test_delete(api, db, deployables):
    rc = deployables['host1'].attributes['rc']

    deleted = api.delete(ATTRIBUTES + '/' + rc)
    again = api.delete(ATTRIBUTES + '/' + rc, expect_errors=True)

    assert deleted.status_int == 204
    assert deleted.body == b''
    assert again.status_int == 404
    assert rc in again.json['error_message']
    assert len(stored_attributes(db)) == 3
    assert api.get(ATTRIBUTES + '/' + rc, expect_errors=True).status_int == (
        404)


@pytest.mark.parametrize('headers,reads,writes', [
    (READER, False, False), (MEMBER, False, False),
    (MANAGER, False, False), (ADMIN, True, True)])
def test_who_may_read_create_and_delete(api, db, deployables, headers,
                                        reads, writes):
    host1 = deployables['host1']
    before = stored_attributes(db)

    listing = api.get(ATTRIBUTES, headers=headers, expect_errors=True)
    one = api.get(ATTRIBUTES + '/' + host1.attributes['rc'],
                  headers=headers, expect_errors=True)
    created = api.post_json(ATTRIBUTES, {
        'deployable_id': host1.uuid, 'key': 'new', 'value': 'v'},
        headers=headers, expect_errors=True)
    deleted = api.delete(ATTRIBUTES + '/' + host1.attributes['trait0'],
                         headers=headers, expect_errors=True)

    assert listing.status_int == one.status_int == (200 if reads else 403)
    assert created.status_int == (201 if writes else 403)
    assert deleted.status_int == (204 if writes else 403)
    if not writes:
        assert 'cyborg:attribute:create' in created.json['error_message']
        assert 'cyborg:attribute:delete' in deleted.json['error_message']
        assert stored_attributes(db) == before
