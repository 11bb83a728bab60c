"""The accelerator request API on each database engine, binding through a
real conductor on oslo.messaging's in-process transport.

The fake driver's deployable (16 TEST_PCI handles) is stored as the
conductor stores a report; binds need no agent for it.
"""

import threading
import tracemalloc
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg import states
from cyborg.conductor import binding
from cyborg.db import models
from cyborg.db.api import arqs as arqs_db
from cyborg.db.api import device_profiles
from tests import arq_stack
from tests import db_servers
from tests.arq_stack import ARQS
from tests.arq_stack import NoAgent
from tests.arq_stack import bind_body
from tests.arq_stack import handles_in_use

# The in-process stack's fixtures (``tests.arq_stack``).
api = arq_stack.api
conductor = arq_stack.conductor
fpga_rp = arq_stack.fpga_rp
profile = arq_stack.profile
transport = arq_stack.transport


def as_role(*roles, project='p1'):
    return {'X-Roles': ','.join(roles), 'X-Project-Id': project,
            'X-User-Id': 'u-' + roles[0]}


MEMBER = as_role('member', 'reader')
OTHER_MEMBER = as_role('member', 'reader', project='p2')
ADMIN = as_role('admin', 'manager', 'member', 'reader', project='p0')


def create(api, name='fpga-dp', headers=MEMBER, **body):
    return api.post_json(ARQS, {'device_profile_name': name, **body},
                         headers=headers, expect_errors=True)


def wait_resolved(api, instance, headers=MEMBER):
    return arq_stack.wait_resolved(api, instance, headers=headers)


def test_create_makes_one_arq_per_unit_of_every_group(api, profile):
    created = create(api, device_profile_group_id=None)

    assert created.status_int == 201
    arqs = created.json['arqs']
    assert [a['device_profile_group_id'] for a in arqs] == [0, 0, 1]
    assert {a['state'] for a in arqs} == {'Initial'}
    assert {a['project_id'] for a in arqs} == {'p1'}
    assert all(a['device_profile_name'] == 'fpga-dp' for a in arqs)
    first = arqs[0]
    assert first['attach_handle_type'] == ''
    assert first['attach_handle_info'] == {}
    assert first['links'][0]['href'].endswith(ARQS + '/' + first['uuid'])
    listed = api.get(ARQS, headers=MEMBER).json['arqs']
    assert [a['uuid'] for a in listed] == [a['uuid'] for a in arqs]
    assert api.get(ARQS + '/' + first['uuid'], headers=MEMBER).json == first


def _remake_profile(api, name, groups):
    for arq in api.get(ARQS, headers=ADMIN).json['arqs']:
        api.delete(ARQS + '/' + arq['uuid'], headers=ADMIN)
    api.delete('/v2/device_profiles/' + name, headers=ADMIN)
    if groups is not None:
        api.post_json('/v2/device_profiles', [{'name': name,
                                                'groups': groups}],
                      headers=ADMIN)


@pytest.mark.parametrize(
    'database_url', [e for e in db_servers.ENGINES if e != 'sqlite'],
    indirect=True)
def test_a_known_profile_makes_its_arqs_in_one_statement(api, profile,
                                                         sql_counter):
    create(api)
    sql_counter.reset()

    again = create(api)

    assert again.status_int == 201
    assert [a['device_profile_group_id'] for a in again.json['arqs']] == [
        0, 0, 1]
    [insert] = sql_counter.of_this_thread()
    assert insert.lstrip().upper().startswith('INSERT')
    rows = api.get(ARQS, headers=MEMBER).json['arqs']
    assert len(rows) == 6 and len({a['uuid'] for a in rows}) == 6


def test_a_profile_made_again_under_its_name_is_read_again(api, profile):
    assert create(api).status_int == 201
    # Same name, another uuid (and, on SQLite, perhaps the same id).
    _remake_profile(api, 'fpga-dp', [{'resources:FPGA': '1'}] * 2)

    again = create(api)

    assert again.status_int == 201
    assert [a['device_profile_group_id'] for a in again.json['arqs']] == [
        0, 1]


def test_a_known_profile_since_deleted_is_404(api, profile):
    assert create(api).status_int == 201
    _remake_profile(api, 'fpga-dp', None)

    gone = create(api)

    assert gone.status_int == 404
    assert "No device profile named 'fpga-dp'" in gone.json['error_message']
    assert api.get(ARQS, headers=ADMIN).json['arqs'] == []


@pytest.mark.parametrize('name', ['', 'no-such-profile', '!@#$%^&*()=-[]'])
def test_create_from_an_unknown_or_empty_profile_is_404(api, profile, name):
    assert create(api, name).status_int == 404


