"""Accelerator requests behind a real Keystone: who sees and moves what.

Every caller holds a real token from the session's Keystone: alice is a
member of project-a, bob of project-b, admin an administrator (of the
admin project, and of the system), nova Nova's service user. Nova calls
with the user's token in X-Auth-Token and its own in X-Service-Token.

- ARQs belong to the project that made them: another project's member
  neither sees nor touches them (404, never a hint), an administrator sees
  every project's.
- Binding, unbinding, deleting by instance and deleting a bound ARQ need
  a service token (403 "... requires a service token"), whoever the user
  is; deleting an ARQ bound to nothing does not.
- A system-scoped token is refused (403): the rules are project-scoped.
"""

import uuid

import pytest

from tests.arq_stack import ARQS
from tests.arq_stack import bind_body
from tests.arq_stack import unbind_body

# One worker runs them all, so that one Keystone serves them.
pytestmark = pytest.mark.xdist_group('keystone')

NEEDS_SERVICE = 'requires a service token'


def _item(arq):
    return ARQS + '/' + arq['uuid']


def _by_uuid(arqs):
    return {a['uuid']: a for a in arqs}


def _refused_for_service_token(response):
    assert response.status_code == 403, response.text
    assert NEEDS_SERVICE in response.json()['error_message']
    assert response.json()['code'] == 'cyborg.arq.service_token_required'


def _bind(api, as_user, arqs, rp):
    """Bind ``arqs`` to a new instance as Nova does; the instance."""
    instance = str(uuid.uuid4())
    bound = api('PATCH', ARQS, as_user, service='nova',
                json=bind_body(arqs, rp, instance))
    assert bound.status_code == 202, bound.text
    resolved = api.wait_resolved(as_user, instance)
    assert {a['state'] for a in resolved} == {'Bound'}
    return instance


def test_another_project_neither_sees_nor_touches_arqs(
        api, keystone_service, profile, fpga_rp, conductor):
    project_a = keystone_service.projects['project-a']
    waiting = api.create('alice')
    in_use = api.create('alice')
    instance = _bind(api, 'alice', in_use, fpga_rp)
    before = _by_uuid(api.list('alice'))
    assert len(before) == 6
    assert {a['project_id'] for a in before.values()} == {project_a}

    def unchanged():
        assert _by_uuid(api.list('alice')) == before

    # Reading: nothing at all, with or without Nova's service token.
    assert api.list('bob') == []
    assert api('GET', ARQS, 'bob', service='nova').json()['arqs'] == []
    assert api.list('bob', instance=instance) == []
    for arq in (waiting[0], in_use[0]):
        for service in (None, 'nova'):
            got = api('GET', _item(arq), 'bob', service=service)
            assert got.status_code == 404, got.text
            assert arq['uuid'] in got.json()['error_message']

    # Binding someone else's ARQs: the service token is checked first,
    # then they are not found.
    other_instance = str(uuid.uuid4())
    _refused_for_service_token(api('PATCH', ARQS, 'bob', json=bind_body(
        waiting, fpga_rp, other_instance)))
    for path in (ARQS, _item(waiting[0])):
        arqs = waiting if path == ARQS else waiting[:1]
        refused = api('PATCH', path, 'bob', service='nova',
                      json=bind_body(arqs, fpga_rp, other_instance))
        assert refused.status_code == 404, refused.text
        unchanged()

    # Unbinding them.
    for path in (ARQS, _item(in_use[0])):
        arqs = in_use if path == ARQS else in_use[:1]
        refused = api('PATCH', path, 'bob', service='nova',
                      json=unbind_body(arqs))
        assert refused.status_code == 404, refused.text
        unchanged()

    # Deleting them, one by one or by list, bound or not.
    for arq in (waiting[0], in_use[0]):
        for service in (None, 'nova'):
            refused = api('DELETE', _item(arq), 'bob', service=service)
            assert refused.status_code == 404, refused.text
            unchanged()
    refused = api('DELETE', ARQS, 'bob', service='nova',
                  params={'arqs': ','.join(before)})
    assert refused.status_code == 404, refused.text
    unchanged()
    # By instance: none of bob's is bound to it, so nothing goes.
    nothing = api('DELETE', ARQS, 'bob', service='nova',
                  params={'instance': instance})
    assert nothing.status_code == 204, nothing.text
    unchanged()

    # Bob's own ARQs are his project's, and alice does not see them.
    his = api.create('bob')
    assert {a['project_id'] for a in his} == {
        keystone_service.projects['project-b']}
    assert _by_uuid(api.list('bob')) == _by_uuid(his)
    unchanged()


