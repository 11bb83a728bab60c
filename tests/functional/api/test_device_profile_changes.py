"""Device profiles that change (microversion 2.7), on each database
engine: updates kept as revisions and the ARQs made from each, profiles
disabled and enabled, private profiles shared with chosen projects."""

import threading
import time

import pytest

from cyborg import context as cyborg_context
from cyborg.db.api import arqs as arqs_db
from cyborg.db.api import device_profiles
from tests.arq_stack import ARQS

DP = '/v2/device_profiles'
FPGA = {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}
TWO_FPGAS = {'resources:FPGA': '2'}


def as_role(project, *roles):
    return {'X-Roles': ','.join(roles), 'X-Project-Id': project,
            'X-User-Id': 'user-of-' + project,
            'OpenStack-API-Version': 'accelerator 2.7'}


ADMIN = as_role('admin-project', 'admin', 'member', 'reader')
MEMBER = as_role('p1', 'member', 'reader')
OTHER = as_role('p2', 'member', 'reader')
OLD_MEMBER = dict(MEMBER, **{'OpenStack-API-Version': 'accelerator 2.6'})


def create(api, name='dp', groups=None, **fields):
    return api.post_json(DP, [dict(name=name, groups=groups or [FPGA],
                                   **fields)], headers=ADMIN).json


def patch(api, key, body, headers=ADMIN, status=200):
    return api.patch_json(DP + '/' + key, body, headers=headers,
                          status=status).json


def names(api, headers):
    return sorted(p['name'] for p in api.get(DP, headers=headers).json[
        'device_profiles'])


def make_arqs(api, name, headers=MEMBER, status=201):
    return api.post_json(ARQS, {'device_profile_name': name},
                         headers=headers, status=status).json


# -- updates and revisions -------------------------------------------------

def test_an_update_makes_a_revision_and_arqs_keep_theirs(api):
    made = create(api, description='first')
    assert (made['revision'], made['enabled'], made['is_public']) == (
        1, True, True)
    first, = make_arqs(api, 'dp')['arqs']
    assert first['device_profile_revision'] == 1

    updated = patch(api, 'dp', {'description': 'second',
                                'groups': [TWO_FPGAS]})['device_profile']

    assert updated['revision'] == 2
    assert (updated['description'], updated['groups']) == (
        'second', [TWO_FPGAS])
    # The new revision's ARQs: two, one per FPGA asked.
    second = make_arqs(api, 'dp')['arqs']
    assert [a['device_profile_revision'] for a in second] == [2, 2]
    # The first ARQ keeps the revision it was made from.
    shown = api.get(ARQS + '/' + first['uuid'], headers=MEMBER).json
    assert shown['device_profile_revision'] == 1
    history = api.get(DP + '/dp/revisions', headers=MEMBER).json
    assert history['revision'] == 2
    assert [(r['revision'], r['description'], r['groups'], r['reason'])
            for r in history['revisions']] == [
        (1, 'first', [FPGA], 'created'),
        (2, 'second', [TWO_FPGAS], 'updated')]


def test_an_update_that_changes_nothing_makes_no_revision(api):
    create(api, description='same')
    again = patch(api, 'dp', {'description': 'same', 'groups': [FPGA]})
    assert again['device_profile']['revision'] == 1
    assert len(api.get(DP + '/dp/revisions', headers=ADMIN).json[
        'revisions']) == 1


@pytest.mark.parametrize('body, message', [
    ({'groups': [{'resources:FPGA': '0'}]}, 'resources:FPGA'),
    ({'groups': []}, 'group'),
    ({'name': 'bad name'}, 'name'),
    ({'enabled': 'yes'}, 'enabled must be true or false, not a string.'),
    ({'uuid': 'x'}, 'A device profile has no field uuid that can be '
                    'changed'),
    ({}, 'The request body changes nothing'),
    ([], 'must be a JSON object'),
], ids=['zero-count', 'no-group', 'bad-name', 'enabled-string', 'uuid',
        'empty', 'array'])
def test_an_update_is_checked_as_a_creation_is_and_changes_nothing(
        api, body, message):
    create(api, description='kept')

    refused = api.patch_json(DP + '/dp', body, headers=ADMIN, status=400)

    assert message in refused.json['error_message']
    shown = api.get(DP + '/dp', headers=ADMIN).json['device_profile']
    assert (shown['revision'], shown['description'], shown['groups']) == (
        1, 'kept', [FPGA])


