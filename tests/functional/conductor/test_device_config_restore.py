"""A policy deleted with ``restore_on_delete``: its devices are put back
as discovered by the rollout (drained, the teardown playbook alone, a new
discovery), with the rig of ``test_device_config_rollout``. The SQL is
that of the rollout, which runs on every engine: one is enough here."""

import os

import pytest
import sqlalchemy as sa

from cyborg.db import models
from tests.functional.conductor import test_device_config_rollout
from tests.functional.conductor.test_device_config_rollout import ADMIN
from tests.functional.conductor.test_device_config_rollout import PF
from tests.functional.conductor.test_device_config_rollout import POLICIES
from tests.functional.conductor.test_device_config_rollout import handles
from tests.functional.conductor.test_device_config_rollout import nic_inventory
from tests.functional.conductor.test_device_config_rollout import set_in_use
from tests.functional.conductor.test_device_config_rollout import status
from tests.functional.services.conftest import vhost_url  # noqa: F401
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

rig = test_device_config_rollout.rig
pytestmark = pytest.mark.parametrize('database_url', ['sqlite'],
                                     indirect=True)


def applied_policy(rig, admin_context, restore):
    made = rig.api.post_json(POLICIES, {
        'name': 'eight-vfs', 'kind': 'sriov_vfs',
        'devices': {'vendor_id': '8086', 'pci_addresses': [PF]},
        'settings': {'num_vfs': 8}, 'restore_on_delete': restore},
        headers=ADMIN).json
    rig.rollout.run_pass(admin_context)
    assert status(rig.api, made['uuid'])['state'] == 'applied'
    assert len(handles(rig.db)) == 8
    return '%s/%s' % (POLICIES, made['uuid'])


def config_rows(db):
    with db.engine.connect() as connection:
        return (connection.execute(sa.select(
                    sa.func.count()).select_from(
                    models.DeviceConfigPolicy)).scalar_one(),
                connection.execute(sa.select(
                    sa.func.count()).select_from(
                    models.DeviceConfigStatus)).scalar_one())


def test_a_restoring_delete_drains_tears_down_and_forgets_the_device(
        rig, admin_context, placement):  # noqa: F811
    api, kernel = rig.api, rig.kernel
    item = applied_policy(rig, admin_context, restore=True)
    uuid = item.rsplit('/', 1)[1]
    in_use = handles(rig.db)[0].id
    set_in_use(rig.db, in_use, True)

    assert api.delete(item, headers=ADMIN).status_int == 202

    # Neither listed nor read; its status shows the device to restore.
    assert api.get(POLICIES, headers=ADMIN).json[
        'device_config_policies'] == []
    assert api.get(item, headers=ADMIN, expect_errors=True).status_int == 404
    row = status(api, uuid)
    assert (row['state'], row['wanted_settings'],
            row['applied_settings']) == ('pending', None, {'num_vfs': 8})

    # Drained like any change: the VF in use keeps it untouched.
    rig.rollout.run_pass(admin_context)
    assert status(api, uuid)['state'] == 'draining'
    assert nic_inventory(placement.adapter()) == (8, 8)
    assert kernel.numvfs_after == [('setup', '8')]

    # The teardown fails (the kernel does not show the count): the
    # device stays out of scheduling, the task named.
    os.unlink(kernel.numvfs_file())
    os.mkdir(kernel.numvfs_file())
    set_in_use(rig.db, in_use, False)
    rig.rollout.run_pass(admin_context)

    row = status(api, uuid)
    assert (row['state'], row['failed_task']) == ('failed', 'Remove the VFs')
    assert 'cannot read' in row['message']
    assert nic_inventory(placement.adapter()) == (8, 8)

    # Mended, then deleted again: the restore is tried again.
    os.rmdir(kernel.numvfs_file())
    with open(kernel.numvfs_file(), 'w') as f:
        f.write('8\n')
    assert api.delete(item, headers=ADMIN).status_int == 202
    assert status(api, uuid)['state'] == 'pending'
    rig.rollout.run_pass(admin_context)

    # The teardown alone, while reserved; the VFs are gone from the
    # devices and Placement, and so are the status and the policy.
    assert kernel.numvfs_after[-1] == ('teardown', '0')
    assert [action for action, _ in kernel.numvfs_after] == [
        'setup', 'teardown', 'teardown']
    assert kernel.offered_while_applying[-1] == (8, 8)
    assert handles(rig.db) == []
    assert nic_inventory(placement.adapter()) is None
    assert config_rows(rig.db) == (0, 0)
    assert api.get(item + '/status', headers=ADMIN,
                   expect_errors=True).status_int == 404

    rig.rollout.run_pass(admin_context)
    assert len(kernel.numvfs_after) == 3


def test_without_restore_the_device_keeps_what_was_applied(
        rig, admin_context, placement):  # noqa: F811
    item = applied_policy(rig, admin_context, restore=False)

    assert rig.api.delete(item, headers=ADMIN).status_int == 204
    rig.rollout.run_pass(admin_context)

    assert rig.kernel.numvfs_after == [('setup', '8')]
    assert len(handles(rig.db)) == 8
    assert nic_inventory(placement.adapter()) == (8, 0)
    assert config_rows(rig.db) == (0, 0)
