"""Nova's own cyborg client module (PyPI nova) against the served API.

Nova turns each group of a device profile into a numbered request group
``device_profile_<i>``; the index must be the group's position as stored.
"""

import json
import pathlib
import subprocess
import sys

from cyborg import context as cyborg_context
from cyborg.db.api import device_profiles
from tests.functional.clients.conftest import MOUNT

PROBE = pathlib.Path(__file__).with_name('nova_probe.py')
FPGA_GROUPS = [
    {'resources:FPGA': '1',
     'trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10': 'required',
     'trait:CUSTOM_FUNCTION_GZIP': 'required',
     'accel:function_name': 'gzip'},
    {'resources:CUSTOM_ACCELERATOR_QAT': '2',
     'trait:CUSTOM_QAT_LEGACY': 'forbidden'},
]
# What Nova must build from FPGA_GROUPS; accel: keys are for us alone.
EXPECTED_REQUEST_GROUPS = [
    {'requester_id': 'device_profile_0',
     'resources': {'FPGA': 1},
     'required_traits': ['CUSTOM_FPGA_INTEL_PAC_ARRIA10',
                         'CUSTOM_FUNCTION_GZIP'],
     'forbidden_traits': []},
    {'requester_id': 'device_profile_1',
     'resources': {'CUSTOM_ACCELERATOR_QAT': 2},
     'required_traits': [],
     'forbidden_traits': ['CUSTOM_QAT_LEGACY']},
]


def _probe(tmp_path, env, cases):
    cases_path = tmp_path / 'cases.json'
    results_path = tmp_path / 'results.json'
    cases_path.write_text(json.dumps(cases))
    done = subprocess.run(
        [sys.executable, str(PROBE), str(cases_path), str(results_path)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(results_path.read_text())


def test_nova_reads_device_profile_request_groups(service, client_env,
                                                  tmp_path):
    context = cyborg_context.admin_context(service.db)
    # A second profile: if the name filter were not applied, Nova would
    # get two profiles and refuse them.
    device_profiles.create_profiles(context, [
        {'uuid': 'a7d1c0de-5b1e-4c55-8d3e-3f0b9a1e2c01', 'name': 'nova-fpga',
         'description': None, 'groups': FPGA_GROUPS},
        {'uuid': 'a7d1c0de-5b1e-4c55-8d3e-3f0b9a1e2c02', 'name': 'nova-gpu',
         'description': None, 'groups': [{'resources:PGPU': '1'}]},
    ])
    v2 = service.url + '/v2'
    # devstack-style: the catalog names the API below a mount point.
    mounted = service.url + MOUNT + '/v2'

    results = _probe(tmp_path, client_env, [
        {'name': 'nova-fpga', 'endpoint_override': v2},
        {'name': 'nova-fpga', 'catalog_url': mounted},
        {'name': 'nova-gpu', 'endpoint_override': v2},
        {'name': 'nova-missing', 'endpoint_override': v2},
    ])

    assert results[0] == {'groups': EXPECTED_REQUEST_GROUPS}
    assert results[1] == {'groups': EXPECTED_REQUEST_GROUPS}
    assert results[2] == {'groups': [
        {'requester_id': 'device_profile_0', 'resources': {'PGPU': 1},
         'required_traits': [], 'forbidden_traits': []}]}
    # An unknown name is an empty list, which Nova reports as its error.
    assert results[3]['error'] == 'DeviceProfileError'
    assert 'nova-missing' in results[3]['message']
    assert 'got nothing' in results[3]['message']

    calls = service.recorder.api_calls()
    assert [(c['method'], c['path'], c['query'], c['status'])
            for c in calls] == [
        ('GET', '/v2/device_profiles', 'name=nova-fpga', 200),
        ('GET', MOUNT + '/v2/device_profiles', 'name=nova-fpga', 200),
        ('GET', '/v2/device_profiles', 'name=nova-gpu', 200),
        ('GET', '/v2/device_profiles', 'name=nova-missing', 200),
    ]
    # Nova forwards the user's token and asks for no microversion.
    assert {(c['version'], c['token']) for c in calls} == {
        (None, 'user-token')}
