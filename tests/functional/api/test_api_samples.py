"""The JSON samples of the API reference, checked against the service.

Every file in ``doc/source/api/samples/`` is written by this module: each
test drives the real app (WebTest, and a real conductor on oslo.messaging's
in-process transport where a request needs one) through the requests that
``doc/source/api/`` documents, and compares each response body, and each
request body it sent, with the committed sample of that name.

Before comparing, what changes from run to run is replaced by placeholders
in both: uuids (also inside keys and sentences), ISO 8601 timestamps, the
scheme and host of links, and the values of an ARQ's
``attach_handle_info`` (a bind takes any free handle of the device).
Everything else must be equal: keys and their order, nesting, JSON types
(``null`` included) and the stable values. A field added, removed, renamed
or changed in type fails here. The last test checks that every committed
sample is made here and included by a page of the reference, and that every
sample a page includes exists.

To regenerate the samples after an intended change of the API::

    CYBORG_REGENERATE_API_SAMPLES=1 \\
        pytest tests/functional/api/test_api_samples.py

That writes the samples that are new or whose normalised form changed, with
the real values the service answered, and leaves the others alone (so an
unchanged sample keeps its uuids and timestamps and the diff shows only the
change). ``CYBORG_REGENERATE_API_SAMPLES=all`` rewrites every sample, so
that the uuids agree again between the samples of one test. Then update the
text of the API reference and commit both. The tests run on SQLite, MariaDB
and PostgreSQL; a sample that comes out differently on two engines fails
even while regenerating.
"""

import difflib
import json
import os
import pathlib
import re
import time

import pytest
import sqlalchemy as sa

from cyborg.accelerator.drivers import fake
from cyborg.db import models
from cyborg.objects import inventory
from tests import arq_stack
from tests import inventory_rows
from tests.arq_stack import ARQS
from tests.arq_stack import BIND_PATHS
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

ROOT = pathlib.Path(__file__).resolve().parents[3]
API_DOCS = ROOT / 'doc' / 'source' / 'api'
SAMPLES = API_DOCS / 'samples'
_REGENERATE = os.environ.get('CYBORG_REGENERATE_API_SAMPLES', '')
REGENERATE = _REGENERATE in ('1', 'all')
REWRITE_ALL = _REGENERATE == 'all'

# Where the samples say the service is: devstack mounts it at /accelerator.
ENVIRON = {'HTTP_HOST': 'controller', 'SCRIPT_NAME': '/accelerator'}

PROFILES = '/v2/device_profiles'
DEVICES = '/v2/devices'
DEPLOYABLES = '/v2/deployables'
ATTRIBUTES = '/v2/attributes'

HOST = 'compute1'
PROJECT = '6c2b3e5d0f8a4b1c9d7e2f4a6b8c0d1e'
ADMIN = {'X-Roles': 'admin,manager,member,reader',
         'X-Project-Id': 'b7e9d4c2a1f04e6a8c3b5d7f9e1a2c4b',
         'X-User-Id': 'admin'}
MEMBER = {'X-Roles': 'member,reader', 'X-Project-Id': PROJECT,
          'X-User-Id': 'demo'}


def version(v):
    return {'OpenStack-API-Version': 'accelerator %s' % v}


PROFILE_NAME = 'fpga-dp'
NEW_PROFILE = [{
    'name': PROFILE_NAME,
    'description': 'One FPGA region of the fake driver',
    'groups': [{'resources:FPGA': '1',
                'trait:CUSTOM_FAKE_DEVICE': 'required'}],
}]
INSTANCE = '2d1f5f2a-7b1e-4a6c-9d3e-5f0a8b7c6d54'
OTHER_INSTANCE = '9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d'
UNKNOWN = 'e3b0c442-98fc-4c14-9afb-f4c8996fb924'


# -- comparing with the committed samples ------------------------------------

UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                  r'[0-9a-f]{12}', re.IGNORECASE)
TIMESTAMP = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?'
                       r'(Z|[+-]\d\d:\d\d)?')
