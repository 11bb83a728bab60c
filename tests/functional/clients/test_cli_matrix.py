"""Every ``openstack accelerator`` command of both command-line clients,
and the test that runs it against the served API.

The commands are listed at run time (``openstack command list --group
accelerator``) from each client's venv, so a command that a new client
release adds shows up here as uncovered, and one it drops as a stale row:

- python-cyborgclient 3.0, paired with python-openstackclient 10.3 in the
  test venv (later OSC releases ship accelerator commands of their own
  and clash with it);
- python-openstackclient 10.5 alone, in a venv of its own (osc_venv.py).

One known exception: python-cyborgclient 3.0's ``deployable program``
never reaches the program request. It calls openstacksdk's deprecated
``update_deployable``, which calls itself until Python gives up; the test
below pins that down.
"""

import importlib
import json
import pathlib
import subprocess
import uuid

import pytest
import sqlalchemy as sa

from cyborg.db import models
from tests import inventory_rows
from tests.functional.clients import cli
from tests.functional.clients import osc_venv
from tests.functional.clients.conftest import VENV_BIN
from tests.glance_service import glance  # noqa: F401
from tests.glance_service import glance_service  # noqa: F401

osc_native = osc_venv.osc_native

CYBORGCLIENT = 'python-cyborgclient 3.0'
NATIVE = 'python-openstackclient 10.5'
PACKAGE = 'tests.functional.clients'

_ARQS = 'test_cli_arqs::'
_INVENTORY = 'test_cli_inventory::'
_PROFILES = 'test_openstack_cli::'
_NATIVE = 'test_osc_native::'

# command -> the test (module::function in this package) that runs it.
COVERED = {
    CYBORGCLIENT: {
        'accelerator arq bind': _ARQS + 'test_arq_bind_unbind_delete',
        'accelerator arq create': _ARQS + 'test_arq_create_list_show',
        'accelerator arq delete': _ARQS + 'test_arq_bind_unbind_delete',
        'accelerator arq list': _ARQS + 'test_arq_create_list_show',
        'accelerator arq show': _ARQS + 'test_arq_create_list_show',
        'accelerator arq unbind': _ARQS + 'test_arq_bind_unbind_delete',
        'accelerator deployable list':
            _INVENTORY + 'test_deployable_list_and_show',
        # The known exception: it crashes in the client.
        'accelerator deployable program':
            'test_cli_matrix::'
            'test_cyborgclient_deployable_program_crashes_before_patching',
        'accelerator deployable show':
            _INVENTORY + 'test_deployable_list_and_show',
        'accelerator device attribute create':
            _INVENTORY + 'test_attribute_create_list_show_delete',
        'accelerator device attribute delete':
            _INVENTORY + 'test_attribute_create_list_show_delete',
        'accelerator device attribute list':
            _INVENTORY + 'test_attribute_create_list_show_delete',
        'accelerator device attribute show':
            _INVENTORY + 'test_attribute_create_list_show_delete',
        'accelerator device disable':
            _INVENTORY + 'test_device_disable_and_enable_reach_the_conductor',
        'accelerator device enable':
            _INVENTORY + 'test_device_disable_and_enable_reach_the_conductor',
        'accelerator device list': _INVENTORY + 'test_device_list_and_show',
        'accelerator device profile create':
            _PROFILES + 'test_device_profile_create_list_show_delete',
        'accelerator device profile delete':
            _PROFILES + 'test_device_profile_create_list_show_delete',
        'accelerator device profile list':
            _PROFILES + 'test_device_profile_create_list_show_delete',
        'accelerator device profile show':
            _PROFILES + 'test_device_profile_create_list_show_delete',
        'accelerator device show': _INVENTORY + 'test_device_list_and_show',
    },
    NATIVE: {
        'accelerator arq bind': _NATIVE + 'test_arq_bind_unbind_delete',
        'accelerator arq create': _NATIVE + 'test_arq_create_list_show',
        'accelerator arq delete': _NATIVE + 'test_arq_bind_unbind_delete',
        'accelerator arq list': _NATIVE + 'test_arq_create_list_show',
        'accelerator arq show': _NATIVE + 'test_arq_create_list_show',
        'accelerator arq unbind': _NATIVE + 'test_arq_bind_unbind_delete',
        'accelerator deployable list':
            _NATIVE + 'test_deployable_list_and_show',
        'accelerator deployable program': _NATIVE + 'test_deployable_program',
        'accelerator deployable show':
            _NATIVE + 'test_deployable_list_and_show',
        'accelerator device attribute create':
            _NATIVE + 'test_attribute_create_list_show_delete',
        'accelerator device attribute delete':
            _NATIVE + 'test_attribute_create_list_show_delete',
        'accelerator device attribute list':
            _NATIVE + 'test_attribute_create_list_show_delete',
        'accelerator device attribute show':
            _NATIVE + 'test_attribute_create_list_show_delete',
        'accelerator device disable':
            _NATIVE + 'test_device_disable_and_enable_reach_the_conductor',
        'accelerator device enable':
            _NATIVE + 'test_device_disable_and_enable_reach_the_conductor',
        'accelerator device list': _NATIVE + 'test_device_list_and_show',
        'accelerator device profile create':
            _NATIVE + 'test_device_profile_create_list_show_delete',
        'accelerator device profile delete':
            _NATIVE + 'test_device_profile_create_list_show_delete',
        'accelerator device profile list':
            _NATIVE + 'test_device_profile_create_list_show_delete',
        'accelerator device profile show':
            _NATIVE + 'test_device_profile_create_list_show_delete',
        'accelerator device show': _NATIVE + 'test_device_list_and_show',
    },
}

