"""Binds that take time and binds that fail, as Nova's compute sees them.

A profile that programs a bitstream makes the bind last seconds (the fake
FPGA's ``program_seconds``), so nova-compute is already waiting when the
event comes. A profile whose function no bitstream provides fails its
bind within milliseconds, before nova-compute waits: Nova then finds the
ARQ resolved and starts the server without its device (see "A bind that
fails before Nova waits" in doc/source/admin/troubleshooting.rst).
"""

import signal
import time

from tests.functional.conductor.test_fpga_programming import BITSTREAM
from tests.functional.conductor.test_fpga_programming import fitting
from tests.functional.nova import servers as nova_servers
from tests.functional.nova.conftest import SHARED
from tests.nova_cloud import PROGRAM_SECONDS

pytestmark = SHARED


def _boot_with_profile(cloud, name, group):
    nova_servers.device_profile(cloud, name, [group])
    flavor = nova_servers.flavor(cloud, 'accel-%s' % name,
                                 {'accel:device_profile': name})
    mark = nova_servers.access_mark(cloud)
    booted, = nova_servers.boot_many(cloud, flavor, 1, name)
    return booted, mark


def test_a_bind_that_programs_a_bitstream_is_waited_for(cloud):
    image = cloud.glance.upload_bitstream(BITSTREAM, **fitting())
    bitstream = image['properties']['bs-uuid']

    booted, mark = _boot_with_profile(cloud, 'gzip', {
        'resources:FPGA': '1', 'accel:bitstream_id': bitstream})

    assert booted.status == 'ACTIVE', booted
    created, = nova_servers.arq_create_seconds(cloud, mark)
    share = nova_servers.service_share(cloud, booted.id, created)
    nova_servers.report('bitstream boot', booted, share)
    assert share.bind >= PROGRAM_SECONDS
    # nova-compute was waiting: Nova took the event.
    assert share.event == 'accepted'
    assert booted.seconds >= PROGRAM_SECONDS
    deployable, = [d for d in cloud.cyborg_call(
        'GET', '/v2/deployables').json()['deployables']
        if d['rp_uuid'] == cloud.fpga_rp]
    assert deployable['bitstream_id'] == bitstream
    held = nova_servers.wait_consistent(cloud)
    assert held.allocations == {booted.id: 1}
    nova_servers.delete(cloud, [booted.id])
    cloud.glance.delete_image(image['id'])


def test_a_bind_that_fails_before_nova_waits_leaves_the_server_active(
        cloud):
    # Nova's current behaviour, not what an operator wants: the test fails
    # once Nova (or this service) stops starting such a server, and the
    # admin guide must then change with it.
    booted, _ = _boot_with_profile(cloud, 'no-such-function', {
        'resources:FPGA': '1', 'accel:function_name': 'no-such-function'})

    nova_servers.report('failing bind boot', booted)
    assert booted.status == 'ACTIVE', booted
    arq, = cloud.cyborg_call('GET', '/v2/accelerator_requests', params={
        'instance': booted.id}).json()['arqs']
    assert arq['state'] == 'BindFailed'
    assert arq['attach_handle_uuid'] is None
    # Placement still holds the accelerator for the server.
    held = nova_servers.wait_consistent(cloud, failed_binds={booted.id})
    assert held.allocations == {booted.id: 1}
    assert held.handles_in_use == 0
    nova_servers.delete(cloud, [booted.id])


def test_a_conductor_killed_during_a_bind_leaves_nothing_held(cloud):
    image = cloud.glance.upload_bitstream(BITSTREAM, **fitting())
    nova_servers.device_profile(cloud, 'slow', [{
        'resources:FPGA': '1',
        'accel:bitstream_id': image['properties']['bs-uuid']}])
    flavor = nova_servers.flavor(cloud, 'accel-slow',
                                 {'accel:device_profile': 'slow'})
    posted = time.monotonic()
    server_id, _ = nova_servers.boot(cloud, flavor)
    deadline = time.monotonic() + nova_servers.BOOT_TIMEOUT
    while not [a for a in cloud.cyborg_call(
            'GET', '/v2/accelerator_requests',
            params={'instance': server_id}).json()['arqs']
            if a['state'] == 'BindStarted']:
        assert time.monotonic() < deadline, 'the bind never started'
        time.sleep(0.1)

    # In the middle of programming the card for the bind.
    cloud.conductor.process.send_signal(signal.SIGKILL)
    cloud.conductor.process.wait(timeout=15)
    cloud.conductor.start()
    got = nova_servers.wait_settled(cloud, server_id)

    print('boot across a conductor SIGKILL: %s %s after %.2f s%s' % (
        server_id, got['status'], time.monotonic() - posted,
        ' (%s)' % got['fault']['message'] if 'fault' in got else ''))
    failed = () if got['status'] == 'ACTIVE' else (server_id,)
    held = nova_servers.wait_consistent(cloud, failed_binds=failed)
    if got['status'] == 'ACTIVE':
        assert held.allocations == {server_id: 1}
        assert held.handles_in_use == 1
    else:
        assert got['status'] == 'ERROR', got
        assert held.handles_in_use == 0
    nova_servers.delete(cloud, [server_id])
    cloud.glance.delete_image(image['id'])