def test_binding_and_unbinding_need_a_service_token(
        api, profile, fpga_rp, conductor):
    arqs = api.create('alice')
    instance = str(uuid.uuid4())
    body = bind_body(arqs, fpga_rp, instance)

    for as_user in ('alice', 'admin'):
        _refused_for_service_token(api('PATCH', ARQS, as_user, json=body))
    _refused_for_service_token(api(
        'PATCH', _item(arqs[0]), 'alice',
        json=bind_body(arqs[:1], fpga_rp, instance)))
    assert [(a['state'], a['instance_uuid'], a['hostname'])
            for a in api.list('alice')] == [('Initial', None, None)] * 3

    bound = api('PATCH', ARQS, 'alice', service='nova', json=body)

    assert bound.status_code == 202, bound.text
    resolved = api.wait_resolved('alice', instance)
    assert {a['state'] for a in resolved} == {'Bound'}
    assert {a['instance_uuid'] for a in resolved} == {instance}
    assert {a['attach_handle_type'] for a in resolved} == {'TEST_PCI'}
    assert len({a['attach_handle_uuid'] for a in resolved}) == 3

    _refused_for_service_token(api('PATCH', ARQS, 'alice',
                                   json=unbind_body(arqs)))
    _refused_for_service_token(api('PATCH', _item(arqs[0]), 'admin',
                                   json=unbind_body(arqs[:1])))
    assert {a['state'] for a in api.list('alice')} == {'Bound'}

    unbound = api('PATCH', ARQS, 'alice', service='nova',
                  json=unbind_body(arqs))

    assert unbound.status_code == 202, unbound.text
    assert [(a['state'], a['instance_uuid'], a['attach_handle_uuid'])
            for a in api.list('alice')] == [('Unbound', None, None)] * 3


def test_deleting_by_instance_needs_a_service_token_even_for_the_admin(
        api, profile, fpga_rp, conductor):
    arqs = api.create('alice')
    instance = _bind(api, 'alice', arqs, fpga_rp)
    before = _by_uuid(api.list('alice'))

    for as_user in ('alice', 'admin'):
        _refused_for_service_token(api('DELETE', ARQS, as_user,
                                       params={'instance': instance}))
        assert _by_uuid(api.list('alice')) == before

    deleted = api('DELETE', ARQS, 'alice', service='nova',
                  params={'instance': instance})

    assert deleted.status_code == 204, deleted.text
    assert api.list('alice') == []
    assert api.list('admin', instance=instance) == []


def test_deleting_a_bound_arq_needs_a_service_token(
        api, profile, fpga_rp, conductor):
    bound = api.create('alice')
    _bind(api, 'alice', bound, fpga_rp)
    waiting = api.create('alice')

    for as_user in ('alice', 'admin'):
        _refused_for_service_token(api('DELETE', _item(bound[0]), as_user))
    # All or nothing: the ARQ bound to nothing stays too.
    _refused_for_service_token(api(
        'DELETE', ARQS, 'alice',
        params={'arqs': '%s,%s' % (waiting[0]['uuid'], bound[0]['uuid'])}))
    assert len(api.list('alice')) == 6

    # An ARQ bound to nothing goes without a service token.
    gone = api('DELETE', _item(waiting[0]), 'alice')
    assert gone.status_code == 204, gone.text
    gone = api('DELETE', ARQS, 'alice', params={
        'arqs': ','.join(a['uuid'] for a in waiting[1:])})
    assert gone.status_code == 204, gone.text

    deleted = api('DELETE', _item(bound[0]), 'alice', service='nova')

    assert deleted.status_code == 204, deleted.text
    assert sorted(a['uuid'] for a in api.list('alice')) == sorted(
        a['uuid'] for a in bound[1:])
    assert {a['state'] for a in api.list('alice')} == {'Bound'}


def test_an_admin_sees_every_project(api, keystone_service, profile):
    alices = api.create('alice')
    bobs = api.create('bob')
    projects = keystone_service.projects

    everyone = _by_uuid(api.list('admin'))

    assert everyone == {**_by_uuid(alices), **_by_uuid(bobs)}
    assert {a['project_id'] for a in everyone.values()} == {
        projects['project-a'], projects['project-b']}
    assert _by_uuid(api.list('alice')) == _by_uuid(alices)
    assert _by_uuid(api.list('bob')) == _by_uuid(bobs)
    shown = api('GET', _item(bobs[0]), 'admin')
    assert shown.status_code == 200, shown.text
    assert shown.json() == bobs[0]
    # And acts on them: deleting one of bob's (bound to nothing).
    deleted = api('DELETE', _item(bobs[0]), 'admin')
    assert deleted.status_code == 204, deleted.text
    assert _by_uuid(api.list('bob')) == _by_uuid(bobs[1:])
    # The admin's own are the admin project's.
    own = api.create('admin')
    assert {a['project_id'] for a in own} == {projects['admin']}
    assert api.list('alice') == alices