# Commands that cannot work with this client release, whatever the
# service does; the covering test shows how they fail.
KNOWN_BROKEN = {(CYBORGCLIENT, 'accelerator deployable program')}


def _clean_env(tmp_path):
    return osc_venv.clean_env(HOME=str(tmp_path), PYTHONWARNINGS='ignore')


def _list_commands(openstack, tmp_path):
    """The accelerator commands ``openstack`` lists, by command group."""
    done = subprocess.run(
        [str(openstack), 'command', 'list', '--group', 'accelerator',
         '-f', 'json'], env=_clean_env(tmp_path), cwd=str(tmp_path),
        capture_output=True, text=True, timeout=cli.TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    return {group['Command Group']: group['Commands']
            for group in json.loads(done.stdout)}


def _owners(python, tmp_path):
    """``{command entry point: (distribution, version)}`` of the
    ``openstack.accelerator.v2`` group, as ``python``'s venv sees it."""
    script = (
        'import json\n'
        'from importlib import metadata\n'
        'print(json.dumps({ep.name: [ep.dist.name, ep.dist.version]\n'
        '    for ep in metadata.entry_points(\n'
        '        group="openstack.accelerator.v2")}))\n')
    done = subprocess.run([str(python), '-c', script],
                          env=_clean_env(tmp_path), cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=cli.TIMEOUT,
                          check=False)
    assert done.returncode == 0, done.stderr
    return {name: tuple(owner) for name, owner in json.loads(
        done.stdout).items()}


def _executables(osc_native):
    return {CYBORGCLIENT: VENV_BIN / 'openstack', NATIVE: osc_native}


@pytest.fixture(params=[CYBORGCLIENT, NATIVE])
def client(request, osc_native):
    return request.param, _executables(osc_native)[request.param]


def test_every_command_is_covered(client, tmp_path):
    name, openstack = client

    groups = _list_commands(openstack, tmp_path)

    assert list(groups) == ['openstack.accelerator.v2']
    listed = set(groups['openstack.accelerator.v2'])
    table = set(COVERED[name])
    assert (sorted(listed - table), sorted(table - listed)) == ([], []), (
        '%s: (commands no test covers, rows for commands it no longer has)'
        % name)


@pytest.mark.parametrize('client_name', [CYBORGCLIENT, NATIVE])
def test_the_covering_tests_exist(client_name):
    for command, test in sorted(COVERED[client_name].items()):
        module_name, function_name = test.split('::')
        module = importlib.import_module('%s.%s' % (PACKAGE, module_name))
        assert callable(getattr(module, function_name, None)), (
            '%s (%s) names a missing test %s' % (command, client_name, test))
    for broken_client, command in KNOWN_BROKEN:
        assert COVERED[broken_client][command].startswith(
            'test_cli_matrix::'), command


def test_each_client_brings_its_own_commands(osc_native, tmp_path):
    """The test venv's commands are python-cyborgclient 3.0's (OSC 10.3
    has none); the other venv's are OSC 10.5's, without cyborgclient."""
    def names(commands):
        return {c.replace(' ', '_') for c in commands}

    cyborgclient = _owners(VENV_BIN / 'python', tmp_path)
    native = _owners(pathlib.Path(osc_native).with_name('python'), tmp_path)

    assert set(cyborgclient.values()) == {('python-cyborgclient', '3.0.0')}
    assert set(native.values()) == {('python-openstackclient', '10.5.0')}
    assert set(cyborgclient) == names(COVERED[CYBORGCLIENT])
    assert set(native) == names(COVERED[NATIVE])


def test_cyborgclient_deployable_program_crashes_before_patching(
        service, client_env, glance):  # noqa: F811
    """python-cyborgclient 3.0 reads the deployable, looks the image up,
    then calls openstacksdk's ``update_deployable``, which calls itself
    until the recursion limit: the program request is never sent."""
    device, = inventory_rows.add_host(service.db.engine, 'host1',
                                      inventory_rows.fake_devices())
    deployable = device.deployables['FakeDevice']
    image = glance.upload_bitstream(b'bitstream', **{
        'bs-uuid': str(uuid.uuid4()), 'vendor': 'abcd', 'board': 'abcd'})
    env = dict(client_env, OS_IMAGE_ENDPOINT_OVERRIDE=glance.url)

    done = cli.run(service, env, 'deployable', 'program', deployable.uuid,
                   image['id'])

    assert done.returncode == 1
    assert done.stdout == ''
    assert 'maximum recursion depth exceeded' in done.stderr
    # Only the read of the deployable reached the service.
    assert [(e['method'], e['path'], e['status'])
            for e in service.recorder.api_calls()] == [
        ('GET', '/v2/deployables/' + deployable.uuid, 200)]
    with service.db.engine.connect() as conn:
        assert conn.execute(sa.select(models.Deployable.bitstream_id).where(
            models.Deployable.uuid == deployable.uuid)).scalar_one() is None
