"""python-cyborgclient 3.x through the `openstack` CLI (OSC 10.3).

The CLI runs as a separate process with keystoneauth's ``none`` plugin
pointed at the served API, as an operator without Keystone would run it.
"""

import datetime
import json

from cyborg import context as cyborg_context
from cyborg.db.api import device_profiles
from tests.functional.clients import cli

GROUPS = [
    {'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required'},
    {'resources:CUSTOM_GZIP': '2', 'accel:function_name': 'gzip'},
]


def _profile(service, env, *args):
    return cli.run_json(service, env, 'device', 'profile', *args)


def test_device_profile_create_list_show_delete(service, client_env):
    created = _profile(service, client_env, 'create', 'cli-fpga',
                    json.dumps(GROUPS))

    assert created['name'] == 'cli-fpga'
    assert created['groups'] == GROUPS
    assert created['description'] is None
    assert created['updated_at'] is None
    assert datetime.datetime.fromisoformat(created['created_at']).tzinfo
    stored = service.profiles()['cli-fpga']
    assert stored.uuid == created['uuid']
    assert stored.profile_json['groups'] == GROUPS
    assert stored.description is None

    listed = _profile(service, client_env, 'list')
    assert [(p['uuid'], p['name'], p['groups'], p['description'])
            for p in listed] == [(created['uuid'], 'cli-fpga', GROUPS, None)]

    # create already read the profile back by uuid; by name needs 2.2,
    # which the client's 2.3 header grants.
    assert _profile(service, client_env, 'show', 'cli-fpga') == created

    deleted = cli.run(service, client_env, 'device', 'profile', 'delete',
                      'cli-fpga')
    assert deleted.returncode == 0, deleted.stderr
    assert service.profiles() == {}

    exchanges = service.recorder.exchanges
    # Version discovery comes first and carries no token.
    assert (exchanges[0]['method'], exchanges[0]['path']) == ('GET', '/v2')
    assert exchanges[0]['token'] is None
    calls = service.recorder.api_calls()
    assert [(c['method'], c['path'], c['status']) for c in calls] == [
        ('POST', '/v2/device_profiles', 201),
        ('GET', '/v2/device_profiles/' + created['uuid'], 200),
        ('GET', '/v2/device_profiles', 200),
        ('GET', '/v2/device_profiles/cli-fpga', 200),
        ('DELETE', '/v2/device_profiles/cli-fpga', 204),
    ]
    assert {c['version'] for c in calls} == {'accelerator 2.3'}
    assert json.loads(calls[0]['body']) == [
        {'name': 'cli-fpga', 'groups': GROUPS, 'description': None}]


def test_device_profile_errors_fail_the_command(service, client_env):
    # A bystander that no failed command may touch.
    context = cyborg_context.admin_context(service.db)
    device_profiles.create_profiles(context, [{
        'uuid': '1b2e7f34-52a6-4c4b-9bd6-0d5c8a7b1f10', 'name': 'bystander',
        'description': 'kept', 'groups': [{'resources:PGPU': '1'}]}])

    results = cli.run_all(service, client_env, [
        ('device', 'profile', 'show', 'missing'),
        ('device', 'profile', 'delete', 'missing'),
        ('device', 'profile', 'create', 'bad-key',
         json.dumps([{'resources:FPGA': '1', 'colour': 'blue'}])),
    ])

    # Every command must fail: a zero exit here would hide the error from
    # scripts.
    assert [rc for rc, _, _ in results] == [1, 1, 1]
    assert 'missing' in results[0][2]
    assert 'missing' in results[1][2]
    assert 'BadRequestException' in results[2][2]
    # The service's sentence reaches the operator, not just "Bad Request".
    assert "Group 0 has the key 'colour'" in results[2][2]
    calls = sorted((c['method'], c['path'], c['status'])
                   for c in service.recorder.api_calls())
    assert calls == [
        ('DELETE', '/v2/device_profiles/missing', 404),
        ('GET', '/v2/device_profiles/missing', 404),
        ('POST', '/v2/device_profiles', 400),
    ]
    profiles = service.profiles()
    assert list(profiles) == ['bystander']
    assert profiles['bystander'].description == 'kept'
