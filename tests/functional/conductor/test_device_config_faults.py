"""What goes wrong during a device configuration, on MariaDB (the SQL is
that of ``test_device_config_rollout``, which runs on every engine, as
does its failing playbook): a bind that meets a draining device, an
agent that does not answer, a policy changed under a pass."""

import pytest
import sqlalchemy as sa

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import binding
from cyborg.db import models
from tests.conftest import database_url_on
from tests.functional.conductor import test_device_config_rollout
from tests.functional.conductor.test_device_config_rollout import HOST
from tests.functional.conductor.test_device_config_rollout import create_policy
from tests.functional.conductor.test_device_config_rollout import nic_inventory
from tests.functional.conductor.test_device_config_rollout import status
from tests.functional.services.conftest import vhost_url  # noqa: F401
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

database_url = database_url_on('mysql')
rig = test_device_config_rollout.rig


def test_a_bind_on_a_draining_device_is_refused(rig, db, admin_context):
    """A bind whose allocation Placement gave before the drain finds the
    device draining and takes none of its handles."""
    made = create_policy(rig.api)
    with rig.db.engine.begin() as connection:
        connection.execute(sa.update(models.DeviceConfigStatus).values(
            state='draining'))
    binder = binding.Binder(rig.conf, agent_rpcapi.AgentAPI(rig.transport),
                            owner='conductor-1')
    deployable = {'id': _nic_deployable(db), 'name': 'nic'}
    with pytest.raises(binding.BindRefused, match='its configuration is '
                       'draining'):
        binder._check_not_configuring(admin_context, deployable)
    assert status(rig.api, made['uuid'])['state'] == 'draining'


def _nic_deployable(db):
    with db.engine.connect() as connection:
        return connection.execute(sa.select(models.Deployable.id).where(
            models.Deployable.resource_class == 'CUSTOM_NIC')).scalar_one()


def test_an_agent_that_does_not_answer_is_asked_again(
        rig, admin_context, placement):  # noqa: F811
    rig.rollout.agent = agent_rpcapi.AgentAPI(rig.transport, timeout=2,
                                              config_timeout=2)
    made = create_policy(rig.api)

    # No agent answers: the device stays applying, out of scheduling.
    rig.stop_agents()
    rig.rollout.run_pass(admin_context)
    assert status(rig.api, made['uuid'])['state'] == 'applying'
    assert nic_inventory(placement.adapter()) == (4, 4)
    assert rig.kernel.numvfs_after == []

    # Back: the next pass asks again and the change is made. (The agent
    # also finds the first request waiting for it: one of the two runs
    # changes the count, the other finds it made.)
    rig.rollout.agent = agent_rpcapi.AgentAPI(rig.transport, timeout=60,
                                              config_timeout=120)
    rig.start_agent(HOST)
    rig.rollout.run_pass(admin_context)
    assert status(rig.api, made['uuid'])['state'] == 'applied'
    assert set(rig.kernel.numvfs_after) == {('setup', '8')}
    assert nic_inventory(placement.adapter()) == (8, 0)


def test_a_policy_changed_after_the_pass_read_it_is_not_drained_stale(
        rig, admin_context):
    """The pass read the row wanting 8 VFs; the operator then asked 4
    (the row stays pending with new settings): the pass's move fails and
    the next pass drains for 4."""
    from cyborg.db.api import device_config_status as config_db
    made = create_policy(rig.api)
    with admin_context.db.read_connection(admin_context) as connection:
        work, = config_db.work_of_hosts(connection, [HOST],
                                        (config_db.PENDING,))
    rig.api.patch_json('%s/%s' % (test_device_config_rollout.POLICIES,
                                  made['uuid']),
                       {'settings': {'num_vfs': 4}},
                       headers=test_device_config_rollout.ADMIN)

    rig.rollout.advance(admin_context, work)

    assert status(rig.api, made['uuid'])['state'] == 'pending'
    assert rig.kernel.numvfs_after == []
    rig.rollout.run_pass(admin_context)
    row = status(rig.api, made['uuid'])
    assert (row['state'], row['applied_settings']) == ('applied',
                                                       {'num_vfs': 4})
