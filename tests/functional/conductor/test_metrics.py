"""The bindings a report's answer carries, and both metrics endpoints
scraped over HTTP with the real conductor, a real database and a real
Placement.

The end-to-end test runs the conductor and agent services in this
process on the in-process transport: the agent runs the NVIDIA driver
over the H100's recorded tree and NVML recording, an accelerator request
binds the GPU through the API, and the agent's series name the instance
and project once the conductor's answer to its report names them.
"""

import time
import urllib.error
import urllib.request
import uuid

import pytest
import sqlalchemy as sa

from cyborg.agent import manager as agent_manager
from cyborg.conductor import manager
from cyborg.db import models
from tests import arq_stack
from tests.metrics_scrape import observe
from tests.metrics_scrape import scrape
from tests.placement_service import create_compute_node
from tests.unit.drivers.conftest import h100_tree  # noqa: F401
from tests.unit.drivers.conftest import recorded_nvml  # noqa: F401

api = arq_stack.api
conductor = arq_stack.conductor
fpga_rp = arq_stack.fpga_rp
profile = arq_stack.profile
transport = arq_stack.transport

ARQS = arq_stack.ARQS
MEMBER = {'X-Roles': 'member,reader', 'X-Project-Id': 'p1',
          'X-User-Id': 'u-member'}
GPU_HOST = 'gpu-host'
H100 = '0000:00:06.0'


def test_bindings_name_the_bound_requests_of_the_host_in_one_query(
        api, conductor, fpga_rp, profile, admin_context, sql_counter):
    assert manager.host_bindings(admin_context, arq_stack.HOST) == {}
    arqs = api.post_json(ARQS, {'device_profile_name': profile},
                         headers=MEMBER).json['arqs']
    instance = str(uuid.uuid4())
    api.patch_json(ARQS, arq_stack.bind_body(arqs, fpga_rp, instance),
                   headers=MEMBER)
    arq_stack.wait_resolved(api, instance, headers=MEMBER)

    sql_counter.reset()
    bindings = manager.host_bindings(admin_context, arq_stack.HOST)
    # One SELECT, however many requests are bound (the conductor may
    # still be finishing the bind on its own threads).
    assert len(sql_counter.of_this_thread()) == 1
    assert bindings == {'ffff:0c:00.0': [
        {'instance_uuid': instance, 'project_id': 'p1'}] * 3}
    assert manager.host_bindings(admin_context, 'host2') == {}

    # An unbound request is no longer named.
    api.patch_json(ARQS + '/' + arqs[0]['uuid'],
                   arq_stack.unbind_body(arqs[:1]), headers=MEMBER)
    assert len(manager.host_bindings(admin_context, arq_stack.HOST)[
        'ffff:0c:00.0']) == 2


def wait_for(predicate, what, timeout=15):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def gpu_rp(db):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(models.Deployable.rp_uuid).where(
            models.Deployable.resource_class == 'PGPU')).scalar_one()


@pytest.mark.parametrize('database_url', ['sqlite'], indirect=True)
def test_both_endpoints_with_a_bound_gpu(
        conf, db, admin_context, placement, h100_tree,  # noqa: F811
        recorded_nvml):  # noqa: F811
    library = recorded_nvml()
    conf.set_override('host', GPU_HOST)
    for (group, name), value in {
            ('agent', 'enabled_drivers'): ['nvidia_gpu_driver'],
            ('agent', 'report_interval'): 3600,
            ('agent', 'report_timeout'): 10,
            ('pci', 'sysfs_root'): h100_tree,
            ('metrics', 'enabled'): True,
            ('metrics', 'listen_address'): '127.0.0.1',
            ('metrics', 'agent_port'): 0,
            ('metrics', 'conductor_port'): 0}.items():
        conf.set_override(name, value, group=group)
    create_compute_node(placement.adapter(), GPU_HOST)
    arq_stack.make_profile(admin_context, 'whole-gpu',
                           [{'resources:PGPU': '1'}])
    placement_client = placement.client()
    instance = str(uuid.uuid4())
    with arq_stack.fake_transport(conf) as transport:
        conductor = manager.ConductorService(
            conf, transport=transport, db=db, placement=placement_client)
        agent = agent_manager.AgentService(conf, transport=transport,
                                           glance=None)
        try:
            conductor.start()
            agent.start()
            wait_for(lambda: agent.manager.last_report is not None,
                     'the first report')
            api = arq_stack.webtest_app(conf, db, transport)
            arq, = api.post_json(ARQS, {'device_profile_name': 'whole-gpu'},
                                 headers=MEMBER).json['arqs']
            api.patch_json(ARQS, arq_stack.bind_body(
                [arq], gpu_rp(db), instance, GPU_HOST), headers=MEMBER)
            bound, = arq_stack.wait_resolved(api, instance, headers=MEMBER)
            assert bound['state'] == 'Bound'
            # The next report's answer names the instance.
            agent.manager.report_inventory()
            observe(agent.manager)
            wait_for(lambda: all(
                scrape(conductor.metrics_endpoint.url).value(
                    'cyborg_conductor_recovery_runs_total', worker=worker,
                    outcome='ok') >= 1
                for worker in ('bind-takeover', 'overdue-binds', 'deletions',
                               'nova-events')), 'a run of each recovery '
                     'worker')
            got = scrape(agent.metrics_endpoint.url)
            served = scrape(conductor.metrics_endpoint.url)
        finally:
            agent.stop()
            conductor.stop()

    assert agent.manager.bindings == {
        H100: [{'instance_uuid': instance, 'project_id': 'p1'}]}
    assert got.samples('DCGM_FI_DEV_GPU_UTIL') == [(
        {'gpu': '0', 'UUID': library.static['uuid'],
         'pci_bus_id': '00000000:00:06.0', 'device': 'nvidia0',
         'modelName': 'NVIDIA H100 80GB HBM3', 'Hostname': GPU_HOST,
         'instance_uuid': instance, 'project_id': 'p1'},
        library.sample['gpu_util'])]
    assert got.value('DCGM_FI_DEV_POWER_USAGE') == (
        library.sample['power_mw'] / 1000)
    assert got.value('cyborg_device_health', address=H100, state='healthy',
                     instance_uuid=instance, project_id='p1') == 1

    # The first report changed the database, the second did not.
    assert served.value('cyborg_conductor_reports_total',
                        outcome='changed') == 1
    assert served.value('cyborg_conductor_reports_total',
                        outcome='unchanged') == 1
    assert served.value('cyborg_conductor_report_duration_seconds_count') == 2
    assert served.value('cyborg_conductor_binds_total', outcome='bound') == 1
    assert served.value('cyborg_conductor_binds_total', outcome='failed') == 0
    assert served.value('cyborg_conductor_bind_duration_seconds_count',
                        outcome='bound') == 1
    assert served.value('cyborg_conductor_bind_queue_wait_seconds_count') == 1
    # Every call of the conductor's Placement client, by method.
    timed = {labels['method']: value for labels, value in served.samples(
        'cyborg_placement_request_duration_seconds_count')}
    assert sum(timed.values()) == (placement_client.calls.reads
                                   + placement_client.calls.writes)
    assert timed['GET'] == placement_client.calls.by_method['GET']
    assert served.value('cyborg_placement_requests_total', method='POST',
                        status='200') >= 1
    assert 'process_cpu_seconds_total' in served.by_name

    # Stopped with their services.
    for endpoint in (agent.metrics_endpoint, conductor.metrics_endpoint):
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(endpoint.url, timeout=5)