def test_bind_then_unbind_then_delete(api, db, profile, fpga_rp,
                                      conductor):
    arqs = create(api).json['arqs']
    instance = str(uuid.uuid4())

    patched = api.patch_json(ARQS, bind_body(arqs, fpga_rp, instance),
                             headers=MEMBER)

    assert patched.status_int == 202
    resolved = wait_resolved(api, instance)
    assert {a['state'] for a in resolved} == {'Bound'}
    assert {a['attach_handle_type'] for a in resolved} == {'TEST_PCI'}
    assert len({a['attach_handle_uuid'] for a in resolved}) == 3
    assert set(resolved[0]['attach_handle_info']) == {
        'domain', 'bus', 'device', 'function'}
    assert handles_in_use(db) == 3

    unbound = api.patch_json(ARQS + '/' + arqs[0]['uuid'], {arqs[0]['uuid']: [
        {'op': 'remove', 'path': p} for p in
        ('/hostname', '/device_rp_uuid', '/instance_uuid')]}, headers=MEMBER)

    assert unbound.status_int == 202
    one = api.get(ARQS + '/' + arqs[0]['uuid'], headers=MEMBER).json
    assert one['state'] == 'Unbound' and one['instance_uuid'] is None
    assert one['attach_handle_type'] == ''
    assert handles_in_use(db) == 2

    deleted = api.delete(ARQS, {'instance': instance}, headers=MEMBER)

    assert deleted.status_int == 204
    assert handles_in_use(db) == 0
    left = api.get(ARQS, headers=MEMBER).json['arqs']
    assert [a['uuid'] for a in left] == [arqs[0]['uuid']]
    # Deleting by instance again is no error.
    assert api.delete(ARQS, {'instance': instance},
                      headers=MEMBER).status_int == 204


def test_bind_to_a_provider_of_another_host_fails(api, db, profile, fpga_rp,
                                                  conductor):
    arqs = create(api).json['arqs']
    instance = str(uuid.uuid4())

    api.patch_json(ARQS, bind_body(arqs, fpga_rp, instance, 'host2'),
                   headers=MEMBER)

    resolved = wait_resolved(api, instance)
    assert {a['state'] for a in resolved} == {'BindFailed'}
    assert handles_in_use(db) == 0


def test_a_deployable_gives_each_handle_once(api, db, admin_context,
                                             fpga_rp, conductor):
    device_profiles.create_profiles(admin_context, [
        {'uuid': str(uuid.uuid4()), 'name': 'big', 'description': None,
         'groups': [{'resources:FPGA': '5'}]}])
    instances = [str(uuid.uuid4()) for _ in range(4)]
    for instance in instances:
        arqs = create(api, 'big').json['arqs']
        api.patch_json(ARQS, bind_body(arqs, fpga_rp, instance),
                       headers=MEMBER)

    states_seen = [a['state'] for i in instances
                   for a in wait_resolved(api, i)]
    assert states_seen.count('Bound') == 16
    assert states_seen.count('BindFailed') == 4
    assert handles_in_use(db) == 16
    with db.engine.connect() as conn:
        given = conn.execute(sa.select(
            models.ExtendedAcceleratorRequest.attach_handle_id).where(
            models.ExtendedAcceleratorRequest.attach_handle_id.is_not(None))
        ).scalars().all()
    assert len(given) == len(set(given)) == 16


def test_resolved_listing_is_423_while_a_bind_runs(api, profile, fpga_rp,
                                                   conf, db, transport):
    # A conductor that holds the bind until told to go on.
    go = threading.Event()

    class SlowBinder(binding.Binder):
        def bind(self, context, arq_uuids):
            go.wait(10)
            super().bind(context, arq_uuids)

    with arq_stack.serving_conductor(transport, db,
                                     SlowBinder(conf, NoAgent())):
        arqs = create(api).json['arqs']
        instance = str(uuid.uuid4())
        api.patch_json(ARQS, bind_body(arqs, fpga_rp, instance),
                       headers=MEMBER)

        waiting = api.get(ARQS, {'instance': instance,
                                 'bind_state': 'resolved'},
                          headers=MEMBER, expect_errors=True)
        go.set()

        assert waiting.status_int == 423
        assert 'still being bound' in waiting.json['error_message']
        assert {a['state'] for a in wait_resolved(api, instance)} == {
            'Bound'}


def test_other_projects_see_nothing(api, profile, fpga_rp, conductor):
    arq = create(api).json['arqs'][0]
    item = ARQS + '/' + arq['uuid']

    assert api.get(ARQS, headers=OTHER_MEMBER).json['arqs'] == []
    assert api.get(item, headers=OTHER_MEMBER,
                   expect_errors=True).status_int == 404
    bound = api.patch_json(ARQS, bind_body([arq], fpga_rp,
                                           str(uuid.uuid4())),
                           headers=OTHER_MEMBER, expect_errors=True)
    assert bound.status_int == 404
    assert api.delete(item, headers=OTHER_MEMBER,
                      expect_errors=True).status_int == 404
    assert api.get(item, headers=MEMBER).json['state'] == 'Initial'
    # An administrator sees every project's.
    assert [a['uuid'] for a in api.get(ARQS, headers=ADMIN).json['arqs']
            ] == [a['uuid'] for a in api.get(ARQS, headers=MEMBER).json[
                'arqs']]