SCHEME_AND_HOST = re.compile(r'^https?://[^/]+')
# Objects whose string values depend on the run: which attach handle a
# bind took.
VARYING = frozenset({'attach_handle_info'})

# name -> normalised text, of the samples this session wrote.
_written = {}


def _normalised_string(text):
    text = SCHEME_AND_HOST.sub('<scheme://host>', text)
    text = UUID.sub('<uuid>', text)
    return TIMESTAMP.sub('<timestamp>', text)


def normalise(value, varying=False):
    if isinstance(value, dict):
        return {_normalised_string(k): normalise(v, varying or k in VARYING)
                for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v, varying) for v in value]
    if isinstance(value, str):
        return '<varies>' if varying else _normalised_string(value)
    return value


def _text(document):
    return json.dumps(document, indent=4) + '\n'


def check(name, document):
    """``document`` (a response or request body) matches sample ``name``."""
    path = SAMPLES / name
    new = _text(normalise(document))
    if REGENERATE:
        if name in _written:
            if _written[name] != new:
                _fail(name, _written[name], new,
                      'differs between database engines')
            return
        _written[name] = new
        if (REWRITE_ALL or not path.exists() or
                _text(normalise(json.loads(path.read_text()))) != new):
            SAMPLES.mkdir(parents=True, exist_ok=True)
            path.write_text(_text(document))
        return
    if not path.exists():
        pytest.fail('doc/source/api/samples/%s does not exist: run this test '
                    'with CYBORG_REGENERATE_API_SAMPLES=1.' % name,
                    pytrace=False)
    committed = _text(normalise(json.loads(path.read_text())))
    if committed != new:
        _fail(name, committed, new, 'is out of date')


def _fail(name, old, new, what):
    diff = ''.join(difflib.unified_diff(
        old.splitlines(True), new.splitlines(True),
        'samples/%s (committed)' % name, 'samples/%s (service)' % name))
    pytest.fail('doc/source/api/samples/%s %s; if the API changed on '
                'purpose, run this test with CYBORG_REGENERATE_API_SAMPLES=1 '
                'and update the API reference.\n%s' % (name, what, diff),
                pytrace=False)


# -- fixtures -----------------------------------------------------------------

transport = arq_stack.transport


@pytest.fixture
def api(conf, db, transport):
    return arq_stack.webtest_app(conf, db, transport, extra_environ=ENVIRON)


@pytest.fixture
def stored(db):
    """The fake driver's FPGA on ``HOST``, as the conductor stores it."""
    return arq_stack.store_fake_fpga(db, HOST)


@pytest.fixture
def rp_uuid(db, stored):
    """The resource provider of the fake FPGA's deployable."""
    return arq_stack.deployable_rp(db, stored)


@pytest.fixture
def arq_conductor(conf, db, transport):
    with arq_stack.serving_conductor(transport, db,
                                     arq_stack.binder(conf)) as endpoint:
        yield endpoint.binder


@pytest.fixture
def device_conductor(db, transport, placement):  # noqa: F811
    create_compute_node(placement.adapter(), HOST)
    with arq_stack.serving_conductor(transport, db,
                                     placement_client=placement.client()):
        yield placement


def create_profile(api):
    return api.post_json(PROFILES, NEW_PROFILE, headers=ADMIN, status=201)


def bind_body(arqs, rp, instance):
    return arq_stack.bind_body(arqs, rp, instance, HOST)


def wait_resolved(api, instance):
    return arq_stack.resolved_listing(api, instance, headers=MEMBER)


# -- the samples --------------------------------------------------------------

def test_versions(api):
    check('versions-root-resp.json', api.get('/', status=200).json)
    check('versions-v2-resp.json', api.get('/v2', status=200).json)


