"""python-cyborgclient 3.x (with OSC 10.3) on devices, deployables and
attributes, against the served API with the fake driver's rows in the
database and the real conductor behind enable/disable.
"""

import json
import subprocess

import pytest
import sqlalchemy as sa

from cyborg.db import models
from tests import conductor_rpc
from tests import inventory_rows
from tests.functional.clients.conftest import VENV_BIN
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

CLI_TIMEOUT = 60


def _argv(service, *args):
    return [str(VENV_BIN / 'openstack'), '--os-auth-type', 'none',
            '--os-endpoint', service.url + '/v2', 'accelerator', *args]


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
    procs = [subprocess.Popen(_argv(service, *args, '-f', 'json'), env=env,
                              cwd=env['HOME'], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for args in commands]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


@pytest.fixture
def inventory(service):
    device, = inventory_rows.add_host(service.db.engine, 'host1',
                                      inventory_rows.fake_devices())
    return device


def api_calls(service):
    return [(e['method'], e['path'].split('/v2', 1)[1], e['query'],
             e['status']) for e in service.recorder.api_calls()]


def test_device_list_and_show(service, client_env, inventory):
    listed, long_listed, shown = _run_all(service, client_env, [
        ('device', 'list'), ('device', 'list', '--long'),
        ('device', 'show', inventory.uuid)])

    assert listed == [{
        'uuid': inventory.uuid, 'type': 'FPGA', 'vendor': 'abcd',
        'hostname': 'host1',
        'std_board_info': {'vendor_id': 'abcd', 'product_id': 'abcd'}}]
    assert long_listed[0]['model'] == 'FakeFPGA'
    # The client asks for 2.3 on every request: status is there.
    assert long_listed[0]['status'] == 'enabled'
    assert shown['uuid'] == inventory.uuid
    assert shown['status'] == 'enabled'
    assert shown['vendor_board_info'] == {}
    versions = {e['version'] for e in service.recorder.api_calls()}
    assert versions == {'accelerator 2.3'}


def test_device_disable_and_enable_reach_the_conductor(
        service, client_db, client_env, inventory,
        placement):  # noqa: F811
    conf = client_db[0]
    create_compute_node(placement.adapter(), 'host1')
    with conductor_rpc.conductor(conf, service.db, placement.client()):
        disabled = _run(service, client_env, 'device', 'disable',
                        inventory.uuid)
        assert disabled.returncode == 0, disabled.stderr
        after_disable = _json(service, client_env, 'device', 'show',
                              inventory.uuid)
        enabled = _run(service, client_env, 'device', 'enable',
                       inventory.uuid)
        assert enabled.returncode == 0, enabled.stderr

    assert after_disable['status'] == 'maintaining'
    with service.db.engine.connect() as conn:
        assert conn.execute(sa.select(models.Device.status)).scalar_one() == (
            'enabled')
    calls = api_calls(service)
    assert ('POST', '/devices/%s/disable' % inventory.uuid, '', 200) in calls
    assert ('POST', '/devices/%s/enable' % inventory.uuid, '', 200) in calls


def test_deployable_list_and_show(service, client_env, inventory):
    deployable = inventory.deployables['FakeDevice']

    listed, long_listed, shown = _run_all(service, client_env, [
        ('deployable', 'list'), ('deployable', 'list', '--long'),
        ('deployable', 'show', deployable.uuid)])

    assert listed == [{'uuid': deployable.uuid, 'name': 'FakeDevice',
                       'device_id': inventory.uuid}]
    assert long_listed[0]['num_accelerators'] == 16
    assert long_listed[0]['parent_id'] is None
    assert shown['uuid'] == deployable.uuid
    assert shown['name'] == 'FakeDevice'


def test_attribute_create_list_show_delete(service, client_env, inventory):
    deployable = inventory.deployables['FakeDevice']

    # The client takes the deployable's id as the database knows it.
    created = _json(service, client_env, 'device', 'attribute', 'create',
                    str(deployable.id), 'function', 'gzip')

    assert created['deployable_id'] == deployable.uuid
    assert (created['key'], created['value']) == ('function', 'gzip')
    post = [e for e in service.recorder.api_calls() if e['method'] == 'POST']
    assert json.loads(post[0]['body']) == {'attribute': {
        'deployable_id': str(deployable.id), 'key': 'function',
        'value': 'gzip'}}

    listed, shown = _run_all(service, client_env, [
        ('device', 'attribute', 'list'),
        ('device', 'attribute', 'show', created['uuid'])])
    assert sorted((a['key'], a['value']) for a in listed) == [
        ('function', 'gzip'), ('rc', 'FPGA'),
        ('trait0', 'CUSTOM_FAKE_DEVICE')]
    assert shown == created

    duplicate = _run(service, client_env, 'device', 'attribute', 'create',
                     deployable.uuid, 'function', 'md5')
    assert duplicate.returncode != 0
    assert 'already has an attribute function' in duplicate.stderr

    deleted = _run(service, client_env, 'device', 'attribute', 'delete',
                   created['uuid'])
    assert deleted.returncode == 0, deleted.stderr
    assert 'Deleted attribute' in deleted.stdout
    with service.db.engine.connect() as conn:
        assert sorted(conn.execute(sa.select(models.Attribute.key)).scalars()
                      ) == ['rc', 'trait0']
