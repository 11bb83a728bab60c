"""python-cyborgclient 3.x (with OSC 10.3) on devices, deployables and
attributes, against the served API with the fake driver's rows in the
database and the real conductor behind enable/disable.
"""

import json

import pytest
import sqlalchemy as sa

from cyborg.db import models
from tests import conductor_rpc
from tests import inventory_rows
from tests.functional.clients import cli
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401


def _run_all(service, env, commands):
    """The JSON output of each command, run side by side."""
    results = cli.run_all(service, env,
                          [(*args, '-f', 'json') for args in commands])
    for returncode, _, err in results:
        assert returncode == 0, err
    return [json.loads(out) for _, out, _ in results]


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
        disabled = cli.run(service, client_env, 'device', 'disable',
                           inventory.uuid)
        assert disabled.returncode == 0, disabled.stderr
        after_disable = cli.run_json(service, client_env, 'device', 'show',
                                     inventory.uuid)
        enabled = cli.run(service, client_env, 'device', 'enable',
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
    created = cli.run_json(service, client_env, 'device', 'attribute',
                           'create', str(deployable.id), 'function', 'gzip')

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

    duplicate = cli.run(service, client_env, 'device', 'attribute', 'create',
                        deployable.uuid, 'function', 'md5')
    assert duplicate.returncode != 0
    assert 'already has an attribute function' in duplicate.stderr

    deleted = cli.run(service, client_env, 'device', 'attribute', 'delete',
                      created['uuid'])
    assert deleted.returncode == 0, deleted.stderr
    assert 'Deleted attribute' in deleted.stdout
    with service.db.engine.connect() as conn:
        assert sorted(conn.execute(sa.select(models.Attribute.key)).scalars()
                      ) == ['rc', 'trait0']
