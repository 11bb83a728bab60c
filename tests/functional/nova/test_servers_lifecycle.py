"""What Nova does to a server with an FPGA after its boot: each action
ends with ARQs, attach handles and allocations that agree."""

import concurrent.futures

from tests.functional.nova import servers as nova_servers
from tests.functional.nova.conftest import SHARED

pytestmark = SHARED


def _hard_reboot(cloud, server_id):
    return nova_servers.action(cloud, server_id, {'reboot': {'type': 'HARD'}})


def _stop_start(cloud, server_id):
    stopped = nova_servers.action(cloud, server_id, {'os-stop': None})
    assert stopped['status'] == 'SHUTOFF', stopped
    return nova_servers.action(cloud, server_id, {'os-start': None})


def _rebuild(cloud, server_id):
    return nova_servers.action(cloud, server_id,
                               {'rebuild': {'imageRef': cloud.image_id}})


def _shelve_unshelve(cloud, server_id):
    # shelved_offload_time 0 (Nova's default): offloaded at once, its
    # ARQs unbound and its allocations given back.
    shelved = nova_servers.action(cloud, server_id, {'shelve': None},
                                  statuses=('SHELVED_OFFLOADED',))
    held = nova_servers.holdings(cloud)
    assert server_id not in held.allocations, held.allocations
    assert not [a for a in held.arqs if a['state'] == 'Bound'
                and a['instance_uuid'] == server_id], held.arqs
    assert shelved['status'] == 'SHELVED_OFFLOADED'
    return nova_servers.action(cloud, server_id, {'unshelve': None})


ACTIONS = {'hard reboot': _hard_reboot, 'stop and start': _stop_start,
           'rebuild': _rebuild, 'shelve-offload and unshelve':
           _shelve_unshelve}


def test_actions_keep_arqs_handles_and_allocations_consistent(
        cloud, fpga_flavor):
    booted = nova_servers.boot_many(cloud, fpga_flavor, len(ACTIONS) + 1,
                                    'life')
    assert [b.status for b in booted] == ['ACTIVE'] * len(booted), booted
    doomed, *acted = booted
    before = {a['instance_uuid']: a['uuid'] for a in
              nova_servers.wait_consistent(cloud).arqs}

    # Each action on its own server, all at once; and one delete.
    with concurrent.futures.ThreadPoolExecutor(len(ACTIONS) + 1) as pool:
        deleted = pool.submit(nova_servers.delete, cloud, [doomed.id])
        done = {name: pool.submit(act, cloud, one.id)
                for (name, act), one in zip(ACTIONS.items(), acted,
                                                 strict=True)}
        deleted.result()
        ended = {name: future.result() for name, future in done.items()}

    for name, server in ended.items():
        print('%s: %s %s' % (name, server['id'], server['status']))
    assert {name: s['status'] for name, s in ended.items()} == dict.fromkeys(
        ACTIONS, 'ACTIVE')
    held = nova_servers.wait_consistent(cloud)
    assert sorted(held.allocations) == sorted(b.id for b in acted)
    assert held.handles_in_use == len(acted)
    after = {a['instance_uuid']: a['uuid'] for a in held.arqs}
    # The same ARQs stay with their servers, except across a shelve,
    # whose unshelve asks for new ones.
    unshelved = ended['shelve-offload and unshelve']['id']
    assert {i: u for i, u in after.items() if i != unshelved} == {
        i: u for i, u in before.items() if i not in (unshelved, doomed.id)}

    nova_servers.delete(cloud, [b.id for b in acted])
    held = nova_servers.wait_consistent(cloud)
    assert (held.arqs, held.handles_in_use, held.allocations) == ([], 0, {})