def test_project_id_in_a_bind_needs_2_1_and_an_admin(api, profile, fpga_rp,
                                                     conductor):
    arq = create(api).json['arqs'][0]
    body = bind_body([arq], fpga_rp, str(uuid.uuid4()))
    body[arq['uuid']].append({'op': 'add', 'path': '/project_id',
                              'value': 'p9'})
    v21 = {'OpenStack-API-Version': 'accelerator 2.1'}

    too_low = api.patch_json(ARQS, body, headers=ADMIN, expect_errors=True)
    not_admin = api.patch_json(ARQS, body, headers={**MEMBER, **v21},
                               expect_errors=True)
    assert (too_low.status_int, not_admin.status_int) == (406, 403)

    done = api.patch_json(ARQS, body, headers={**ADMIN, **v21})

    assert done.status_int == 202
    assert api.get(ARQS + '/' + arq['uuid'],
                   headers=ADMIN).json['project_id'] == 'p9'


def test_illegal_transitions_are_409(api, profile, fpga_rp, conductor):
    arq = create(api).json['arqs'][0]
    unbind = {arq['uuid']: [{'op': 'remove', 'path': '/hostname'}]}

    refused = api.patch_json(ARQS, unbind, headers=MEMBER,
                             expect_errors=True)

    assert refused.status_int == 409
    assert 'Initial' in refused.json['error_message']
    assert refused.json['code'] == states.InvalidTransition.code


def stored_arqs(db):
    """{uuid: (state, instance_uuid)} of every ARQ."""
    table = models.ExtendedAcceleratorRequest
    with db.engine.connect() as conn:
        return {r.uuid: (r.state, r.instance_uuid) for r in conn.execute(
            sa.select(table.uuid, table.state, table.instance_uuid))}


def earlier_bind(instance, arq_uuid):
    return ('Instance %s already has accelerator request %s from an earlier '
            'bind; unbind or delete that first.' % (instance, arq_uuid))


def test_a_second_bind_of_an_instance_is_409(api, db, profile, fpga_rp,
                                             conductor):
    first, second = (create(api).json['arqs'] for _ in range(2))
    instance = str(uuid.uuid4())
    api.patch_json(ARQS, bind_body(first, fpga_rp, instance),
                   headers=MEMBER)
    before = stored_arqs(db)

    again = api.patch_json(ARQS, bind_body(second, fpga_rp, instance),
                           headers=MEMBER, expect_errors=True)

    assert again.status_int == 409
    assert again.json['error_message'] == earlier_bind(instance,
                                                       first[0]['uuid'])
    assert again.json['code'] == 'cyborg.arq.instance_already_bound'
    assert stored_arqs(db) == before
    assert {before[a['uuid']] for a in second} == {('Initial', None)}


def test_only_the_projects_own_earlier_binds_count(api, db, profile,
                                                  fpga_rp, conductor):
    theirs = create(api).json['arqs']
    first, second = (create(api, headers=OTHER_MEMBER).json['arqs']
                     for _ in range(2))
    instance = str(uuid.uuid4())
    api.patch_json(ARQS, bind_body(theirs, fpga_rp, instance),
                   headers=MEMBER)

    # p1's ARQs of the instance neither stop p2's bind nor are named.
    mine = api.patch_json(ARQS, bind_body(first, fpga_rp, instance),
                          headers=OTHER_MEMBER)
    # Both projects' binds settled: what follows compares the rows.
    wait_resolved(api, instance)
    wait_resolved(api, instance, headers=OTHER_MEMBER)
    before = stored_arqs(db)
    again = api.patch_json(ARQS, bind_body(second, fpga_rp, instance),
                           headers=OTHER_MEMBER, expect_errors=True)

    assert mine.status_int == 202
    assert again.status_int == 409
    assert again.json['error_message'] == earlier_bind(instance,
                                                       first[0]['uuid'])
    assert not any(a['uuid'] in again.json['error_message']
                   for a in theirs)
    assert stored_arqs(db) == before