def test_device_profiles(api):
    check('device-profiles-create-req.json', NEW_PROFILE)
    created = create_profile(api)
    check('device-profiles-create-resp.json', created.json)
    uuid = created.json['uuid']

    check('device-profiles-list-resp.json',
          api.get(PROFILES, headers=ADMIN, status=200).json)
    one = api.get(PROFILES + '/' + uuid, headers=ADMIN, status=200)
    check('device-profile-get-resp.json', one.json)
    by_name = api.get(PROFILES + '/' + PROFILE_NAME,
                      headers={**ADMIN, **version('2.2')}, status=200)
    assert by_name.json == one.json

    deleted = api.delete(PROFILES + '/' + uuid, headers=ADMIN, status=204)
    assert deleted.body == b''


def test_device_profile_changes(api):
    v27 = version('2.7')
    created = api.post_json(PROFILES, NEW_PROFILE, headers={**ADMIN, **v27},
                            status=201)
    check('device-profile-get-v2.7-resp.json', api.get(
        PROFILES + '/' + PROFILE_NAME, headers={**ADMIN, **v27}).json)
    change = {'description': 'Two FPGA regions of the fake driver',
              'groups': [{'resources:FPGA': '2',
                          'trait:CUSTOM_FAKE_DEVICE': 'required'}]}
    check('device-profile-update-req.json', change)
    check('device-profile-update-resp.json', api.patch_json(
        PROFILES + '/' + PROFILE_NAME, change, headers={**ADMIN, **v27},
        status=200).json)
    check('device-profile-revisions-resp.json', api.get(
        PROFILES + '/' + PROFILE_NAME + '/revisions',
        headers={**MEMBER, **v27}).json)

    private = {'is_public': False}
    check('device-profile-private-req.json', private)
    api.patch_json(PROFILES + '/' + PROFILE_NAME, private,
                   headers={**ADMIN, **v27}, status=200)
    share = {'project_id': PROJECT}
    check('device-profile-projects-add-req.json', share)
    check('device-profile-projects-add-resp.json', api.post_json(
        PROFILES + '/' + PROFILE_NAME + '/projects', share,
        headers={**ADMIN, **v27}, status=201).json)
    check('device-profile-projects-list-resp.json', api.get(
        PROFILES + '/' + created.json['uuid'] + '/projects',
        headers={**ADMIN, **v27}).json)
    arqs = api.post_json(ARQS, {'device_profile_name': PROFILE_NAME},
                         headers={**MEMBER, **v27}, status=201)
    check('arqs-create-v2.7-resp.json', arqs.json)
    api.delete(PROFILES + '/' + PROFILE_NAME + '/projects/' + PROJECT,
               headers={**ADMIN, **v27}, status=204)

    api.patch_json(PROFILES + '/' + PROFILE_NAME,
                   {'is_public': True, 'enabled': False},
                   headers={**ADMIN, **v27}, status=200)
    check('error-409-disabled-resp.json', api.post_json(
        ARQS, {'device_profile_name': PROFILE_NAME}, headers=MEMBER,
        status=409).json)


def test_limits(api):
    create_profile(api)
    api.post_json(ARQS, {'device_profile_name': PROFILE_NAME},
                  headers=MEMBER, status=201)
    check('limits-get-resp.json', api.get(
        '/v2/limits', headers={**MEMBER, **version('2.8')}, status=200).json)


