"""Every uuid in a path, a filter or a marker is read in the same forms.

With or without hyphens, in either case, in braces or as a ``urn:uuid:``
name: each answers as the lower-case hyphenated uuid would. Other
spellings are unknown items in a path (404) and bad filters (400). On
each database engine, against one database per module.
"""

from urllib.parse import quote

import pytest
import sqlalchemy as sa
import webtest

from cyborg.api import app as api_app
from cyborg.db import models
from cyborg.db import session
from tests import conftest
from tests import inventory_rows

DP = '/v2/device_profiles'
DEV = '/v2/devices'
DEP = '/v2/deployables'
ATTR = '/v2/attributes'
ARQ = '/v2/accelerator_requests'
PROFILE = 'ab000000-0000-4000-8000-0000000000a1'
INSTANCE = 'ab000000-0000-4000-8000-0000000000a2'
GROUPS = [{'resources:FPGA': '1'}]
V22 = {'OpenStack-API-Version': 'accelerator 2.2'}

FORMS = {
    'upper': str.upper,
    'hex': lambda u: u.replace('-', ''),
    'upper-hex': lambda u: u.replace('-', '').upper(),
    'braces': lambda u: '{%s}' % u,
    'urn': lambda u: 'urn:uuid:' + u,
    'upper-urn': lambda u: 'URN:UUID:' + u.upper(),
}


def _arabic_digit(uuid):
    """``uuid`` with its first decimal digit written in Arabic-Indic."""
    at = next(i for i, c in enumerate(uuid) if c.isdigit())
    return uuid[:at] + chr(0x0660 + int(uuid[at])) + uuid[at + 1:]


# What Python's uuid module would read but the API does not.
REFUSED = {
    'hyphens-moved': lambda u: u.replace('-', '')[:3] + '-' + u.replace(
        '-', '')[3:],
    'arabic-digit': lambda u: _arabic_digit(u),
    'trailing-newline': lambda u: u + '\n',
}


@pytest.fixture(scope='module')
def stored(module_db_url):
    """The app and the uuids of one item of each collection."""
    conf = conftest.make_conf(module_db_url)
    db = session.Database(conf)
    app = webtest.TestApp(api_app.build_app(conf, db))
    # Given upper case, kept as the canonical spelling.
    app.post_json(DP, [{'name': 'dp', 'uuid': PROFILE.upper(),
                        'groups': GROUPS}])
    arq, = app.post_json(ARQ, {'device_profile_name': 'dp'}).json['arqs']
    device, = inventory_rows.add_host(db.engine, 'host1',
                                      inventory_rows.fake_devices())
    deployable = device.deployables['FakeDevice']
    table = models.ExtendedAcceleratorRequest
    with db.engine.begin() as conn:
        conn.execute(sa.update(table).where(table.uuid == arq['uuid'])
                     .values(instance_uuid=INSTANCE))
        rp_uuid = conn.execute(sa.select(models.Deployable.rp_uuid).where(
            models.Deployable.uuid == deployable.uuid)).scalar_one()
    yield app, {
        'device_profile': PROFILE, 'arq': arq['uuid'],
        'device': device.uuid, 'deployable': deployable.uuid,
        'attribute': deployable.attributes['rc'], 'rp': rp_uuid}
    db.dispose()


# (path, the item's key, how its uuid shows in the answer)
ITEMS = [
    (DP, 'device_profile', lambda body: body['device_profile']['uuid']),
    (ARQ, 'arq', lambda body: body['uuid']),
    (DEV, 'device', lambda body: body['uuid']),
    (DEP, 'deployable', lambda body: body['uuid']),
    (ATTR, 'attribute', lambda body: body['uuid']),
]

# (list path, filter, the item's key, the listing's name, what it finds)
FILTERS = [
    (ARQ, 'instance', 'instance', 'arqs', 'arq'),
    (DEP, 'device_id', 'device', 'deployables', 'deployable'),
    (DEP, 'rp_uuid', 'rp', 'deployables', 'deployable'),
    (ATTR, 'deployable_id', 'deployable', 'attributes', 'attribute'),
]

each_item = pytest.mark.parametrize('path,key,shown', ITEMS,
                                    ids=[i[1] for i in ITEMS])
each_filter = pytest.mark.parametrize(
    'path,name,key,listing,found', FILTERS,
    ids=['%s-%s' % (f[3], f[1]) for f in FILTERS])


def _uuids(stored):
    return dict(stored[1], instance=INSTANCE)


def test_a_given_uuid_is_stored_in_lower_case(stored):
    app, uuids = stored
    listed = app.get(DP).json['device_profiles']
    assert [p['uuid'] for p in listed] == [uuids['device_profile']]


