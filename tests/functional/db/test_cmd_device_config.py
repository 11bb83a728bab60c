"""``cyborg-device-config status``: each selected device's configuration
status read from the database, as text and as JSON, and its exit
status."""

import datetime
from importlib import metadata
import json
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.cmd import device_config
from cyborg.db import models
from cyborg.db.api import device_config_policies as policies_db
from cyborg.objects import inventory
from tests import inventory_rows
from tests.conftest import database_url_on

# The subject is the command, not the SQL.
database_url = database_url_on('sqlite')

WHEN = datetime.datetime(2025, 3, 1, 12, 30, 0)
STATUS = models.DeviceConfigStatus.__table__


def port(address):
    return inventory.Device(
        type='NIC', vendor='8086', model='X710', controlpath_type='PCI',
        controlpath_info=inventory.PCIAddress.parse(address).as_info(),
        std_board_info={'vendor_id': '8086', 'product_id': '1572',
                        'sriov_totalvfs': '64'})


def set_row(db, device_id, minutes, **values):
    with db.engine.begin() as connection:
        connection.execute(sa.update(STATUS).where(
            STATUS.c.device_id == device_id).values(
            created_at=WHEN,
            updated_at=WHEN + datetime.timedelta(minutes=minutes)
            if minutes is not None else None, **values))


@pytest.fixture
def fleet(db, admin_context):
    """Four X710 ports a policy wants 8 VFs on, one in each of four
    states; the uuid of the policy."""
    one = inventory_rows.add_host(db.engine, 'compute-1', [
        port('0000:3b:00.0'), port('0000:3b:00.1'), port('0000:3b:00.2')])
    [two] = inventory_rows.add_host(db.engine, 'compute-2',
                                    [port('0000:5e:00.0')])
    policy_uuid = str(uuidlib.uuid4())
    policies_db.create_policy(admin_context, {
        'uuid': policy_uuid, 'name': 'x710-vfs', 'priority': 5,
        'host_selector': ['compute-*'],
        'device_selector': {'vendor_id': '8086'}, 'kind': 'sriov_vfs',
        'settings': {'num_vfs': 8}, 'restore_on_delete': False})
    by_address = dict(zip(['3b:00.0', '3b:00.1', '3b:00.2'], one,
                          strict=True))
    set_row(db, by_address['3b:00.0'].id, 5, state='applied',
            applied_settings={'num_vfs': 8})
    set_row(db, by_address['3b:00.1'].id, 6, state='applying',
            applied_settings={'num_vfs': 4})
    set_row(db, by_address['3b:00.2'].id, None)  # pending, never updated
    set_row(db, two.id, 7, state='failed', applied_settings={'num_vfs': 4},
            failed_task='setup',
            message='write sriov_numvfs: Device or resource busy')
    return policy_uuid


@pytest.fixture
def config_file(tmp_path, db_url):
    path = tmp_path / 'cyborg.conf'
    path.write_text('[database]\nconnection = %s\n' % db_url)
    return str(path)


def run(capsys, config_file, *args):
    code = device_config.main(['--config-file', config_file, 'status',
                               *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_shows_each_device_and_counts_and_fails_on_a_failed_one(
        fleet, config_file, capsys):
    code, out, err = run(capsys, config_file)

    assert (code, err) == (1, '')
    assert out.splitlines() == [
        'HOST       DEVICE        POLICY    STATE     UPDATED               '
        'SETTINGS',
        'compute-1  0000:3b:00.0  x710-vfs  applied   2025-03-01T12:35:00Z  '
        'num_vfs=8',
        'compute-1  0000:3b:00.1  x710-vfs  applying  2025-03-01T12:36:00Z  '
        'num_vfs=8 (applied: num_vfs=4)',
        'compute-1  0000:3b:00.2  x710-vfs  pending   2025-03-01T12:30:00Z  '
        'num_vfs=8 (applied: none)',
        'compute-2  0000:5e:00.0  x710-vfs  failed    2025-03-01T12:37:00Z  '
        'num_vfs=8 (applied: num_vfs=4); setup failed: write '
        'sriov_numvfs: Device or resource busy',
        '4 devices: 1 pending, 0 draining, 1 applying, 1 applied, 1 failed',
    ]


def test_filters_narrow_the_devices_and_the_exit_status(
        fleet, config_file, capsys):
    code, out, _ = run(capsys, config_file, '--host', 'compute-1')
    assert code == 0
    assert out.splitlines()[-1] == (
        '3 devices: 1 pending, 0 draining, 1 applying, 1 applied, 0 failed')

    code, out, _ = run(capsys, config_file, '--state', 'applied',
                       '--policy', 'x710-vfs')
    assert code == 0
    assert [line.split()[1] for line in out.splitlines()[1:-1]] == [
        '0000:3b:00.0']

    code, out, _ = run(capsys, config_file, '--policy', fleet,
                       '--state', 'failed')
    assert code == 1
    assert out.splitlines()[-1] == (
        '1 device: 0 pending, 0 draining, 0 applying, 0 applied, 1 failed')


def test_json_carries_every_field(fleet, config_file, capsys):
    code, out, _ = run(capsys, config_file, '--json', '--host', 'compute-2')

    assert code == 1
    shown = json.loads(out)
    [device] = shown['devices']
    assert device.pop('device_uuid')
    assert device == {
        'hostname': 'compute-2', 'address': '0000:5e:00.0',
        'policy_name': 'x710-vfs', 'policy_uuid': fleet, 'state': 'failed',
        'wanted_settings': {'num_vfs': 8},
        'applied_settings': {'num_vfs': 4}, 'failed_task': 'setup',
        'message': 'write sriov_numvfs: Device or resource busy',
        'created_at': '2025-03-01T12:30:00Z',
        'updated_at': '2025-03-01T12:37:00Z'}
    assert shown['counts'] == {'pending': 0, 'draining': 0, 'applying': 0,
                               'applied': 0, 'failed': 1}


def test_an_unknown_policy_is_named(fleet, config_file, capsys):
    code, out, err = run(capsys, config_file, '--policy', 'no-such')

    assert (code, out) == (2, '')
    assert 'No device configuration policy named no-such exists.' in err


def test_nothing_selected_shows_only_the_counts_and_exits_0(
        db, config_file, capsys):
    assert run(capsys, config_file) == (
        0, '0 devices: 0 pending, 0 draining, 0 applying, 0 applied, '
           '0 failed\n', '')


def test_the_console_script_runs_main():
    [script] = metadata.entry_points(group='console_scripts',
                                     name='cyborg-device-config')
    assert script.load() is device_config.main