def test_accelerator_requests(api, rp_uuid, arq_conductor):
    create_profile(api)
    new_arqs = {'device_profile_name': PROFILE_NAME}
    check('arqs-create-req.json', new_arqs)
    created = api.post_json(ARQS, new_arqs, headers=MEMBER, status=201)
    check('arqs-create-resp.json', created.json)
    uuid = created.json['arqs'][0]['uuid']
    check('arqs-list-resp.json', api.get(ARQS, headers=MEMBER,
                                         status=200).json)

    bind = bind_body([uuid], rp_uuid, INSTANCE)
    check('arqs-bind-req.json', bind)
    bound = api.patch_json(ARQS, bind, headers=MEMBER, status=202)
    assert bound.body == b''
    resolved = wait_resolved(api, INSTANCE)
    assert resolved.json['arqs'][0]['state'] == 'Bound'
    check('arqs-list-resolved-resp.json', resolved.json)
    check('arq-get-resp.json', api.get(ARQS + '/' + uuid, headers=MEMBER,
                                       status=200).json)

    unbind = {uuid: [{'op': 'remove', 'path': path} for path in BIND_PATHS]}
    check('arq-unbind-req.json', unbind)
    api.patch_json(ARQS + '/' + uuid, unbind, headers=MEMBER, status=202)
    unbound = api.get(ARQS + '/' + uuid, headers=MEMBER, status=200).json
    assert unbound['state'] == 'Unbound'
    check('arq-get-unbound-resp.json', unbound)
    api.delete(ARQS + '?arqs=' + uuid, headers=MEMBER, status=204)

    # Nova's way: bind every ARQ of an instance, delete them by instance.
    again = api.post_json(ARQS, new_arqs, headers=MEMBER, status=201)
    uuids = [a['uuid'] for a in again.json['arqs']]
    api.patch_json(ARQS, bind_body(uuids, rp_uuid, OTHER_INSTANCE),
                   headers=MEMBER, status=202)
    wait_resolved(api, OTHER_INSTANCE)
    api.delete(ARQS + '?instance=' + OTHER_INSTANCE, headers=MEMBER,
               status=204)
    assert api.get(ARQS, headers=MEMBER).json == {'arqs': []}


def test_resolved_listing_while_a_bind_runs_is_423(api, rp_uuid):
    # No conductor listens: the bind stays BindStarted.
    create_profile(api)
    arqs = api.post_json(ARQS, {'device_profile_name': PROFILE_NAME},
                         headers=MEMBER, status=201).json['arqs']
    api.patch_json(ARQS, bind_body([a['uuid'] for a in arqs], rp_uuid,
                                   INSTANCE), headers=MEMBER, status=202)

    waiting = api.get(ARQS, {'instance': INSTANCE, 'bind_state': 'resolved'},
                      headers=MEMBER, status=423)

    check('error-423-resp.json', waiting.json)


def observed(db, stored):
    """The fake device's health and usage, as the conductor stores an
    agent's observations."""
    inventory_rows.set_health(
        db.engine, stored.uuid, health='degraded',
        health_reason='PCIe link trained at x8 of x16',
        health_updated_at=models.utcnow())
    inventory_rows.record_usage(db.engine, HOST, {str(fake.ADDRESS): {
        'pcie_link_gts': 8.0, 'pcie_link_width': 8, 'temperature_c': 54,
        'observed_at': time.time()}})


def test_devices(api, db, stored, device_conductor):
    check('devices-list-resp.json', api.get(DEVICES, headers=ADMIN,
                                            status=200).json)
    item = DEVICES + '/' + stored.uuid
    check('device-get-resp.json', api.get(item, headers=ADMIN,
                                          status=200).json)
    v23 = {**ADMIN, **version('2.3')}
    check('device-get-v2.3-resp.json', api.get(item, headers=v23,
                                               status=200).json)

    disabled = api.post(item + '/disable', headers=v23, status=200)
    assert disabled.json['status'] == 'maintaining'
    check('device-disable-resp.json', disabled.json)
    enabled = api.post(item + '/enable', headers=v23, status=200)
    assert enabled.json['status'] == 'enabled'
    check('device-enable-resp.json', enabled.json)

    observed(db, stored)
    v25 = {**ADMIN, **version('2.5')}
    check('device-get-v2.5-resp.json', api.get(item, headers=v25,
                                               status=200).json)
    check('devices-list-health-resp.json', api.get(
        DEVICES + '?health=degraded', headers=v25, status=200).json)
    override = {'health_override': 'quarantine'}
    check('device-health-override-req.json', override)
    quarantined = api.put_json(item + '/health_override', override,
                               headers=v25, status=200)
    assert quarantined.json['quarantined'] is True
    check('device-health-override-resp.json', quarantined.json)
    cleared = api.delete(item + '/health_override', headers=v25, status=204)
    assert cleared.body == b''


