"""Who may do what with device profiles, through the whole API stack."""

import pytest

DP = '/v2/device_profiles'
GROUPS = [{'resources:FPGA': '1'}]


def as_role(*roles, project='p1'):
    return {'X-Roles': ','.join(roles), 'X-Project-Id': project,
            'X-User-Id': 'u-' + roles[0]}


READER = as_role('reader')
MEMBER = as_role('member', 'reader')
ADMIN = as_role('admin', 'member', 'reader')


@pytest.mark.parametrize('headers,allowed', [
    (READER, False), (MEMBER, False), (ADMIN, True)])
def test_only_admins_create_and_delete(api, headers, allowed):
    created = api.post_json(DP, [{'name': 'dp', 'groups': GROUPS}],
                            headers=headers, expect_errors=True)
    api.post_json(DP, [{'name': 'kept', 'groups': GROUPS}], headers=ADMIN)
    deleted = api.delete(DP + '/kept', headers=headers, expect_errors=True)

    expected = 201 if allowed else 403
    assert created.status_int == expected
    assert deleted.status_int == (204 if allowed else 403)
    if not allowed:
        assert created.json['error_message'] == (
            'Policy does not allow cyborg:device_profile:create to be '
            'performed.')
        names = [p['name'] for p in api.get(DP).json['device_profiles']]
        assert names == ['kept']


@pytest.mark.parametrize('headers,status', [
    (READER, 200), (MEMBER, 200), (ADMIN, 200),
    (as_role('service'), 403)])
def test_project_readers_list_and_show(api, headers, status):
    made = api.post_json(DP, [{'name': 'dp', 'groups': GROUPS}],
                         headers=ADMIN).json

    listed = api.get(DP, headers=headers, expect_errors=True)
    shown = api.get(DP + '/' + made['uuid'], headers=headers,
                    expect_errors=True)

    assert listed.status_int == shown.status_int == status


def test_system_scoped_token_is_refused(api):
    headers = {'X-Roles': 'admin,reader', 'X-User-Id': 'sys',
               'OpenStack-System-Scope': 'all'}

    listed = api.get(DP, headers=headers, expect_errors=True)
    created = api.post_json(DP, [{'name': 'dp', 'groups': GROUPS}],
                            headers=headers, expect_errors=True)

    assert listed.status_int == 403
    assert created.status_int == 403
    assert 'scope' in listed.json['error_message']
