"""Walking a collection page by page, on each database engine.

Every collection is walked by following ``next`` until a page comes
without it: the walk must give each item once, in the order of one
uncut list, whatever the sort key (NULLs included), and a page cut at
``[api] max_limit`` links to the next one as a page cut at ``limit``
does. A marker names an item the caller may see, or it is unknown.
"""

from urllib import parse

import pytest
import sqlalchemy as sa
import webtest

from cyborg.api import app as api_app
from cyborg.db import models
from cyborg.db import session
from tests import conftest
from tests import inventory_rows
from tests.functional.api import test_arqs

DP = '/v2/device_profiles'
DEV = '/v2/devices'
DEP = '/v2/deployables'
ATTR = '/v2/attributes'
ARQ = '/v2/accelerator_requests'
MAX_LIMIT = 3
UNKNOWN = '7a0b1c2d-0000-4000-8000-000000000000'
# instance_uuid of the ARQs made, in order: NULLs and ties among values.
A = 'aa000000-0000-4000-8000-000000000000'
B = 'bb000000-0000-4000-8000-000000000000'
INSTANCES = [None, B, None, A, B, None, A]


ADMIN, MEMBER, OTHER_MEMBER = (test_arqs.ADMIN, test_arqs.MEMBER,
                                test_arqs.OTHER_MEMBER)


@pytest.fixture(scope='module')
def stored(module_db_url):
    """The app with ``[api] max_limit = 3``: 5 profiles, 4 devices and
    deployables, 8 attributes and 7 ARQs of project p1."""
    conf = conftest.make_conf(module_db_url)
    conf.set_override('max_limit', MAX_LIMIT, group='api')
    db = session.Database(conf)
    app = webtest.TestApp(api_app.build_app(conf, db))
    for i in range(4):
        app.post_json(DP, [{'name': 'dp%d' % i,
                            'groups': [{'resources:FPGA': '1'}]}])
    app.post_json(DP, [{'name': 'seven', 'groups': [
        {'resources:FPGA': str(len(INSTANCES))}]}])
    arqs = app.post_json(ARQ, {'device_profile_name': 'seven'},
                         headers=MEMBER).json['arqs']
    table = models.ExtendedAcceleratorRequest
    with db.engine.begin() as conn:
        for arq, instance in zip(arqs, INSTANCES, strict=True):
            conn.execute(sa.update(table).where(table.uuid == arq['uuid'])
                         .values(instance_uuid=instance))
    for host in ('host1', 'host2', 'host3', 'host4'):
        inventory_rows.add_host(db.engine, host,
                                inventory_rows.fake_devices())
    yield app, db
    db.dispose()


def by_id(db, model):
    """The uuids of ``model``'s rows in the order of creation."""
    with db.engine.connect() as conn:
        return conn.execute(sa.select(model.uuid).order_by(model.id)
                            ).scalars().all()


def walk(app, path, listing, headers=None):
    """Every page of ``path`` by its ``next`` links: [(items, next)]."""
    pages = []
    while path is not None:
        body = app.get(path, headers=headers).json
        assert set(body) <= {listing, 'next'}
        pages.append(([item['uuid'] for item in body[listing]],
                      body.get('next')))
        path = _local(body.get('next'))
    return pages


def _local(url):
    if url is None:
        return None
    parts = parse.urlsplit(url)
    assert (parts.scheme, parts.netloc) == ('http', 'localhost')
    return parts.path + '?' + parts.query


COLLECTIONS = [(DP, 'device_profiles', models.DeviceProfile),
               (DEV, 'devices', models.Device),
               (DEP, 'deployables', models.Deployable),
               (ATTR, 'attributes', models.Attribute)]


@pytest.mark.parametrize('path,listing,model', COLLECTIONS,
                         ids=[c[1] for c in COLLECTIONS])
def test_a_list_cut_at_max_limit_links_to_the_rest(stored, path, listing,
                                                   model):
    app, db = stored
    every = by_id(db, model)

    pages = walk(app, path, listing)

    assert [len(items) for items, _ in pages] == _sizes(len(every),
                                                        MAX_LIMIT)
    assert [uuid for items, _ in pages for uuid in items] == every
    # The full pages link on, with the last uuid as the marker.
    for items, link in pages:
        if len(items) == MAX_LIMIT:
            assert link == 'http://localhost%s?marker=%s' % (path,
                                                             items[-1])
        else:
            assert link is None


