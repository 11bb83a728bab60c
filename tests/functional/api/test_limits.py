"""GET /v2/limits without limits configured (``[quota] driver = noop``):
usage counted as creation would count it, every limit -1, creations
never refused. The enforced limits run against a real Keystone in
``tests/functional/keystone/test_limits.py``."""

from tests import arq_stack
from tests.arq_stack import ARQS

LIMITS = '/v2/limits'
V28 = {'OpenStack-API-Version': 'accelerator 2.8'}
ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin-project',
         **V28}
MEMBER = {'X-Roles': 'member,reader', 'X-Project-Id': 'demo', **V28}
READER = {'X-Roles': 'reader', 'X-Project-Id': 'demo', **V28}
MIG = [{'resources:CUSTOM_MIG_COMPUTE_SLICE': '3',
        'resources:CUSTOM_MIG_MEMORY_SLICE': '4'}]


def _rows(response):
    return {r['resource_name']: (r['limit'], r['usage'])
            for r in response.json['limits']}


def test_usage_counts_arqs_their_classes_and_profiles(api, admin_context):
    arq_stack.make_profile(admin_context)  # FPGA 2 + FPGA 1: three ARQs
    arq_stack.make_profile(admin_context, 'mig', MIG)  # one ARQ, 7 slices
    for name in (arq_stack.PROFILE, arq_stack.PROFILE, 'mig'):
        api.post_json(ARQS, {'device_profile_name': name}, headers=MEMBER,
                      status=201)
    api.post_json(ARQS, {'device_profile_name': 'mig'}, headers=ADMIN,
                  status=201)
    shown = api.get(LIMITS, headers=READER, status=200)
    assert shown.json['project_id'] == 'demo'
    assert shown.json['enforced'] is False
    assert _rows(shown) == {
        'accelerator_requests': (-1, 7),
        'class:FPGA': (-1, 6),
        'class:CUSTOM_MIG_COMPUTE_SLICE': (-1, 3),
        'class:CUSTOM_MIG_MEMORY_SLICE': (-1, 4),
        'device_profile:%s' % arq_stack.PROFILE: (-1, 6),
        'device_profile:mig': (-1, 1)}
    # Sorted by name.
    names = [r['resource_name'] for r in shown.json['limits']]
    assert names == sorted(names)
    # Deleting an ARQ gives its share back.
    mine = api.get(ARQS, headers=MEMBER).json['arqs']
    api.delete(ARQS + '/' + mine[0]['uuid'], headers=MEMBER, status=204)
    assert _rows(api.get(LIMITS, headers=READER))['accelerator_requests'] \
        == (-1, 6)

    admin_view = api.get(LIMITS, headers=ADMIN, params={
        'project_id': 'demo'}, status=200)
    assert admin_view.json['limits'] == api.get(
        LIMITS, headers=READER).json['limits']
    assert _rows(api.get(LIMITS, headers=ADMIN)) == {
        'accelerator_requests': (-1, 1), 'class:CUSTOM_MIG_COMPUTE_SLICE':
        (-1, 3), 'class:CUSTOM_MIG_MEMORY_SLICE': (-1, 4),
        'device_profile:mig': (-1, 1)}


def test_only_an_admin_reads_another_projects_limits(api):
    refused = api.get(LIMITS, headers=MEMBER, params={
        'project_id': 'other'}, status=403)
    assert refused.json['code'] == 'cyborg.policy.forbidden'
    assert 'cyborg:limits:get' in refused.json['error_message']
    assert api.get(LIMITS, headers=ADMIN, params={
        'project_id': 'other'}, status=200).json['project_id'] == 'other'


def test_a_bad_project_id_is_400_and_below_2_8_the_path_is_404(api):
    for value in ('', 'x' * 256, 'a\nb'):
        bad = api.get(LIMITS, headers=ADMIN, params={'project_id': value},
                      status=400)
        assert bad.json['code'] == 'cyborg.limits.invalid_project'
    twice = api.get(LIMITS + '?project_id=a&project_id=b', headers=ADMIN,
                    status=400)
    assert 'given once' in twice.json['error_message']
    old = {**MEMBER, 'OpenStack-API-Version': 'accelerator 2.7'}
    assert api.get(LIMITS, headers=old, status=404)