def test_deployables(api, db, stored, arq_conductor):
    check('deployables-list-resp.json',
          api.get(DEPLOYABLES, headers=ADMIN, status=200).json)
    uuid = stored.deployables['FakeDevice'].uuid
    check('deployable-get-resp.json',
          api.get(DEPLOYABLES + '/' + uuid, headers=ADMIN, status=200).json)

    program = [{'path': '/program', 'op': 'replace',
                'value': [{'image_uuid':
                           '5b7c9d1e-3f2a-4b6c-8d0e-1f2a3b4c5d6e'}]}]
    check('deployable-program-req.json', program)
    refused = api.patch_json(DEPLOYABLES + '/%s/program' % uuid, program,
                             headers=ADMIN, status=409)
    check('deployable-program-resp.json', refused.json)

    observed(db, stored)
    check('deployable-get-v2.5-resp.json', api.get(
        DEPLOYABLES + '/' + uuid, headers={**ADMIN, **version('2.5')},
        status=200).json)

    scrubbed(db, stored)
    check('deployable-get-v2.9-resp.json', api.get(
        DEPLOYABLES + '/' + uuid, headers={**ADMIN, **version('2.9')},
        status=200).json)


def scrubbed(db, stored):
    """The fake FPGA scrubbed by its driver, its first handle dirty after
    a scrub that failed, its second in use."""
    deployable = stored.deployables['FakeDevice']
    now = models.utcnow().replace(microsecond=0)
    handles = models.AttachHandle.__table__
    with db.engine.begin() as connection:
        connection.execute(models.Attribute.__table__.insert().values(
            uuid='7d1e3f5a-9b2c-4d6e-8f0a-1b2c3d4e5f6a',
            deployable_id=deployable.id, key='scrub_method', value='fake',
            origin='driver', created_at=now))
        first, second = connection.execute(
            sa.select(handles.c.id).where(
                handles.c.deployable_id == deployable.id)
            .order_by(handles.c.id).limit(2)).scalars()
        connection.execute(handles.update().where(handles.c.id == first)
                           .values(state='dirty', in_use=True,
                                   dirty_since=now,
                                   last_scrub_result='failed',
                                   last_scrub_step='verify',
                                   last_scrub_message='the region still '
                                   'holds data', last_scrub_at=now,
                                   last_scrub_seconds=0.8))
        connection.execute(handles.update().where(handles.c.id == second)
                           .values(state='in_use', in_use=True))


def test_attributes(api, stored):
    new = {'deployable_id': stored.deployables['FakeDevice'].uuid,
           'key': 'lab_rack', 'value': 'r12'}
    check('attribute-create-req.json', new)
    created = api.post_json(ATTRIBUTES, new, headers=ADMIN, status=201)
    check('attribute-create-resp.json', created.json)
    uuid = created.json['uuid']

    check('attributes-list-resp.json',
          api.get(ATTRIBUTES, headers=ADMIN, status=200).json)
    check('attribute-get-resp.json',
          api.get(ATTRIBUTES + '/' + uuid, headers=ADMIN, status=200).json)

    deleted = api.delete(ATTRIBUTES + '/' + uuid, headers=ADMIN, status=204)
    assert deleted.body == b''


def test_services(api, db):
    from tests.functional.api.test_services import add_service
    add_service(db, 'controller', 'cyborg-conductor', rpc_version='1.4')
    add_service(db, HOST, 'cyborg-agent', rpc_version='1.1')
    add_service(db, 'compute2', 'cyborg-agent', rpc_version='1.1',
                age=3600)
    check('services-list-resp.json', api.get(
        '/v2/services', headers={**ADMIN, **version('2.4')},
        status=200).json)