@pytest.mark.parametrize('form', sorted(FORMS))
@each_item
def test_each_item_answers_to_every_form(stored, form, path, key, shown):
    app, uuids = stored
    uuid = uuids[key]

    got = app.get('%s/%s' % (path, quote(FORMS[form](uuid))),
                  headers=V22)

    assert got.status_int == 200
    assert shown(got.json) == uuid


@pytest.mark.parametrize('form', sorted(REFUSED))
@each_item
def test_other_spellings_are_unknown_items(stored, form, path, key, shown):
    app, uuids = stored
    key_text = REFUSED[form](uuids[key])

    got = app.get('%s/%s' % (path, quote(key_text)), headers=V22,
                  expect_errors=True)

    assert got.status_int == 404
    # A device profile's key that is no uuid is a name (from 2.2).
    what = 'name' if path == DP else 'uuid'
    assert got.json['error_message'].endswith(
        ' with %s %s exists.' % (what, key_text))


@pytest.mark.parametrize('form', sorted(FORMS))
@each_filter
def test_each_filter_takes_every_form(stored, form, path, name, key,
                                      listing, found):
    app, uuids = stored
    every = _uuids(stored)

    canonical = app.get(path, {name: every[key]}).json[listing]

    got = app.get(path, {name: FORMS[form](every[key])})

    assert got.json[listing] == canonical
    assert uuids[found] in [i['uuid'] for i in canonical]


@pytest.mark.parametrize('form', sorted(REFUSED))
@each_filter
def test_other_spellings_are_bad_filters(stored, form, path, name, key,
                                         listing, found):
    app, _ = stored
    value = REFUSED[form](_uuids(stored)[key])

    got = app.get(path, {name: value}, expect_errors=True)

    assert got.status_int == 400
    assert repr(value) in got.json['error_message'] or (
        value in got.json['error_message'])


@pytest.mark.parametrize('form', sorted(FORMS))
@pytest.mark.parametrize('path,listing,key', [
    (DP, 'device_profiles', 'device_profile'), (ARQ, 'arqs', 'arq'),
    (DEV, 'devices', 'device'), (DEP, 'deployables', 'deployable'),
    (ATTR, 'attributes', 'attribute')], ids=lambda v: v)
def test_markers_take_every_form(stored, form, path, listing, key):
    app, uuids = stored
    canonical = app.get(path, {'marker': uuids[key]}).json[listing]

    got = app.get(path, {'marker': FORMS[form](uuids[key])})

    assert got.json[listing] == canonical


@pytest.mark.parametrize('form', sorted(REFUSED))
def test_other_spellings_are_bad_markers(stored, form):
    app, uuids = stored
    marker = REFUSED[form](uuids['device'])

    got = app.get(DEV, {'marker': marker}, expect_errors=True)

    assert got.status_int == 400
    assert got.json['error_message'] == (
        'marker must be the uuid of an item, not %r.' % marker)


def test_deletes_take_every_form(stored):
    app, _ = stored
    app.post_json(DP, [{'name': 'gone', 'groups': GROUPS,
                        'uuid': 'ab000000-0000-4000-8000-0000000000b1'}])
    arq, = app.post_json(ARQ, {'device_profile_name': 'gone'}).json['arqs']

    by_hex = app.delete(ARQ + '/' + arq['uuid'].replace('-', '').upper())
    by_urn = app.delete(DP + '/urn:uuid:ab000000-0000-4000-8000-0000000000B1')

    assert (by_hex.status_int, by_urn.status_int) == (204, 204)
    assert app.get(ARQ + '/' + arq['uuid'], expect_errors=True
                   ).status_int == 404
    assert [p['name'] for p in app.get(DP).json['device_profiles']] == [
        'dp']


def test_the_sdk_program_path_names_one_deployable_in_two_forms(stored):
    app, _ = stored
    unknown = 'ab000000-0000-4000-8000-0000000000c1'
    body = [{'path': '/program', 'op': 'replace',
             'value': [{'image_uuid': unknown}]}]

    same = app.patch_json('%s/%s/program/%s' % (
        DEP, unknown.upper(), unknown.replace('-', '')), body,
        expect_errors=True)
    two = app.patch_json('%s/%s/program/%s' % (DEP, unknown, PROFILE), body,
                         expect_errors=True)

    assert same.status_int == 404
    assert same.json['error_message'] == (
        'No deployable with uuid %s exists.' % unknown)
    assert two.status_int == 400
    assert two.json['error_message'] == (
        'The path names two deployables, %s and %s.' % (unknown, PROFILE))
