"""Servers through Nova's REST API, and what this service holds for them.

``boot_many`` posts servers at once and waits for each to settle;
``wait_consistent`` checks that ARQs, attach handles and Placement
allocations agree with the servers that exist; ``service_share`` reads,
from this service's logs and Nova's, how long the service took in a boot.
"""

import concurrent.futures
import dataclasses
import datetime
import re
import statistics
import time
import uuid

import sqlalchemy as sa

from cyborg.db import models

BOOT_TIMEOUT = 180
SETTLE_TIMEOUT = 60
# Statuses a server ends a boot or an action in.
SETTLED = ('ACTIVE', 'ERROR', 'SHUTOFF', 'SHELVED_OFFLOADED')

_STAMP = r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \d+ \w+ '


@dataclasses.dataclass
class Boot:
    """One server's boot: its id, status and the seconds from the POST
    until it settled."""
    id: str
    name: str
    status: str = None
    seconds: float = None
    fault: str = None


def boot(cloud, flavor, name=None):
    """POST /servers; the new server's id."""
    name = name or 'server-%s' % uuid.uuid4().hex[:8]
    body = {'server': {'name': name, 'imageRef': cloud.image_id,
                       'flavorRef': flavor, 'networks': 'none'}}
    return cloud.nova_call('POST', '/servers', (202,),
                           json=body).json()['server']['id'], name


def server(cloud, server_id):
    return cloud.nova_call('GET', '/servers/%s' % server_id).json()['server']


def wait_settled(cloud, server_id, timeout=BOOT_TIMEOUT, statuses=SETTLED):
    """The server once it is in one of ``statuses`` with no task."""
    deadline = time.monotonic() + timeout
    while True:
        got = server(cloud, server_id)
        if got['status'] in statuses and got['OS-EXT-STS:task_state'] is None:
            return got
        if time.monotonic() > deadline:
            raise AssertionError('server %s still %s/%s after %d s:\n%s' % (
                server_id, got['status'], got['OS-EXT-STS:task_state'],
                timeout, cloud.tails()))
        # Not faster: 16 servers polled at once would load Nova's API.
        time.sleep(0.5)


def _boot_one(cloud, flavor, name):
    posted = time.monotonic()
    server_id, name = boot(cloud, flavor, name)
    got = wait_settled(cloud, server_id)
    return Boot(server_id, name, got['status'], time.monotonic() - posted,
                (got.get('fault') or {}).get('message'))


def boot_many(cloud, flavor, count, prefix='server'):
    """``count`` servers of ``flavor`` posted at once; their ``Boot``s."""
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(_boot_one, cloud, flavor,
                               '%s-%d-%s' % (prefix, n, uuid.uuid4().hex[:6]))
                   for n in range(count)]
        return [f.result() for f in futures]


def action(cloud, server_id, body, statuses=SETTLED):
    """POST an action and wait until the server settles again."""
    cloud.nova_call('POST', '/servers/%s/action' % server_id, (202,),
                    json=body)
    # The action's task state is set before the 202; wait for its end.
    return wait_settled(cloud, server_id, statuses=statuses)


def delete(cloud, server_ids, timeout=BOOT_TIMEOUT):
    """Delete the servers and wait until Nova no longer lists them."""
    for server_id in server_ids:
        cloud.nova_call('DELETE', '/servers/%s' % server_id, (204, 404))
    deadline = time.monotonic() + timeout
    for server_id in server_ids:
        while cloud.nova_call('GET', '/servers/%s' % server_id,
                              (200, 404)).status_code == 200:
            assert time.monotonic() < deadline, (
                'server %s not deleted within %d s' % (server_id, timeout))
            time.sleep(0.2)


def flavor(cloud, name, extra_specs=None):
    """A flavor of 1 VCPU, 512 MB and 1 GB with ``extra_specs``; its id."""
    made = cloud.nova_call('POST', '/flavors', (200,), json={'flavor': {
        'name': name, 'ram': 512, 'vcpus': 1, 'disk': 1}}).json()['flavor']
    if extra_specs:
        cloud.nova_call('POST', '/flavors/%s/os-extra_specs' % made['id'],
                        (200,), json={'extra_specs': extra_specs})
    return made['id']


def device_profile(cloud, name, groups):
    cloud.cyborg_call('POST', '/v2/device_profiles', (201,),
                      json=[{'name': name, 'groups': groups}])
    return name


# -- consistency -------------------------------------------------------------

@dataclasses.dataclass
class Holdings:
    """What the service and Placement hold, by instance."""
    arqs: list
    handles_in_use: int
    allocations: dict      # consumer -> accelerators allocated to it
    servers: dict          # id -> server


def holdings(cloud):
    servers = {s['id']: s for s in cloud.nova_call(
        'GET', '/servers/detail', params={'all_tenants': 1}).json()[
            'servers']}
    arqs = cloud.cyborg_call('GET', '/v2/accelerator_requests').json()[
        'arqs']
    # Accelerators of every device provider of the host, by consumer.
    allocations = {}
    for rp, rc in cloud.device_rps.items():
        for consumer, held in cloud.placement_get(
                '/resource_providers/%s/allocations' % rp)[
                    'allocations'].items():
            allocations[consumer] = (allocations.get(consumer, 0)
                                     + held['resources'].get(rc, 0))
    engine = sa.create_engine(cloud.side.db_url)
    try:
        with engine.connect() as connection:
            in_use = connection.execute(
                sa.select(sa.func.count()).select_from(
                    models.AttachHandle).where(
                        models.AttachHandle.in_use == sa.true())).scalar()
    finally:
        engine.dispose()
    return Holdings(arqs, in_use, allocations, servers)