def test_only_admins_update_and_only_from_2_7(api):
    made = create(api)
    denied = api.patch_json(DP + '/dp', {'description': 'x'},
                            headers=MEMBER, status=403)
    assert 'cyborg:device_profile:update' in denied.json['error_message']
    old = api.patch_json(DP + '/' + made['uuid'], {'description': 'x'},
                         headers=dict(ADMIN, **{
                             'OpenStack-API-Version': 'accelerator 2.6'}),
                         status=404)
    assert old.json['error_message'] == (
        'The resource /v2/device_profiles/%s could not be found.'
        % made['uuid'])
    # Below 2.7 nothing new is shown.
    shown = api.get(DP + '/' + made['uuid'], headers=OLD_MEMBER).json
    assert 'revision' not in shown['device_profile']
    assert api.get(DP + '/dp/revisions', headers=OLD_MEMBER,
                   status=404).json


def test_a_rename_is_refused_while_arqs_of_the_profile_exist(api):
    create(api)
    arqs = make_arqs(api, 'dp')['arqs']

    refused = patch(api, 'dp', {'name': 'renamed'}, status=409)

    assert refused['error_message'] == (
        'Device profile dp cannot be renamed while 1 accelerator requests '
        'made from it exist: flavors name profiles by name. Delete those '
        'requests first.')
    api.delete(ARQS + '?arqs=' + arqs[0]['uuid'], headers=MEMBER)
    renamed = patch(api, 'dp', {'name': 'renamed'})['device_profile']
    assert (renamed['name'], renamed['revision']) == ('renamed', 2)
    assert names(api, MEMBER) == ['renamed']
    # The old name makes nothing now.
    make_arqs(api, 'dp', status=404)
    taken = create(api, 'other')
    assert patch(api, 'other', {'name': 'renamed'}, status=409)[
        'error_message'] == 'A device profile with name renamed already ' \
        'exists.'
    assert taken['name'] == 'other'


@pytest.mark.parametrize('change, status, revisions', [
    ({'groups': [TWO_FPGAS]}, 201, [2, 2]),
    ({'enabled': False}, 409, None),
    ({'is_public': False}, 404, None),
], ids=['new-revision', 'disabled', 'made-private'])
def test_a_worker_that_read_the_profile_before_another_changed_it(
        api, change, status, revisions):
    """Each API worker keeps what it read of a profile; the INSERT made
    from it checks the profile's generation, so a change made through
    another worker is never missed."""
    create(api)
    make_arqs(api, 'dp')
    read_before = arqs_db._KNOWN_PROFILES['dp']

    patch(api, 'dp', change)
    # This worker still holds what it read: the change came through
    # another.
    arqs_db._KNOWN_PROFILES['dp'] = read_before

    made = make_arqs(api, 'dp', status=status)
    if revisions is not None:
        assert [a['device_profile_revision'] for a in made['arqs']] == (
            revisions)


# -- enabled and disabled --------------------------------------------------

def test_a_disabled_profile_makes_no_arqs_and_members_do_not_see_it(api):
    create(api)
    create(api, 'other')
    kept, = make_arqs(api, 'dp')['arqs']

    disabled = patch(api, 'dp', {'enabled': False})['device_profile']

    assert (disabled['enabled'], disabled['revision']) == (False, 1)
    refused = make_arqs(api, 'dp', status=409)
    assert refused['error_message'] == (
        'Device profile dp is disabled: it makes no new accelerator '
        'requests.')
    assert names(api, MEMBER) == names(api, OLD_MEMBER) == ['other']
    api.get(DP + '/dp', headers=MEMBER, status=404)
    assert names(api, ADMIN) == ['dp', 'other']
    # The ARQs it made are left alone.
    assert api.get(ARQS + '/' + kept['uuid'], headers=MEMBER).json[
        'state'] == 'Initial'

    patch(api, 'dp', {'enabled': True})
    assert len(make_arqs(api, 'dp')['arqs']) == 1
    assert names(api, MEMBER) == ['dp', 'other']


# -- private profiles ------------------------------------------------------

