"""python-cyborgclient 3.x (with OSC 10.3): ``openstack accelerator arq
create/list/show/bind/unbind/delete`` against the served API on MariaDB,
binding through a real conductor on oslo.messaging's in-process transport
(the one the served app is given). One engine: the subject is what goes
over the wire; the API and conductor tests run the same SQL on each.

The fake driver's deployable (16 TEST_PCI handles) is stored as the
conductor stores a host's report; binding it needs no agent. Nova is a
recorder of the bind events the conductor sends.
"""

import json
import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg.db import models
from tests import arq_stack
from tests import conftest
from tests.arq_stack import handles_in_use
from tests.functional.clients import cli
from tests.functional.clients.conftest import conductor_service

HOST = arq_stack.HOST
PROFILE = 'cli-arq-dp'
# What every `arq show` (and create, bind, unbind) prints, in order.
SHOW_COLUMNS = ['uuid', 'state', 'device_profile_name', 'hostname',
                'device_rp_uuid', 'instance_uuid', 'attach_handle_type',
                'attach_handle_info']
LIST_COLUMNS = ['uuid', 'state', 'device_profile_name', 'instance_uuid',
                'attach_handle_type', 'attach_handle_info']
PCI_ADDRESS = {'domain', 'bus', 'device', 'function'}
# noauth: the CLI's requests carry no identity, so the API takes them for
# this project's admin (and, without Keystone, as a service).
NOAUTH_PROJECT = 'noauth-project'


database_url = conftest.database_url_on('mysql')
fpga_rp = arq_stack.fpga_rp  # the fake FPGA of HOST
transport = arq_stack.transport


@pytest.fixture
def conductor(conf, db, transport, nova):
    with arq_stack.serving_conductor(
            transport, db, arq_stack.binder(conf, nova=nova)) as endpoint:
        yield endpoint.binder


# The API on a real port, casting to ``conductor``.
service = conductor_service


@pytest.fixture
def profile(admin_context):
    """Two ARQs for group 0, one for group 1."""
    return arq_stack.make_profile(admin_context, PROFILE)


# -- helpers -----------------------------------------------------------------

def arq(service, env, *args):
    """The JSON output of one ``arq`` command, which must succeed."""
    return cli.run_json(service, env, 'arq', *args)


def arq_all(service, env, commands):
    """``(returncode, stdout, stderr)`` of ``arq`` commands run side by
    side; ``-f json`` is added to those that print an ARQ or a list."""
    return cli.run_all(service, env, [
        ('arq', *args) + (() if args[0] == 'delete' else ('-f', 'json'))
        for args in commands])


def arq_all_ok(service, env, commands):
    results = arq_all(service, env, commands)
    for returncode, _, err in results:
        assert returncode == 0, err
    return [json.loads(out) for _, out, _ in results]


def rows(db):
    """Every ARQ in the database by uuid, with its attach handle's uuid,
    type and use (None when it has none)."""
    arqs = models.ExtendedAcceleratorRequest.__table__
    handles = models.AttachHandle.__table__
    with db.engine.connect() as conn:
        found = conn.execute(
            sa.select(arqs.c.uuid, arqs.c.state, arqs.c.hostname,
                      arqs.c.device_rp_uuid, arqs.c.instance_uuid,
                      arqs.c.project_id, arqs.c.device_profile_group_id,
                      handles.c.uuid.label('handle_uuid'),
                      handles.c.attach_type, handles.c.in_use)
            .select_from(arqs.outerjoin(
                handles, arqs.c.attach_handle_id == handles.c.id))).all()
    return {r.uuid: r for r in found}


def wait_resolved(service, env, *arq_uuids, timeout=30):
    """``arq show`` of each ARQ (side by side) until its bind is over:
    the bind runs after the client got its 202."""
    deadline = time.monotonic() + timeout
    resolved = {}
    while True:
        pending = [u for u in arq_uuids if u not in resolved]
        shown = arq_all_ok(service, env, [('show', u) for u in pending])
        for one in shown:
            if one['state'] not in ('Initial', 'BindStarted'):
                resolved[one['uuid']] = one
        if len(resolved) == len(arq_uuids):
            return [resolved[u] for u in arq_uuids]
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)