def test_two_binds_of_one_instance_take_turns(api, db, profile, fpga_rp):
    first, second = (create(api).json['arqs'] for _ in range(2))
    instance = str(uuid.uuid4())
    holding, release = threading.Event(), threading.Event()
    outcome = {}

    def bind_and_hold():
        # The first bind's transaction stays open until released.
        context = cyborg_context.admin_context(db, project_id='p1')
        with db.writer(context):
            arqs_db.start_binding(context, bind_arqs(first, fpga_rp,
                                                     instance), 'p1')
            holding.set()
            release.wait(10)

    def bind_second():
        context = cyborg_context.admin_context(db, project_id='p1')
        try:
            arqs_db.start_binding(context, bind_arqs(second, fpga_rp,
                                                     instance), 'p1')
        except exception.Conflict as e:
            outcome['refused'] = e
        else:
            outcome['bound'] = True

    holder = threading.Thread(target=bind_and_hold)
    holder.start()
    assert holding.wait(10)
    contender = threading.Thread(target=bind_second)
    contender.start()
    contender.join(0.5)
    still_waiting = contender.is_alive()
    release.set()
    holder.join(10)
    contender.join(30)

    assert still_waiting
    assert list(outcome) == ['refused']
    assert outcome['refused'].status == 409
    assert str(outcome['refused']) == earlier_bind(instance,
                                                   first[0]['uuid'])
    stored = stored_arqs(db)
    assert {stored[a['uuid']] for a in first} == {('BindStarted', instance)}
    assert {stored[a['uuid']] for a in second} == {('Initial', None)}


def bind_arqs(arqs, rp, instance):
    """What ``start_binding`` takes to bind ``arqs`` to ``instance``."""
    return {a['uuid']: {'hostname': arq_stack.HOST, 'device_rp_uuid': rp,
                        'instance_uuid': instance} for a in arqs}


def test_bind_is_all_or_nothing(api, profile, fpga_rp, conductor):
    arqs = create(api).json['arqs']
    body = bind_body(arqs, fpga_rp, str(uuid.uuid4()))
    body[str(uuid.uuid4())] = body[arqs[0]['uuid']]

    refused = api.patch_json(ARQS, body, headers=MEMBER, expect_errors=True)

    assert refused.status_int == 404
    assert {a['state'] for a in api.get(ARQS, headers=MEMBER).json['arqs']
            } == {'Initial'}


def test_listing_takes_one_query_for_any_number(api, profile, sql_counter):
    create(api)
    sql_counter.reset()
    api.get(ARQS, headers=MEMBER)
    few = len(sql_counter)
    for _ in range(10):
        create(api)
    sql_counter.reset()

    listed = api.get(ARQS, headers=MEMBER).json['arqs']

    assert len(listed) == 33
    assert len(sql_counter) == few == 1


def test_an_arq_that_holds_nothing_is_deleted_in_one_statement(
        api, db, profile, fpga_rp, conductor, sql_counter):
    arqs = create(api).json['arqs']
    item = ARQS + '/' + arqs[0]['uuid']
    sql_counter.reset()

    assert api.delete(item, headers=MEMBER).status_int == 204

    assert len(sql_counter.of_this_thread()) == 1
    assert api.get(item, headers=MEMBER, expect_errors=True).status_int == 404
    assert api.delete(item, headers=MEMBER,
                      expect_errors=True).status_int == 404
    # One bound to an instance holds a handle: deleting it frees that.
    instance = str(uuid.uuid4())
    api.patch_json(ARQS, bind_body(arqs[1:], fpga_rp, instance),
                   headers=MEMBER)
    assert {a['state'] for a in wait_resolved(api, instance)} == {'Bound'}
    assert handles_in_use(db) == 2

    assert api.delete(ARQS + '/' + arqs[1]['uuid'],
                      headers=MEMBER).status_int == 204

    assert handles_in_use(db) == 1
    assert [a['uuid'] for a in api.get(ARQS, headers=MEMBER).json['arqs']
            ] == [arqs[2]['uuid']]


def arq_rows(db):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(
            models.ExtendedAcceleratorRequest)).scalar_one()


@pytest.mark.parametrize('groups,total', [
    ([{'resources:FPGA': '30000000'}], 30000000),
    ([{'resources:FPGA': '999999999'}, {'resources:FPGA': '999999999'}],
     1999999998),
    ([{'resources:FPGA': '33'}, {'resources:FPGA': '32'}], 65)])
def test_a_profile_stored_before_the_cap_is_refused_before_expansion(
        api, db, admin_context, groups, total):
    # Stored as an older release would have: no cap on the counts.
    arq_stack.make_profile(admin_context, 'old-big', groups)

    tracemalloc.start()
    try:
        refused = create(api, 'old-big')
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert refused.status_int == 400
    assert refused.json['error_message'] == (
        'Device profile old-big asks for %d accelerators; one request may '
        'create at most 64 accelerator requests.' % total)
    assert arq_rows(db) == 0
    # One unit per accelerator would take hundreds of MiB.
    assert peak < 8 * 2 ** 20