def problems(cloud, held, failed_binds=()):
    """What is inconsistent in ``held``. ``failed_binds``: instances whose
    ARQs may be BindFailed (Nova started them anyway)."""
    found = []
    bound = {}
    for arq in held.arqs:
        instance = arq['instance_uuid']
        if arq['state'] == 'BindFailed' and instance in failed_binds:
            continue
        if arq['state'] != 'Bound':
            found.append('ARQ %s is %s (instance %s)' % (
                arq['uuid'], arq['state'], instance))
            continue
        bound[instance] = bound.get(instance, 0) + 1
        if instance not in held.servers:
            found.append('ARQ %s is bound to instance %s, which does not '
                         'exist' % (arq['uuid'], instance))
        if (arq['device_rp_uuid'] not in cloud.device_rps
                or arq['hostname'] != cloud.compute_host
                or not arq['attach_handle_uuid']):
            found.append('ARQ %s is bound elsewhere: %s' % (arq['uuid'],
                                                            arq))
    for instance, count in bound.items():
        if held.allocations.get(instance) != count:
            found.append('instance %s has %d bound ARQs but %s '
                         'accelerators allocated' % (instance, count,
                                        held.allocations.get(instance)))
    for consumer, amount in held.allocations.items():
        if consumer not in bound and consumer not in failed_binds:
            found.append('%s holds %d accelerators without a bound ARQ' % (
                consumer, amount))
    if held.handles_in_use != sum(bound.values()):
        found.append('%d attach handles in use for %d bound ARQs' % (
            held.handles_in_use, sum(bound.values())))
    return found


def wait_consistent(cloud, timeout=SETTLE_TIMEOUT, failed_binds=()):
    """``holdings`` once they are consistent (Nova releases some of them
    just after a server's status changed)."""
    deadline = time.monotonic() + timeout
    while True:
        held = holdings(cloud)
        found = problems(cloud, held, failed_binds)
        if not found:
            return held
        if time.monotonic() > deadline:
            raise AssertionError('inconsistent after %d s:\n%s\n%s' % (
                timeout, '\n'.join(found), cloud.tails()))
        time.sleep(0.5)


# -- timing ------------------------------------------------------------------

@dataclasses.dataclass
class Share:
    """The service's part of one boot, in seconds."""
    arq_create: float     # the API's time to create the ARQs
    bind: float           # bind started to bound
    bind_to_event: float  # bind started to the event posted to Nova
    event: str            # 'accepted' or 'dropped: no host yet'


def _stamp(text):
    return datetime.datetime.strptime(text, '%Y-%m-%d %H:%M:%S.%f')


def access_mark(cloud):
    """Where the service's API access log ends now."""
    return cloud.api.access_log.stat().st_size


def arq_create_seconds(cloud, since):
    """The API's times for POST /v2/accelerator_requests since ``since``
    (an ``access_mark``), in seconds."""
    with open(cloud.api.access_log) as log:
        log.seek(since)
        return [int(found.group(1)) / 1e6 for found in re.finditer(
            r'"POST /v2/accelerator_requests[^"]*" 201 (\d+)', log.read())]


def service_share(cloud, server_id, arq_created):
    """The ``Share`` of the boot of ``server_id`` (whose ARQs still
    exist); ``arq_created``: the ARQ creation time to report."""
    arqs = [a['uuid'] for a in cloud.cyborg_call(
        'GET', '/v2/accelerator_requests',
        params={'instance': server_id}).json()['arqs']]
    conductor_log = cloud.conductor.log()
    nova_log = (cloud.nova.directory / 'nova-api.log').read_text(
        errors='replace')
    binds, events, outcome = [], [], 'accepted'
    for arq in arqs:
        found = re.search(_STAMP + r'.*ARQ %s bound to .* in ([\d.]+) s'
                          % arq, conductor_log, re.M)
        if not found:
            continue
        bound_at = _stamp(found.group(1))
        started = bound_at - datetime.timedelta(
            seconds=float(found.group(2)))
        binds.append(float(found.group(2)))
        accepted = re.search(_STAMP + r'.*Creating event accelerator-'
                             r'request-bound:%s ' % arq, nova_log, re.M)
        dropped = re.search(_STAMP + r'.*Nova dropped the bind event of '
                            r'accelerator request %s' % arq,
                            conductor_log, re.M)
        if dropped:
            outcome = 'dropped: no host yet'
        sent = accepted or dropped
        if sent:
            events.append((_stamp(sent.group(1)) - started).total_seconds())
    return Share(arq_created, max(binds, default=None),
                 max(events, default=None), outcome)


# The lines ``report`` made during the test now running; the Nova tests'
# conftest moves them onto the test's report, and the run's summary
# prints them (``tests/conftest.py``).
REPORTED = []


def report(label, boot_result, share=None):
    """One line for the run's output."""
    line = '%s: %s %s after %.2f s' % (label, boot_result.id,
                                       boot_result.status,
                                       boot_result.seconds)
    if boot_result.fault:
        line += ' (%s)' % boot_result.fault
    if share is not None:
        line += ('; service: ARQ creation %s, bind %s, bind to event %s '
                 '(%s)' % (_ms(share.arq_create), _ms(share.bind),
                           _ms(share.bind_to_event), share.event))
    print(line)
    REPORTED.append(line)
    return line


def median_ms(values):
    return _ms(statistics.median(values)) if values else 'n/a'


def _ms(seconds):
    return 'n/a' if seconds is None else '%.0f ms' % (seconds * 1000)