def _system_scope_attempts(arqs, rp):
    """Every ARQ call, each aimed at ``arqs`` where it takes one."""
    return [
        ('GET', ARQS, {}),
        ('GET', _item(arqs[0]), {}),
        ('POST', ARQS, {'json': {'device_profile_name': 'fpga-dp'}}),
        ('PATCH', ARQS, {'json': bind_body(arqs, rp, str(uuid.uuid4()))}),
        ('PATCH', ARQS, {'json': unbind_body(arqs)}),
        ('DELETE', _item(arqs[0]), {}),
        ('DELETE', ARQS, {'params': {'arqs': arqs[0]['uuid']}}),
        ('DELETE', ARQS, {'params': {'instance': str(uuid.uuid4())}}),
    ]


def _refused_for_scope(response, what):
    assert response.status_code == 403, (what, response.text)
    assert response.json()['code'] == 'cyborg.policy.scope', what
    assert 'project-scoped token' in response.json()['error_message']


@pytest.mark.parametrize('user', ['admin', 'auditor'])
def test_a_system_scoped_token_is_refused(api, keystone_service, profile,
                                          fpga_rp, conductor, user):
    alices = api.create('alice')
    system = keystone_service.token(user, system_scope='all')

    for method, path, kwargs in _system_scope_attempts(alices, fpga_rp):
        _refused_for_scope(api(method, path, token=system, **kwargs),
                           (method, path))

    assert api.list('alice') == alices
    assert _by_uuid(api.list('admin')) == _by_uuid(alices)


@pytest.mark.parametrize('user', ['admin', 'auditor'])
def test_a_system_scoped_token_with_a_service_token_is_refused(
        api, keystone_service, profile, fpga_rp, conductor, user):
    # Nova's service token vouches for the service, not for the user's
    # token: the user's system scope still does not fit project rules,
    # and a token without a project must never mean "every project".
    alices = api.create('alice')
    system = keystone_service.token(user, system_scope='all')

    for method, path, kwargs in _system_scope_attempts(alices, fpga_rp):
        _refused_for_scope(api(method, path, token=system, service='nova',
                               **kwargs), (method, path))

    assert api.list('alice') == alices
    assert _by_uuid(api.list('admin')) == _by_uuid(alices)


def test_tokens_are_checked(api, keystone_service, profile, fpga_rp,
                            conductor):
    arqs = api.create('alice')
    body = bind_body(arqs, fpga_rp, str(uuid.uuid4()))

    public = api('GET', '/v2')
    assert public.status_code == 200, public.text
    for token in (None, 'not-a-token', keystone_service.token('alice')[::-1]):
        refused = api('GET', ARQS, token=token)
        assert refused.status_code == 401, refused.text
        assert keystone_service.auth_url in refused.headers[
            'WWW-Authenticate']
    # A user's token is no service token: with
    # service_token_roles_required, auth_token refuses the request.
    for fake_service in ('bob', 'alice', 'admin'):
        refused = api('PATCH', ARQS, 'alice', json=body, headers={
            'X-Service-Token': keystone_service.token(fake_service)})
        assert refused.status_code == 401, refused.text
    refused = api('PATCH', ARQS, 'alice', json=body,
                  headers={'X-Service-Token': 'not-a-token'})
    assert refused.status_code == 401, refused.text
    assert {a['state'] for a in api.list('alice')} == {'Initial'}


@pytest.mark.parametrize('fake_service', ['bob', 'admin'])
def test_without_roles_required_a_user_token_is_still_no_service_token(
        lenient_api, profile, fpga_rp, conductor, fake_service):
    # auth_token lets any valid token through as X-Service-Token; the
    # API looks for the service role itself.
    api = lenient_api
    arqs = api.create('alice')
    instance = str(uuid.uuid4())
    body = bind_body(arqs, fpga_rp, instance)

    _refused_for_service_token(api('PATCH', ARQS, 'alice', json=body,
                                   service=fake_service))
    assert {a['state'] for a in api.list('alice')} == {'Initial'}

    bound = api('PATCH', ARQS, 'alice', service='nova', json=body)

    assert bound.status_code == 202, bound.text
    assert {a['state'] for a in api.wait_resolved('alice', instance)} == {
        'Bound'}
    _refused_for_service_token(api('DELETE', ARQS, 'alice',
                                   service=fake_service,
                                   params={'instance': instance}))
    assert len(api.list('alice')) == 3