def calls(service, since=0):
    """(method, path below /v2, query, status) of the API calls made."""
    return [(e['method'], e['path'].split('/v2', 1)[1], e['query'],
             e['status']) for e in service.recorder.api_calls()[since:]]


def bind_args(arq_uuid, hostname, instance, rp):
    # <arq> <hostname> <instance_uuid> <device_rp_uuid> <project_id>; the
    # client requires the project id but does not send it.
    return ('bind', arq_uuid, hostname, instance, rp, NOAUTH_PROJECT)


# -- tests -------------------------------------------------------------------

def test_arq_create_list_show(service, client_env, profile):
    created, with_group = arq_all_ok(service, client_env, [
        ('create', profile), ('create', '--group-id', '0', profile)])

    assert list(created) == SHOW_COLUMNS
    assert created['state'] == 'Initial'
    assert created['device_profile_name'] == profile
    assert (created['hostname'], created['device_rp_uuid'],
            created['instance_uuid']) == (None, None, None)
    assert created['attach_handle_type'] == ''
    assert created['attach_handle_info'] == {}
    # The client sends null without --group-id, else the index as a
    # string; the ARQs cover every group of the profile either way.
    assert sorted(json.dumps(json.loads(e['body']), sort_keys=True)
                  for e in service.recorder.api_calls()
                  if e['method'] == 'POST') == [
        json.dumps({'device_profile_group_id': value,
                    'device_profile_name': profile}, sort_keys=True)
        for value in ('0', None)]
    # One ARQ per unit of every group, twice; the client shows the first
    # ARQ each request made.
    stored = rows(service.db)
    assert sorted(r.device_profile_group_id for r in stored.values()) == [
        0, 0, 0, 0, 1, 1]
    assert {r.state for r in stored.values()} == {'Initial'}
    assert {r.project_id for r in stored.values()} == {NOAUTH_PROJECT}
    assert stored[created['uuid']].device_profile_group_id == 0
    assert stored[with_group['uuid']].device_profile_group_id == 0
    assert with_group['uuid'] != created['uuid']
    assert {k: v for k, v in with_group.items() if k != 'uuid'} == {
        k: v for k, v in created.items() if k != 'uuid'}
    assert sorted(calls(service)) == sorted([
        ('POST', '/accelerator_requests', '', 201),
        ('POST', '/accelerator_requests', '', 201),
        ('GET', '/accelerator_requests/' + created['uuid'], '', 200),
        ('GET', '/accelerator_requests/' + with_group['uuid'], '', 200)])

    listed, long_listed, shown = arq_all_ok(service, client_env, [
        ('list',), ('list', '--long'), ('show', created['uuid'])])

    assert sorted(a['uuid'] for a in listed) == sorted(stored)
    assert all(list(a) == LIST_COLUMNS for a in listed)
    assert {(a['state'], a['device_profile_name'], a['instance_uuid'],
             a['attach_handle_type'], json.dumps(a['attach_handle_info']))
            for a in listed} == {('Initial', profile, None, '', '{}')}
    assert sorted(a['uuid'] for a in long_listed) == sorted(stored)
    assert all(list(a) == SHOW_COLUMNS for a in long_listed)
    assert {(a['hostname'], a['device_rp_uuid']) for a in long_listed} == {
        (None, None)}
    assert shown == created
    assert {c['version'] for c in service.recorder.api_calls()} == {
        'accelerator 2.3'}