def _sizes(total, per_page):
    """The lengths of the pages of ``total`` items: a full last page is
    followed by an empty one."""
    full, rest = divmod(total, per_page)
    return [per_page] * full + [rest]


@pytest.mark.parametrize('limit', [2, 3, 50])
def test_next_keeps_the_query_and_the_limit_given(stored, limit):
    app, db = stored
    every = by_id(db, models.DeviceProfile)[::-1]
    query = {'sort_key': 'created_at', 'sort_dir': 'desc', 'limit': limit,
             'unknown': 'kept'}

    pages = walk(app, DP + '?' + parse.urlencode(query), 'device_profiles')

    per_page = min(limit, MAX_LIMIT)
    assert [len(items) for items, _ in pages] == _sizes(len(every),
                                                        per_page)
    assert [uuid for items, _ in pages for uuid in items] == every
    first_items, first_next = pages[0]
    assert parse.parse_qsl(parse.urlsplit(first_next).query) == [
        ('sort_key', 'created_at'), ('sort_dir', 'desc'),
        ('limit', str(limit)), ('unknown', 'kept'),
        ('marker', first_items[-1])]


def test_requests_are_not_cut_unless_paged(stored):
    app, db = stored
    every = by_id(db, models.ExtendedAcceleratorRequest)

    whole = app.get(ARQ, headers=MEMBER).json
    paged = walk(app, ARQ + '?limit=2', 'arqs', headers=MEMBER)

    assert [a['uuid'] for a in whole['arqs']] == every
    assert 'next' not in whole
    assert [len(items) for items, _ in paged] == [2, 2, 2, 1]
    assert [uuid for items, _ in paged for uuid in items] == every


def _expected_by_instance(db, descending):
    """ARQ uuids in the order of (instance_uuid, id), NULLs first."""
    table = models.ExtendedAcceleratorRequest
    with db.engine.connect() as conn:
        rows = conn.execute(sa.select(table.instance_uuid, table.id,
                                      table.uuid)).all()
    ordered = sorted(rows, key=lambda r: (r.instance_uuid is not None,
                                          r.instance_uuid or '', r.id))
    if descending:
        ordered.reverse()
    return [r.uuid for r in ordered]


@pytest.mark.parametrize('per_page', [1, 2, 3])
@pytest.mark.parametrize('sort_dir', ['asc', 'desc'])
def test_pages_sorted_on_a_nullable_column_lose_nothing(stored, sort_dir,
                                                        per_page):
    app, db = stored
    query = '?sort_key=instance_uuid&sort_dir=%s' % sort_dir

    pages = walk(app, ARQ + query + '&limit=%d' % per_page, 'arqs',
                 headers=MEMBER)

    walked = [uuid for items, _ in pages for uuid in items]
    assert walked == _expected_by_instance(db, sort_dir == 'desc')
    # NULLs first going up, last going down.
    instances = dict(zip(by_id(db, models.ExtendedAcceleratorRequest),
                         INSTANCES, strict=True))
    assert [instances[uuid] for uuid in walked] == (
        [None, None, None, A, A, B, B] if sort_dir == 'asc'
        else [B, B, A, A, None, None, None])


def test_another_projects_request_is_an_unknown_marker(stored):
    app, db = stored
    every = by_id(db, models.ExtendedAcceleratorRequest)
    theirs = every[0]

    as_other = app.get(ARQ, {'marker': theirs}, headers=OTHER_MEMBER,
                       expect_errors=True)
    unknown = app.get(ARQ, {'marker': UNKNOWN}, headers=OTHER_MEMBER,
                      expect_errors=True)
    as_owner = app.get(ARQ, {'marker': theirs}, headers=MEMBER)
    as_admin = app.get(ARQ, {'marker': theirs}, headers=ADMIN)

    assert (as_other.status_int, unknown.status_int) == (404, 404)
    assert as_other.json['error_message'] == (
        'The marker %s does not name an item of this collection.' % theirs)
    assert unknown.json['error_message'] == (
        'The marker %s does not name an item of this collection.' % UNKNOWN)
    assert as_other.json['code'] == unknown.json['code']
    assert [a['uuid'] for a in as_owner.json['arqs']] == every[1:4]
    assert as_admin.json == as_owner.json
