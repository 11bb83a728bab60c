"""Booting servers with an FPGA through Nova: one, a full host, and the
one more that does not fit."""

from tests.functional.nova import servers as nova_servers
from tests.functional.nova.conftest import SHARED

pytestmark = SHARED

HANDLES = 16


def test_a_server_boots_with_an_fpga(cloud, fpga_flavor, plain_flavor):
    # A first boot warms Nova's caches up; then each boot alone.
    nova_servers.boot_many(cloud, plain_flavor, 1, 'warm-up')
    mark = nova_servers.access_mark(cloud)
    booted, = nova_servers.boot_many(cloud, fpga_flavor, 1, 'fpga')
    # Nova alone, for comparison.
    plain, = nova_servers.boot_many(cloud, plain_flavor, 1, 'plain')
    nova_servers.report('Nova-only boot', plain)

    assert (plain.status, booted.status) == ('ACTIVE', 'ACTIVE'), booted
    arq, = cloud.cyborg_call('GET', '/v2/accelerator_requests', params={
        'instance': booted.id}).json()['arqs']
    assert arq['state'] == 'Bound'
    assert arq['device_profile_name'] == 'one-fpga'
    assert arq['hostname'] == cloud.compute_host
    assert arq['device_rp_uuid'] == cloud.fpga_rp
    held = nova_servers.wait_consistent(cloud)
    assert held.allocations == {booted.id: 1}
    assert held.handles_in_use == 1
    created = nova_servers.arq_create_seconds(cloud, mark)
    assert len(created) == 1, created
    share = nova_servers.service_share(cloud, booted.id, created[0])
    nova_servers.report('FPGA boot', booted, share)
    assert share.bind is not None and share.bind_to_event is not None

    nova_servers.delete(cloud, [booted.id, plain.id])
    held = nova_servers.wait_consistent(cloud)
    assert (held.arqs, held.handles_in_use, held.allocations) == ([], 0, {})


def test_a_full_host_refuses_the_next_server_leaving_nothing_held(
        cloud, fpga_flavor):
    mark = nova_servers.access_mark(cloud)

    booted = nova_servers.boot_many(cloud, fpga_flavor, HANDLES, 'fill')

    for one in booted:
        nova_servers.report('fill boot', one)
    print('%d boots at once: slowest %.2f s, median ARQ creation %s' % (
        HANDLES, max(b.seconds for b in booted), nova_servers.median_ms(
            nova_servers.arq_create_seconds(cloud, mark))))
    assert [b.status for b in booted] == ['ACTIVE'] * HANDLES, booted
    held = nova_servers.wait_consistent(cloud)
    assert held.handles_in_use == HANDLES
    assert sorted(held.allocations) == sorted(b.id for b in booted)

    extra, = nova_servers.boot_many(cloud, fpga_flavor, 1, 'extra')

    nova_servers.report('17th boot', extra)
    assert extra.status == 'ERROR'
    assert 'No valid host' in extra.fault, extra.fault
    held = nova_servers.wait_consistent(cloud)
    assert not [a for a in held.arqs if a['instance_uuid'] == extra.id]
    assert extra.id not in held.allocations
    assert held.handles_in_use == HANDLES

    nova_servers.delete(cloud, [b.id for b in booted] + [extra.id])
    held = nova_servers.wait_consistent(cloud)
    assert (held.arqs, held.handles_in_use, held.allocations) == ([], 0, {})
