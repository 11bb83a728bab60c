"""python-cyborgclient 3.x through the `openstack` CLI (OSC 10.3).

The CLI runs as a separate process with keystoneauth's ``none`` plugin
pointed at the served API, as an operator without Keystone would run it.
"""

import datetime
import json
import subprocess

from cyborg import context as cyborg_context
from cyborg.db.api import device_profiles
from tests.functional.clients.conftest import VENV_BIN

GROUPS = [
    {'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required'},
    {'resources:CUSTOM_GZIP': '2', 'accel:function_name': 'gzip'},
]
CLI_TIMEOUT = 60


def _argv(service, *args):
    return [str(VENV_BIN / 'openstack'), '--os-auth-type', 'none',
            '--os-endpoint', service.url + '/v2',
            'accelerator', 'device', 'profile', *args]


def _run(service, env, *args):
    return subprocess.run(_argv(service, *args), env=env, cwd=env['HOME'],
                          capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, check=False)


def _json(service, env, *args):
    done = _run(service, env, *args, '-f', 'json')
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _run_all(service, env, commands):
    """Independent commands side by side: each CLI start costs seconds."""
    procs = [subprocess.Popen(_argv(service, *args), env=env,
                              cwd=env['HOME'], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for args in commands]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
        results.append((proc.returncode, out, err))
    return results


def test_device_profile_create_list_show_delete(service, client_env):
    created = _json(service, client_env, 'create', 'cli-fpga',
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

    listed = _json(service, client_env, 'list')
    assert [(p['uuid'], p['name'], p['groups'], p['description'])
            for p in listed] == [(created['uuid'], 'cli-fpga', GROUPS, None)]

    # create already read the profile back by uuid; by name needs 2.2,
    # which the client's 2.3 header grants.
    assert _json(service, client_env, 'show', 'cli-fpga') == created

    deleted = _run(service, client_env, 'delete', 'cli-fpga')
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

    results = _run_all(service, client_env, [
        ('show', 'missing'),
        ('delete', 'missing'),
        ('create', 'bad-key', json.dumps([{'resources:FPGA': '1',
                                           'colour': 'blue'}])),
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