def test_a_private_profile_is_seen_and_used_only_by_its_projects(api):
    made = create(api, 'secret', is_public=False)
    create(api, 'open')
    assert made['is_public'] is False

    # p1 has no access yet: as if there were no such profile.
    assert names(api, MEMBER) == ['open']
    api.get(DP + '/secret', headers=MEMBER, status=404)
    refused = make_arqs(api, 'secret', status=404)
    assert refused['error_message'] == (
        "No device profile named 'secret' exists.")

    added = api.post_json(DP + '/secret/projects', {'project_id': 'p1'},
                          headers=ADMIN, status=201).json
    assert added['projects'] == ['p1']

    assert names(api, MEMBER) == ['open', 'secret']
    assert len(make_arqs(api, 'secret')['arqs']) == 1
    # Another project still sees nothing of it.
    assert names(api, OTHER) == ['open']
    make_arqs(api, 'secret', headers=OTHER, status=404)

    api.delete(DP + '/secret/projects/p1', headers=ADMIN, status=204)
    assert names(api, MEMBER) == ['open']
    make_arqs(api, 'secret', status=404)


def test_access_calls_are_for_admins_and_checked(api):
    create(api, 'secret', is_public=False)
    create(api, 'open')
    projects = DP + '/secret/projects'

    api.post_json(projects, {'project_id': 'p1'}, headers=MEMBER,
                  status=403)
    api.post_json(projects, {'project_id': 'p1'}, headers=ADMIN, status=201)
    again = api.post_json(projects, {'project_id': 'p1'}, headers=ADMIN,
                          status=409).json
    assert again['error_message'] == (
        'Device profile secret is already shared with project p1.')
    assert api.get(projects, headers=ADMIN).json['projects'] == ['p1']
    public = api.post_json(DP + '/open/projects', {'project_id': 'p1'},
                           headers=ADMIN, status=409).json
    assert 'is public: every project may use it' in public['error_message']
    for body in ({}, {'project_id': ''}, {'project_id': 7},
                 {'project_id': 'p1', 'x': 1}):
        api.post_json(projects, body, headers=ADMIN, status=400)
    gone = api.delete(projects + '/p9', headers=ADMIN, status=404).json
    assert gone['error_message'] == (
        'Device profile secret is not shared with project p9.')

    # Made public: every project sees it, and its list is dropped.
    patch(api, 'secret', {'is_public': True})
    assert names(api, OTHER) == ['open', 'secret']
    patch(api, 'secret', {'is_public': False})
    assert api.get(projects, headers=ADMIN).json['projects'] == []


def test_an_admin_sees_and_uses_every_profile(api):
    create(api, 'secret', is_public=False)
    assert names(api, ADMIN) == ['secret']
    assert len(make_arqs(api, 'secret', headers=ADMIN)['arqs']) == 1


def test_arqs_made_while_the_profile_changes_match_their_revision(
        db, admin_context):
    """One thread changes the profile's groups back and forth (odd
    revisions ask one FPGA, even ones two) while two others make ARQs
    from it, through the same per-worker knowledge of the profile: every
    creation makes exactly the ARQs of the revision it records. (The
    narrow window of a read made stale by another worker is forced in
    ``test_a_worker_that_read_the_profile_before_another_changed_it``.)"""
    create_one = {'uuid': '0b6c2a52-3a4e-4c4b-9e55-2f1d9f3a7c10',
                  'name': 'moving', 'description': None,
                  'groups': [dict(FPGA)]}
    device_profiles.create_profiles(admin_context, [create_one])
    units = {1: [FPGA], 0: [TWO_FPGAS]}
    stop = threading.Event()
    made, errors = [], []

    def change():
        try:
            for revision in range(2, 42):
                # Each revision is changed only once some ARQ was made
                # since the last change: creations and changes interleave.
                seen, deadline = len(made), time.monotonic() + 10
                while len(made) == seen and time.monotonic() < deadline:
                    time.sleep(0.001)
                device_profiles.update_profile(
                    cyborg_context.admin_context(db),
                    {'groups': units[revision % 2]}, name='moving')
        except Exception as exc:  # the test fails with it
            errors.append(exc)
        finally:
            stop.set()

    def create():
        context = cyborg_context.admin_context(db)
        try:
            while not stop.is_set():
                made.append(arqs_db.create_arqs(context, 'moving', 'p1'))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=change)] + [
        threading.Thread(target=create) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    assert len({arqs[0]['device_profile_revision'] for arqs in made}) >= 20
    for arqs in made:
        revisions = {a['device_profile_revision'] for a in arqs}
        assert len(revisions) == 1, arqs
        revision, = revisions
        assert len(arqs) == (1 if revision % 2 else 2), (revision, arqs)
    # And as stored.
    stored = arqs_db.list_arqs(admin_context)
    assert len(stored) == sum(len(arqs) for arqs in made)
    assert device_profiles.get_profile(admin_context,
                                       name='moving').revision == 41
