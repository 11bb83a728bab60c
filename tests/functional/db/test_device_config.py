"""Device configuration policies on the three engines, at the database
layer: concurrent writers of policies of equal priority on one device,
and the status rows each write leaves."""

import concurrent.futures
import threading
import uuid as uuidlib

import pytest

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg.db.api import device_config_policies as policies_db
from cyborg.objects import inventory
from tests import inventory_rows


@pytest.fixture
def nic(db):
    port = inventory.Device(
        type='NIC', vendor='8086', model='X710', controlpath_type='PCI',
        controlpath_info=inventory.PCIAddress.parse(
            '0000:3b:00.0').as_info(),
        std_board_info={'vendor_id': '8086', 'product_id': '1572',
                        'sriov_totalvfs': '64'})
    [stored] = inventory_rows.add_host(db.engine, 'compute-1', [port])
    return stored.uuid


def values(name, priority=5, num_vfs=8):
    return {'uuid': str(uuidlib.uuid4()), 'name': name,
            'priority': priority, 'host_selector': ['*'],
            'device_selector': {'vendor_id': '8086'}, 'kind': 'sriov_vfs',
            'settings': {'num_vfs': num_vfs}, 'restore_on_delete': False}


def test_of_two_concurrent_equal_policies_one_is_stored(db, nic):
    # Each worker's own context: transactions live on contexts.
    start = threading.Barrier(4)

    def create(name):
        context = cyborg_context.admin_context(db)
        start.wait(timeout=30)
        try:
            policies_db.create_policy(context, values(name))
        except exception.Conflict as e:
            return e.message
        return None

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(create, ['p%d' % i for i in range(4)]))

    refused = [a for a in answers if a is not None]
    assert len(refused) == 3, answers
    assert all('of the same priority 5, selects device %s' % nic in a
               for a in refused)
    context = cyborg_context.admin_context(db)
    [stored] = policies_db.list_policies(context)
    policy, rows = policies_db.get_status(context, stored.uuid)
    assert [(r.device_uuid, r.state, r.wanted_settings) for r in rows] == [
        (nic, 'pending', {'num_vfs': 8})]


def test_concurrent_policies_of_other_priorities_end_with_the_highest(
        db, nic):
    start = threading.Barrier(3)

    def create(priority):
        context = cyborg_context.admin_context(db)
        start.wait(timeout=30)
        policies_db.create_policy(context, values(
            'p%d' % priority, priority=priority, num_vfs=priority))

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        list(pool.map(create, [1, 3, 2]))

    context = cyborg_context.admin_context(db)
    won = {}
    for policy in policies_db.list_policies(context):
        won[policy.name] = [
            (r.device_uuid, r.wanted_settings)
            for r in policies_db.get_status(context, policy.uuid)[1]]
    assert won == {'p3': [(nic, {'num_vfs': 3})], 'p2': [], 'p1': []}
