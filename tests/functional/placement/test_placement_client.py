"""The Placement client and the compute-node lookup against real Placement."""

import json
import subprocess
import sys
import uuid

from oslo_config import cfg
import pytest

from cyborg.clients import placement as placement_client
from cyborg.conductor import placement_sync
from cyborg.conf import placement as placement_conf
from tests.functional.placement.conftest import COMPUTE_HOST
from tests.placement_service import allocate
from tests.placement_service import create_compute_node

SHORT_HOST = COMPUTE_HOST.split('.')[0]


def test_compute_node_found_by_configured_name(client, compute_node):
    found = placement_sync.find_compute_node(
        client, [COMPUTE_HOST, 'other.example.com', 'other'])

    assert found.uuid == compute_node['uuid']
    assert found.matched_name == COMPUTE_HOST
    assert found.names_tried == (COMPUTE_HOST,)
    assert client.calls.snapshot() == (1, 0)


def test_compute_node_found_by_fqdn_when_configured_short(client,
                                                          compute_node):
    # Nova's libvirt driver names the node after the FQDN while the
    # service was configured with the short name: the upstream bug class.
    names = placement_sync.compute_node_names(
        SHORT_HOST, fqdn=COMPUTE_HOST, short_name=SHORT_HOST)
    assert names == [SHORT_HOST, COMPUTE_HOST]

    found = placement_sync.find_compute_node(client, names)

    assert found.uuid == compute_node['uuid']
    assert found.matched_name == COMPUTE_HOST
    assert found.names_tried == (SHORT_HOST, COMPUTE_HOST)


def test_compute_node_found_by_short_name(placement, client):
    short_node = create_compute_node(placement.adapter(), SHORT_HOST)
    names = placement_sync.compute_node_names(
        'configured-alias', fqdn=COMPUTE_HOST, short_name=SHORT_HOST)

    found = placement_sync.find_compute_node(client, names)

    assert found.uuid == short_node['uuid']
    assert found.matched_name == SHORT_HOST
    assert found.names_tried == ('configured-alias', COMPUTE_HOST,
                                 SHORT_HOST)


def test_compute_node_not_found_lists_every_name_tried(client,
                                                       compute_node):
    names = ['wrong', 'wrong', 'wrong.example.com', '', 'w']

    with pytest.raises(placement_sync.ComputeNodeNotFound) as caught:
        placement_sync.find_compute_node(client, names)

    assert caught.value.names == ('wrong', 'wrong.example.com', 'w')
    message = str(caught.value)
    assert "'wrong', 'wrong.example.com', 'w'" in message
    assert '[DEFAULT] host' in message
    # Duplicates and empty names are not asked twice.
    assert client.calls.snapshot() == (3, 0)


def test_stale_generation_is_a_generation_conflict(client, compute_node):
    stale = compute_node['generation']
    client.put_traits(compute_node['uuid'], stale, {'HW_CPU_X86_AVX2'})

    with pytest.raises(placement_client.GenerationConflict) as caught:
        client.put_inventories(compute_node['uuid'], stale, {})

    assert caught.value.status == 409
    assert caught.value.code == 'placement.concurrent_update'
    assert not isinstance(caught.value, placement_client.InUse)


def test_in_use_conflicts_are_not_generation_conflicts(placement, client,
                                                       compute_node):
    child = client.create_provider('%s_gpu0' % COMPUTE_HOST,
                                   parent_uuid=compute_node['uuid'])
    generation = client.put_inventories(
        child['uuid'], child['generation'], {'PGPU': {'total': 1}})
    allocate(placement.adapter(), str(uuid.uuid4()), child['uuid'],
             {'PGPU': 1})

    with pytest.raises(placement_client.InventoryInUse) as removing:
        client.put_inventories(child['uuid'], generation + 1, {})
    with pytest.raises(placement_client.ProviderInUse) as deleting:
        client.delete_provider(child['uuid'])
    with pytest.raises(placement_client.ProviderHasChildren) as parent:
        client.delete_provider(compute_node['uuid'])

    assert removing.value.code == 'placement.inventory.inuse'
    assert deleting.value.code == 'placement.resource_provider.inuse'
    assert parent.value.code == (
        'placement.resource_provider.cannot_delete_parent')
    for caught in (removing, deleting, parent):
        assert caught.value.status == 409
        assert not isinstance(caught.value,
                              placement_client.GenerationConflict)
    assert client.get_usages(child['uuid']) == {'PGPU': 1}