CONFIG_POLICIES = '/v2/device_config_policies'
NEW_CONFIG_POLICY = {
    'name': 'nic-8-vfs', 'priority': 10, 'hosts': ['compute*'],
    'devices': {'vendor_id': '8086', 'product_id': '1572'},
    'kind': 'sriov_vfs', 'settings': {'num_vfs': 8}}


def test_device_config_policies(api, db):
    port = inventory.Device(
        type='NIC', vendor='8086', model='Ethernet Controller X710',
        controlpath_type='PCI',
        controlpath_info=inventory.PCIAddress.parse(
            '0000:3b:00.0').as_info(),
        std_board_info={'vendor_id': '8086', 'product_id': '1572',
                        'class_code': '020000', 'sriov_totalvfs': '63'})
    inventory_rows.add_host(db.engine, HOST, [port])
    headers = {**ADMIN, **version('2.6')}

    check('device-config-policy-create-req.json', NEW_CONFIG_POLICY)
    made = api.post_json(CONFIG_POLICIES, NEW_CONFIG_POLICY, headers=headers,
                         status=201).json
    check('device-config-policy-create-resp.json', made)
    item = CONFIG_POLICIES + '/' + made['uuid']
    check('device-config-policies-list-resp.json',
          api.get(CONFIG_POLICIES, headers=headers, status=200).json)
    check('device-config-policy-get-resp.json',
          api.get(item, headers=headers, status=200).json)
    check('device-config-policy-status-resp.json',
          api.get(item + '/status', headers=headers, status=200).json)
    change = {'settings': {'num_vfs': 4}}
    check('device-config-policy-update-req.json', change)
    check('device-config-policy-update-resp.json',
          api.patch_json(item, change, headers=headers, status=200).json)
    check('device-config-policy-unfit-resp.json', api.post_json(
        CONFIG_POLICIES, {**NEW_CONFIG_POLICY, 'name': 'nic-64-vfs',
                          'priority': 20, 'settings': {'num_vfs': 64}},
        headers=headers, status=400).json)
    check('device-config-policy-conflict-resp.json', api.post_json(
        CONFIG_POLICIES, {**NEW_CONFIG_POLICY, 'name': 'nic-passthrough',
                          'kind': 'driver_binding',
                          'settings': {'driver': 'vfio-pci'}},
        headers=headers, status=409).json)
    deleted = api.delete(item, headers=headers, status=204)
    assert deleted.body == b''


def test_errors(api):
    bad = [{**NEW_PROFILE[0], 'groups': [{'resources:FPGA': '0'}]}]
    check('error-400-resp.json', api.post_json(
        PROFILES, bad, headers=ADMIN, status=400).json)
    check('error-404-resp.json', api.get(
        ARQS + '/' + UNKNOWN, headers=MEMBER, status=404).json)
    check('error-406-resp.json', api.get(
        PROFILES + '/' + PROFILE_NAME, headers=ADMIN, status=406).json)
    create_profile(api)
    api.post_json(ARQS, {'device_profile_name': PROFILE_NAME},
                  headers=MEMBER, status=201)
    check('error-409-resp.json', api.delete(
        PROFILES + '?value=' + PROFILE_NAME, headers=ADMIN, status=409).json)


# -- the samples and the pages agree ------------------------------------------

INCLUDE = re.compile(r'^ *\.\. literalinclude:: samples/(\S+)$',
                     re.MULTILINE)


def test_each_sample_is_made_here_and_shown_in_the_reference():
    made = set(re.findall(r"'([\w.-]+\.json)'",
                          pathlib.Path(__file__).read_text()))
    committed = {p.name for p in SAMPLES.glob('*.json')}
    shown = {name for page in API_DOCS.glob('*.rst')
             for name in INCLUDE.findall(page.read_text())}

    assert committed - made == set(), 'samples no test makes'
    if not REGENERATE:
        assert made - committed == set(), 'samples not committed'
    assert shown - committed == set(), 'pages include missing samples'
    assert committed - shown == set(), 'samples no page shows'