def test_arq_bind_unbind_delete(service, client_env, profile, fpga_rp, nova):
    arq_uuid = arq(service, client_env, 'create', profile)['uuid']
    others = sorted(set(rows(service.db)) - {arq_uuid})
    instance = str(uuid.uuid4())
    before_bind = len(service.recorder.api_calls())

    bound = arq(service, client_env,
                *bind_args(arq_uuid, HOST, instance, fpga_rp))

    assert list(bound) == SHOW_COLUMNS
    assert bound['uuid'] == arq_uuid
    assert (bound['hostname'], bound['device_rp_uuid'],
            bound['instance_uuid']) == (HOST, fpga_rp, instance)
    # The client read the ARQ right after the 202: bound or on its way.
    assert bound['state'] in ('BindStarted', 'Bound')
    assert calls(service, before_bind) == [
        ('PATCH', '/accelerator_requests/' + arq_uuid, '', 202),
        ('GET', '/accelerator_requests/' + arq_uuid, '', 200)]
    patch = service.recorder.api_calls()[before_bind]
    assert json.loads(patch['body']) == {arq_uuid: [
        {'op': 'add', 'path': '/hostname', 'value': HOST},
        {'op': 'add', 'path': '/instance_uuid', 'value': instance},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': fpga_rp}]}

    resolved, = wait_resolved(service, client_env, arq_uuid)

    assert resolved['state'] == 'Bound'
    assert resolved['attach_handle_type'] == 'TEST_PCI'
    assert set(resolved['attach_handle_info']) == PCI_ADDRESS
    assert all(isinstance(v, str)
               for v in resolved['attach_handle_info'].values())
    assert (resolved['hostname'], resolved['device_rp_uuid'],
            resolved['instance_uuid']) == (HOST, fpga_rp, instance)
    stored = rows(service.db)
    assert (stored[arq_uuid].state, stored[arq_uuid].attach_type,
            stored[arq_uuid].in_use) == ('Bound', 'TEST_PCI', True)
    assert handles_in_use(service.db) == 1
    assert {stored[u].state for u in others} == {'Initial'}
    assert nova.wait_for(1) == [(instance, arq_uuid, True)]

    (listed_rc, listed, _), (second_rc, _, second_err) = arq_all(
        service, client_env, [
            ('list', '--long'),
            # The client binds one ARQ per request: a second ARQ for the
            # same instance is a second bind, which the service refuses.
            bind_args(others[0], HOST, instance, fpga_rp)])

    assert listed_rc == 0
    by_uuid = {a['uuid']: a for a in json.loads(listed)}
    assert by_uuid[arq_uuid] == resolved
    assert second_rc == 1
    assert 'already has accelerator request %s' % arq_uuid in second_err
    assert rows(service.db)[others[0]].state == 'Initial'

    before_unbind = len(service.recorder.api_calls())
    unbound = arq(service, client_env, 'unbind', arq_uuid)

    assert unbound['state'] == 'Unbound'
    assert (unbound['hostname'], unbound['device_rp_uuid'],
            unbound['instance_uuid']) == (None, None, None)
    assert unbound['attach_handle_type'] == ''
    assert unbound['attach_handle_info'] == {}
    assert calls(service, before_unbind) == [
        ('PATCH', '/accelerator_requests/' + arq_uuid, '', 202),
        ('GET', '/accelerator_requests/' + arq_uuid, '', 200)]
    patch = service.recorder.api_calls()[before_unbind]
    assert json.loads(patch['body']) == {arq_uuid: [
        {'op': 'remove', 'path': '/hostname'},
        {'op': 'remove', 'path': '/instance_uuid'},
        {'op': 'remove', 'path': '/device_rp_uuid'}]}
    stored = rows(service.db)[arq_uuid]
    assert (stored.state, stored.hostname, stored.instance_uuid,
            stored.handle_uuid) == ('Unbound', None, None, None)
    assert handles_in_use(service.db) == 0

    before_delete = len(service.recorder.api_calls())
    deleted = cli.run(service, client_env, 'arq', 'delete', arq_uuid)

    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == [
        'Deleted accelerator_request %s' % arq_uuid]
    assert calls(service, before_delete) == [
        ('DELETE', '/accelerator_requests/' + arq_uuid, '', 204)]
    assert sorted(rows(service.db)) == others
    (show_rc, _, show_err), (list_rc, listed, _) = arq_all(
        service, client_env, [('show', arq_uuid), ('list',)])
    assert show_rc == 1
    assert 'accelerator_request not found: %s' % arq_uuid in show_err
    assert list_rc == 0
    assert sorted(a['uuid'] for a in json.loads(listed)) == others
    # Nova heard of the one bind only: the refused one never started.
    assert nova.wait_for(1) == [(instance, arq_uuid, True)]


def test_arq_failed_bind_rebind_and_delete_of_bound(
        service, client_env, profile, fpga_rp, nova):
    arq(service, client_env, 'create', profile)
    good, bad, idle = sorted(rows(service.db))
    first, second = str(uuid.uuid4()), str(uuid.uuid4())

    # The provider is host1's: the conductor fails the bind to host2,
    # after the 202, so both commands succeed.
    arq_all_ok(service, client_env, [
        bind_args(good, HOST, first, fpga_rp),
        bind_args(bad, 'host2', second, fpga_rp)])
    bound, failed_bind = wait_resolved(service, client_env, good, bad)

    assert bound['state'] == 'Bound'
    assert bound['attach_handle_type'] == 'TEST_PCI'
    assert failed_bind['state'] == 'BindFailed'
    assert failed_bind['attach_handle_type'] == ''
    assert failed_bind['attach_handle_info'] == {}
    assert rows(service.db)[bad].handle_uuid is None
    assert handles_in_use(service.db) == 1
    assert nova.wait_for(2) == sorted(
        [(first, good, True), (second, bad, False)])

    # A failed bind is unbound before it is tried again.
    again = cli.run(service, client_env, 'arq',
                    *bind_args(bad, HOST, second, fpga_rp))
    assert again.returncode == 1
    assert 'BindFailed' in again.stderr
    assert rows(service.db)[bad].state == 'BindFailed'
    assert arq(service, client_env, 'unbind', bad)['state'] == 'Unbound'

    arq(service, client_env, *bind_args(bad, HOST, second, fpga_rp))
    rebound, = wait_resolved(service, client_env, bad)

    assert rebound['state'] == 'Bound'
    assert rebound['instance_uuid'] == second
    assert rebound['attach_handle_type'] == 'TEST_PCI'
    # Never the handle the other ARQ holds.
    assert rebound['attach_handle_info'] != bound['attach_handle_info']
    stored = rows(service.db)
    assert stored[bad].handle_uuid != stored[good].handle_uuid
    assert handles_in_use(service.db) == 2
    assert nova.wait_for(3) == sorted(
        [(first, good, True), (second, bad, False), (second, bad, True)])

    # Without Keystone every caller counts as a service (Nova), which may
    # delete bound ARQs; their handles go back to the pool.
    deleted = cli.run(service, client_env, 'arq', 'delete', good, bad, idle)

    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == [
        'Deleted accelerator_request %s' % u for u in (good, bad, idle)]
    assert rows(service.db) == {}
    assert handles_in_use(service.db) == 0


def test_arq_errors_fail_the_command(service, client_env, profile, fpga_rp):
    kept = arq(service, client_env, 'create', profile)['uuid']
    before = rows(service.db)
    missing = str(uuid.uuid4())
    before_errors = len(service.recorder.api_calls())

    results = arq_all(service, client_env, [
        ('show', missing),
        ('show', 'not-a-uuid'),
        ('delete', missing),
        ('create', 'no-such-profile'),
        ('bind', kept, HOST, 'not-a-uuid', fpga_rp, NOAUTH_PROJECT),
        bind_args(missing, HOST, str(uuid.uuid4()), fpga_rp),
        ('unbind', missing),
    ])

    assert [returncode for returncode, _, _ in results] == [1] * 7
    (show, show_bad, delete, create, bad_bind, missing_bind,
     missing_unbind) = [err for _, _, err in results]
    assert 'accelerator_request not found: %s' % missing in show
    assert 'accelerator_request not found: not-a-uuid' in show_bad
    assert 'No accelerator_request with UUID %s exists.' % missing in delete
    assert 'no-such-profile' in create
    assert 'instance_uuid' in bad_bind
    assert missing in missing_bind
    assert missing in missing_unbind
    # Nothing changed: no ARQ made, bound or removed.
    assert rows(service.db) == before
    assert handles_in_use(service.db) == 0
    assert sorted(calls(service, before_errors)) == sorted([
        ('GET', '/accelerator_requests/' + missing, '', 404),
        ('GET', '/accelerator_requests/not-a-uuid', '', 404),
        ('DELETE', '/accelerator_requests/' + missing, '', 404),
        ('POST', '/accelerator_requests', '', 404),
        ('PATCH', '/accelerator_requests/' + kept, '', 400),
        ('PATCH', '/accelerator_requests/' + missing, '', 404),
        ('PATCH', '/accelerator_requests/' + missing, '', 404)])