def test_duplicate_and_missing_providers(client, compute_node):
    with pytest.raises(placement_client.DuplicateProvider):
        client.create_provider(COMPUTE_HOST)
    missing = str(uuid.uuid4())
    assert client.get_provider(missing) is None
    assert client.find_provider_by_name('nowhere') is None
    with pytest.raises(placement_client.NotFound) as caught:
        client.delete_provider(missing)
    assert caught.value.status == 404


def test_provider_tree_and_generations(client, compute_node):
    child = client.create_provider('%s_fpga0' % COMPUTE_HOST,
                                   uuid=str(uuid.uuid4()),
                                   parent_uuid=compute_node['uuid'])
    assert child['generation'] == 0
    assert child['parent_provider_uuid'] == compute_node['uuid']

    generation = client.put_inventories(
        child['uuid'], 0, {'FPGA': {'total': 2, 'max_unit': 2}})
    client.ensure_trait('CUSTOM_FPGA_INTEL')
    generation = client.put_traits(
        child['uuid'], generation, {'CUSTOM_FPGA_INTEL', 'OWNER_CYBORG'})

    tree = client.providers_in_tree(child['uuid'])
    assert {rp['uuid'] for rp in tree} == {compute_node['uuid'],
                                           child['uuid']}
    read_generation, inventories = client.get_inventories(child['uuid'])
    assert read_generation == generation == 2
    assert inventories['FPGA']['total'] == 2
    assert client.get_traits(child['uuid']) == (
        2, frozenset({'CUSTOM_FPGA_INTEL', 'OWNER_CYBORG'}))


def test_ensuring_names_is_idempotent_and_counted(client):
    client.ensure_resource_class('CUSTOM_QAT')
    client.ensure_resource_class('CUSTOM_QAT')
    client.ensure_trait('CUSTOM_QAT_8086')
    client.ensure_trait('CUSTOM_QAT_8086')

    assert client.calls.by_method == {'PUT': 4}
    assert client.calls.snapshot() == (0, 4)
    client.calls.reset()
    assert client.calls.snapshot() == (0, 0)


def test_unknown_custom_name_is_a_placement_error(client, compute_node):
    with pytest.raises(placement_client.PlacementError) as caught:
        client.put_inventories(compute_node['uuid'],
                               compute_node['generation'],
                               {'CUSTOM_NEVER_CREATED': {'total': 1}})
    assert caught.value.status == 400


def test_client_from_placement_options_over_http(tmp_path, placement_url,
                                                 compute_node):
    # The [placement] section is read by keystoneauth's own loaders; the
    # admin_token plugin stands in for Keystone with noauth2 Placement.
    config_file = tmp_path / 'cyborg.conf'
    config_file.write_text(
        '[placement]\n'
        'auth_type = admin_token\n'
        'endpoint = %s\n'
        'token = admin\n'
        'endpoint_override = %s\n'
        'timeout = 30\n' % (placement_url, placement_url))
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf([], default_config_files=[str(config_file)])

    client = placement_client.PlacementClient.from_conf(conf)

    found = placement_sync.find_compute_node(client, [COMPUTE_HOST])
    assert found.uuid == compute_node['uuid']
    assert conf.placement.service_type == 'placement'
    assert conf.placement.valid_interfaces == ['internal', 'public']


def test_served_placement_answers_another_process(placement_url,
                                                 compute_node):
    # What the API, agent or a benchmark in its own process would do.
    script = (
        'import json, sys\n'
        'from keystoneauth1 import adapter, session\n'
        'from cyborg.clients import placement\n'
        's = session.Session(additional_headers={"X-Auth-Token": "admin"})\n'
        'client = placement.PlacementClient(adapter.Adapter(\n'
        '    s, service_type="placement", endpoint_override=sys.argv[1]))\n'
        'rp = client.find_provider_by_name(sys.argv[2])\n'
        'print(json.dumps([rp["uuid"], client.calls.snapshot()]))\n')

    done = subprocess.run(
        [sys.executable, '-c', script, placement_url, COMPUTE_HOST],
        capture_output=True, text=True, timeout=60, check=True)

    assert json.loads(done.stdout) == [compute_node['uuid'], [1, 0]]


def test_sample_options_cover_session_auth_and_adapter():
    (group, opts), = placement_conf.list_opts().items()
    names = {opt.dest for opt in opts}
    assert group.name == 'placement'
    assert {'auth_type', 'auth_url', 'username', 'password',
            'project_name', 'cafile', 'timeout', 'region_name',
            'valid_interfaces', 'endpoint_override'} <= names
