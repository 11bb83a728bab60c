"""python-openstackclient 10.5's own ``openstack accelerator`` commands.

From 10.4 on, OSC ships the accelerator commands itself, on openstacksdk's
accelerator proxy; it cannot share the test venv with python-cyborgclient,
so it runs from a venv of its own (osc_venv.py, installed on first use).
Every command it ships runs here as a separate process against the API
served on a real port of 127.0.0.1, on MariaDB (the wire is the subject;
the API and conductor tests run the same SQL on each engine), with
keystoneauth's ``none`` plugin as an operator without Keystone would run
it. Unlike python-cyborgclient, OSC 10.5 sends no microversion header
unless ``--os-accelerator-api-version`` asks for one.

What runs for real besides the API: the conductor on oslo.messaging's
in-process transport (binding ARQs to the fake driver's deployable and
syncing a real Placement on enable/disable) and a real Glance for
``deployable program``, which looks the image up first. ``arq bind``
looks the server up in Nova's compute API first: a stand-in answers that
(``FakeCompute``). Nova's bind events go to a recorder.
"""

import http.server
import json
import re
import subprocess
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from cyborg.conductor import placement_sync
from cyborg.db import models
from tests import arq_stack
from tests import conftest
from tests.arq_stack import handles_in_use
from tests.functional.clients import osc_venv
from tests.functional.clients.conftest import conductor_service
from tests.glance_service import glance  # noqa: F401
from tests.glance_service import glance_service  # noqa: F401
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

osc_native = osc_venv.osc_native
database_url = conftest.database_url_on('mysql')

HOST = arq_stack.HOST
TIMEOUT = 60
# The API's answer to a request below 2.3 leaves the device status out.
V23 = ('--os-accelerator-api-version', '2.3')


# -- runner ------------------------------------------------------------------

def argv(openstack, service, *args):
    """The command line; leading ``--os-*`` options and their values are
    global options, put before ``accelerator``."""
    options = []
    while args and args[0].startswith('--os-'):
        options.extend(args[:2])
        args = args[2:]
    return [openstack, '--os-auth-type', 'none', '--os-endpoint',
            service.url + '/v2', *options, 'accelerator', *args]


def run(openstack, service, env, *args):
    return subprocess.run(argv(openstack, service, *args), env=env,
                          cwd=env['HOME'], capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def run_all(openstack, service, env, commands):
    """``(returncode, stdout, stderr)`` of each command, run side by side."""
    procs = [subprocess.Popen(argv(openstack, service, *args), env=env,
                              cwd=env['HOME'], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for args in commands]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT)
        results.append((proc.returncode, out, err))
    return results


class OSC:
    """OSC 10.5 pointed at one served API, in one environment."""

    def __init__(self, openstack, service, env):
        self.openstack = openstack
        self.service = service
        self.env = env

    def run(self, *args):
        return run(self.openstack, self.service, self.env, *args)

    def json(self, *args):
        done = self.run(*args, '-f', 'json')
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def all(self, *commands):
        return run_all(self.openstack, self.service, self.env, commands)

    def all_json(self, *commands):
        """The JSON output of each command, run side by side; each must
        succeed."""
        results = self.all(*[(*args, '-f', 'json') for args in commands])
        for returncode, _, err in results:
            assert returncode == 0, err
        return [json.loads(out) for _, out, _ in results]

    def mark(self):
        return len(self.service.recorder.api_calls())

    def calls(self, since=0):
        """(method, path below /v2, query, status) of the API calls."""
        return [(e['method'], e['path'].split('/v2', 1)[1], e['query'],
                 e['status'])
                for e in self.service.recorder.api_calls()[since:]]

    def versioned(self, since=0):
        """(method, path below /v2, status, microversion header or '')."""
        return [(e['method'], e['path'].split('/v2', 1)[1], e['status'],
                 e['version'] or '') for e in self.exchanges(since)]

    def exchanges(self, since=0):
        return self.service.recorder.api_calls()[since:]


# -- stand-ins ---------------------------------------------------------------

class ProgrammingAgent(arq_stack.NoAgent):
    """The host's agent as far as these commands reach it: binding the
    fake device needs none, programming it loads the image (recorded);
    anything else is a bug."""

    def __init__(self):
        self.programmed = []

    def program(self, context, host, driver_name, controlpath_info,
                bitstream):
        self.programmed.append((host, driver_name, bitstream['image_id']))
        return {'device': controlpath_info, 'image_id': bitstream['image_id'],
                'function_uuid': None, 'seconds': 0.0}


class FakeCompute:
    """Nova's compute API as far as ``arq bind`` reads it: version
    discovery and finding one server by id or by name."""

    PREFIX = '/v2.1'

    def __init__(self):
        self.servers = {}  # id -> name
        self.requests = []
        compute = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                compute.requests.append(self.path)
                status, body = compute.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                       Handler)
        self.url = 'http://127.0.0.1:%d' % self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        daemon=True)
        self._thread.start()

    def add_server(self, name):
        server_id = str(uuid.uuid4())
        self.servers[server_id] = name
        return server_id

    def _server_view(self, server_id):
        return {'id': server_id, 'name': self.servers[server_id],
                'status': 'BUILD', 'links': []}

    def _version(self):
        return {'id': 'v2.1', 'status': 'CURRENT', 'version': '2.96',
                'min_version': '2.1', 'updated': '2013-07-23T11:33:21Z',
                'links': [{'rel': 'self', 'href': self.url + '/v2.1/'}]}

    def answer(self, path):
        path, _, query = path.partition('?')
        path = path.rstrip('/')
        if path == '':
            return 200, {'versions': [self._version()]}
        if path == self.PREFIX:
            return 200, {'version': self._version()}
        match = re.fullmatch(self.PREFIX + r'/servers(/detail)?', path)
        if match:
            params = dict(p.split('=', 1) for p in query.split('&') if p)
            wanted = params.get('name')
            found = [self._server_view(s) for s, n in self.servers.items()
                     if wanted is None or re.search(wanted, n)]
            return 200, {'servers': found}
        match = re.fullmatch(self.PREFIX + r'/servers/([^/]+)', path)
        if match and match.group(1) in self.servers:
            return 200, {'server': self._server_view(match.group(1))}
        return 404, {'itemNotFound': {'code': 404,
                                      'message': 'Not found: %s' % path}}

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


# -- fixtures ----------------------------------------------------------------

transport = arq_stack.transport


@pytest.fixture
def compute():
    server = FakeCompute()
    yield server
    server.stop()


@pytest.fixture
def conductor(conf, db, transport, nova, placement):  # noqa: F811
    """The conductor: binds ARQs, syncs ``placement`` on enable/disable."""
    with arq_stack.serving_conductor(
            transport, db,
            arq_stack.binder(conf, ProgrammingAgent(), nova=nova),
            placement.client()) as endpoint:
        yield endpoint.binder


# The API on a real port, casting to ``conductor``.
service = conductor_service


@pytest.fixture
def osc(osc_native, service, client_env, compute):
    # Nothing of the test venv's Python may leak into the other venv.
    env = {k: v for k, v in client_env.items()
           if k not in ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV')}
    # The none plugin sends every service to --os-endpoint; Nova's goes
    # to the stand-in (and Glance's, in the program test, to Glance).
    env['OS_COMPUTE_ENDPOINT_OVERRIDE'] = compute.url + FakeCompute.PREFIX
    return OSC(osc_native, service, env)


@pytest.fixture
def inventory(db):
    return arq_stack.store_fake_fpga(db, HOST)


@pytest.fixture
def fpga_rp(db, inventory):
    """The resource provider of the fake FPGA deployable."""
    return arq_stack.deployable_rp(db, inventory)


@pytest.fixture
def profile(admin_context):
    return arq_stack.make_profile(admin_context, PROFILE, ARQ_GROUPS)


# -- database helpers --------------------------------------------------------

def arq_rows(db):
    """Every ARQ by uuid: state, binding, group and attach handle."""
    arqs = models.ExtendedAcceleratorRequest.__table__
    handles = models.AttachHandle.__table__
    with db.engine.connect() as conn:
        found = conn.execute(
            sa.select(arqs.c.uuid, arqs.c.state, arqs.c.hostname,
                      arqs.c.device_rp_uuid, arqs.c.instance_uuid,
                      arqs.c.device_profile_group_id,
                      handles.c.uuid.label('handle_uuid'),
                      handles.c.in_use)
            .select_from(arqs.outerjoin(
                handles, arqs.c.attach_handle_id == handles.c.id))).all()
    return {r.uuid: r for r in found}


def column_of(db, model, column, row_uuid):
    with db.engine.connect() as conn:
        return conn.execute(sa.select(column).where(
            model.uuid == row_uuid)).scalar_one()


def fpga_inventory(placement):  # noqa: F811
    name = placement_sync.provider_name(HOST, 'FakeDevice')
    response = placement.adapter().get(
        '/resource_providers/%s/inventories' % placement_sync.provider_uuid(
            name))
    assert response.status_code == 200, response.text
    return response.json()['inventories']['FPGA']


def wait_resolved(osc, *arq_uuids, timeout=30):
    """``arq show`` of each ARQ (side by side) until its bind is over:
    the bind runs after the client got its 202."""
    deadline = time.monotonic() + timeout
    resolved = {}
    while True:
        pending = [u for u in arq_uuids if u not in resolved]
        for one in osc.all_json(*[('arq', 'show', u) for u in pending]):
            if one['state'] not in ('Initial', 'BindStarted'):
                resolved[one['uuid']] = one
        if len(resolved) == len(arq_uuids):
            return [resolved[u] for u in arq_uuids]
        assert time.monotonic() < deadline, resolved
        time.sleep(0.2)


# -- device profiles ---------------------------------------------------------

DP_GROUPS = [
    {'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required'},
    {'resources:CUSTOM_GZIP': '2', 'accel:function_name': 'gzip'},
]
DP_SHOW = ['created_at', 'updated_at', 'uuid', 'name', 'groups',
           'description']
DP_LIST = ['uuid', 'name', 'groups', 'description']


def _group_option(group):
    return ','.join('%s=%s' % item for item in group.items())


def test_device_profile_create_list_show_delete(osc):
    created, legacy = osc.all_json(
        ('device', 'profile', 'create', 'osc-fpga',
         '--group', _group_option(DP_GROUPS[0]),
         '--group', _group_option(DP_GROUPS[1]),
         '--description', 'two groups'),
        # The deprecated form: the groups as a JSON positional.
        ('device', 'profile', 'create', 'osc-legacy',
         json.dumps([{'resources:FPGA': '1'}])))

    assert list(created) == DP_SHOW
    assert (created['name'], created['groups'], created['description']) == (
        'osc-fpga', DP_GROUPS, 'two groups')
    assert created['updated_at'] is None
    assert created['created_at'].endswith('+00:00')
    assert (legacy['name'], legacy['groups'], legacy['description']) == (
        'osc-legacy', [{'resources:FPGA': '1'}], None)
    stored = osc.service.profiles()
    assert sorted(stored) == ['osc-fpga', 'osc-legacy']
    assert stored['osc-fpga'].uuid == created['uuid']
    assert stored['osc-fpga'].profile_json['groups'] == DP_GROUPS
    assert stored['osc-fpga'].description == 'two groups'
    assert stored['osc-legacy'].description is None
    # An array of one profile; no read-back: the 201 body is the profile.
    posts = {json.loads(e['body'])[0]['name']: json.loads(e['body'])
             for e in osc.exchanges()}
    assert posts == {
        'osc-fpga': [{'name': 'osc-fpga', 'groups': DP_GROUPS,
                      'description': 'two groups'}],
        'osc-legacy': [{'name': 'osc-legacy',
                        'groups': [{'resources:FPGA': '1'}],
                        'description': None}]}
    assert sorted(osc.calls()) == [('POST', '/device_profiles', '', 201)] * 2

    mark = osc.mark()
    (listed_rc, listed, _), (long_rc, long_listed, _), (
        by_uuid_rc, by_uuid, _), (by_name_rc, by_name, _), (
        name_at_20_rc, _, name_at_20_err) = osc.all(
        ('device', 'profile', 'list', '-f', 'json'),
        ('device', 'profile', 'list', '--long', '-f', 'json'),
        ('device', 'profile', 'show', created['uuid'], '-f', 'json'),
        ('--os-accelerator-api-version', '2.2',
         'device', 'profile', 'show', 'osc-fpga', '-f', 'json'),
        # Without a header the request is 2.0: names need 2.2.
        ('device', 'profile', 'show', 'osc-fpga', '-f', 'json'))

    assert (listed_rc, long_rc, by_uuid_rc, by_name_rc) == (0, 0, 0, 0)
    listed = sorted(json.loads(listed), key=lambda p: p['name'])
    assert [list(p) for p in listed] == [DP_LIST] * 2
    assert [(p['uuid'], p['name'], p['groups'], p['description'])
            for p in listed] == [
        (created['uuid'], 'osc-fpga', DP_GROUPS, 'two groups'),
        (legacy['uuid'], 'osc-legacy', [{'resources:FPGA': '1'}], None)]
    long_listed = sorted(json.loads(long_listed), key=lambda p: p['name'])
    assert [list(p) for p in long_listed] == [
        DP_LIST + ['created_at', 'updated_at']] * 2
    assert [{k: p[k] for k in DP_SHOW} for p in long_listed] == [
        created, legacy]
    assert json.loads(by_uuid) == created
    assert json.loads(by_name) == created
    assert name_at_20_rc == 1
    assert 'needs microversion 2.2' in name_at_20_err
    assert sorted(osc.versioned(mark)) == sorted([
        ('GET', '/device_profiles', 200, ''),
        ('GET', '/device_profiles', 200, ''),
        ('GET', '/device_profiles/' + created['uuid'], 200, ''),
        ('GET', '/device_profiles/osc-fpga', 200, 'accelerator 2.2'),
        ('GET', '/device_profiles/osc-fpga', 406, '')])

    mark = osc.mark()
    deleted = osc.run('device', 'profile', 'delete', 'osc-fpga',
                      legacy['uuid'])

    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == ''
    assert osc.service.profiles() == {}
    assert osc.calls(mark) == [
        ('DELETE', '/device_profiles/osc-fpga', '', 204),
        ('DELETE', '/device_profiles/' + legacy['uuid'], '', 204)]


def test_device_profile_errors_fail_the_command(osc, profile):
    kept = osc.service.profiles()[profile]
    missing = str(uuid.uuid4())

    results = osc.all(
        ('device', 'profile', 'show', missing),
        ('device', 'profile', 'delete', 'no-such-profile', profile + 'x'),
        ('device', 'profile', 'create', 'bad-key', '--group',
         'resources:FPGA=1,colour=blue'),
        ('device', 'profile', 'create', profile, '--group',
         'resources:FPGA=1'),
        # Refused by the client: no request.
        ('device', 'profile', 'create', 'no-groups'),
    )

    assert [rc for rc, _, _ in results] == [1] * 5
    show, delete, bad_key, duplicate, no_groups = [e for _, _, e in results]
    assert missing in show
    assert '2 of 2 device profiles failed to delete.' in delete
    assert "Failed to delete device profile 'no-such-profile'" in delete
    # The service's sentence reaches the operator.
    assert "Group 0 has the key 'colour'" in bad_key
    assert 'ConflictException: 409' in duplicate
    assert profile in duplicate
    assert 'At least one --group is required.' in no_groups
    assert sorted(osc.calls()) == sorted([
        ('GET', '/device_profiles/' + missing, '', 404),
        ('DELETE', '/device_profiles/no-such-profile', '', 404),
        ('DELETE', '/device_profiles/%sx' % profile, '', 404),
        ('POST', '/device_profiles', '', 400),
        ('POST', '/device_profiles', '', 409)])
    after = osc.service.profiles()
    assert list(after) == [profile]
    assert after[profile].uuid == kept.uuid


# -- devices -----------------------------------------------------------------

DEVICE_SHOW = ['created_at', 'updated_at', 'uuid', 'type', 'vendor', 'model',
               'hostname', 'std_board_info', 'vendor_board_info', 'status']
DEVICE_LIST = ['uuid', 'type', 'vendor', 'hostname', 'std_board_info']
DEVICE_LONG = DEVICE_LIST + ['created_at', 'updated_at', 'model',
                             'vendor_board_info']


def test_device_list_and_show(osc, inventory):
    listed, long_listed, shown, listed_23, shown_23 = osc.all_json(
        ('device', 'list'), ('device', 'list', '--long'),
        ('device', 'show', inventory.uuid),
        (*V23, 'device', 'list'), (*V23, 'device', 'show', inventory.uuid))

    expected = {'uuid': inventory.uuid, 'type': 'FPGA', 'vendor': 'abcd',
                'hostname': HOST, 'model': 'FakeFPGA',
                'std_board_info': {'vendor_id': 'abcd', 'product_id': 'abcd'},
                'vendor_board_info': {}, 'updated_at': None}
    # OSC adds a status column whenever the service could give one (its
    # maximum is >= 2.3) but asks for 2.0 unless told: the service leaves
    # status out below 2.3, and OSC prints null.
    assert [list(d) for d in listed] == [DEVICE_LIST + ['status']]
    assert listed[0] == {**{k: expected[k] for k in DEVICE_LIST},
                         'status': None}
    assert [list(d) for d in long_listed] == [DEVICE_LONG + ['status']]
    assert {k: long_listed[0][k] for k in expected} == expected
    assert list(shown) == DEVICE_SHOW
    assert {k: shown[k] for k in expected} == expected
    assert shown['status'] is None
    assert shown['created_at'] == long_listed[0]['created_at']
    assert listed_23 == [{**listed[0], 'status': 'enabled'}]
    assert shown_23 == {**shown, 'status': 'enabled'}
    assert sorted(osc.versioned()) == sorted([
        ('GET', '/devices', 200, ''), ('GET', '/devices', 200, ''),
        ('GET', '/devices/' + inventory.uuid, 200, ''),
        ('GET', '/devices', 200, 'accelerator 2.3'),
        ('GET', '/devices/' + inventory.uuid, 200, 'accelerator 2.3')])


def test_device_disable_and_enable_reach_the_conductor(
        osc, db, inventory, placement):  # noqa: F811
    create_compute_node(placement.adapter(), HOST)
    missing = str(uuid.uuid4())

    disabled = osc.run('device', 'disable', inventory.uuid)

    assert disabled.returncode == 0, disabled.stderr
    assert disabled.stdout == ''
    assert column_of(db, models.Device, models.Device.status,
                     inventory.uuid) == 'maintaining'
    inventory_rp = fpga_inventory(placement)
    assert inventory_rp['total'] == inventory_rp['reserved'] == 16
    shown, = osc.all_json((*V23, 'device', 'show', inventory.uuid))
    assert shown['status'] == 'maintaining'

    enabled = osc.run('device', 'enable', inventory.uuid)

    assert enabled.returncode == 0, enabled.stderr
    assert enabled.stdout == ''
    assert column_of(db, models.Device, models.Device.status,
                     inventory.uuid) == 'enabled'
    assert fpga_inventory(placement)['reserved'] == 0

    results = osc.all(('device', 'disable', missing),
                      ('device', 'enable', missing))
    # A client bug: openstacksdk's Device.enable/disable never look at
    # the answer, so the service's 404 (below) ends in a silent success.
    assert results == [(0, '', ''), (0, '', '')]
    assert column_of(db, models.Device, models.Device.status,
                     inventory.uuid) == 'enabled'
    assert sorted(osc.calls()) == sorted([
        ('POST', '/devices/%s/disable' % inventory.uuid, '', 200),
        ('GET', '/devices/' + inventory.uuid, '', 200),
        ('POST', '/devices/%s/enable' % inventory.uuid, '', 200),
        ('POST', '/devices/%s/disable' % missing, '', 404),
        ('POST', '/devices/%s/enable' % missing, '', 404)])


# -- deployables -------------------------------------------------------------

DEPLOYABLE_SHOW = ['created_at', 'updated_at', 'uuid', 'name']


def test_deployable_list_and_show(osc, inventory):
    deployable = inventory.deployables['FakeDevice']
    missing = str(uuid.uuid4())

    (listed_rc, listed, _), (long_rc, long_listed, _), (
        shown_rc, shown, _), (missing_rc, _, missing_err) = osc.all(
        ('deployable', 'list', '-f', 'json'),
        ('deployable', 'list', '--long', '-f', 'json'),
        ('deployable', 'show', deployable.uuid, '-f', 'json'),
        ('deployable', 'show', missing, '-f', 'json'))

    assert (listed_rc, long_rc, shown_rc, missing_rc) == (0, 0, 0, 1)
    assert json.loads(listed) == [{'uuid': deployable.uuid,
                                   'name': 'FakeDevice',
                                   'device_id': inventory.uuid}]
    long_listed, = json.loads(long_listed)
    assert list(long_listed) == ['created_at', 'updated_at', 'uuid', 'name',
                                 'device_id', 'parent_id', 'root_id',
                                 'num_accelerators']
    assert {k: v for k, v in long_listed.items() if k != 'created_at'} == {
        'updated_at': None, 'uuid': deployable.uuid, 'name': 'FakeDevice',
        'device_id': inventory.uuid, 'parent_id': None, 'root_id': None,
        'num_accelerators': 16}
    shown = json.loads(shown)
    assert list(shown) == DEPLOYABLE_SHOW
    assert shown == {k: long_listed[k] for k in DEPLOYABLE_SHOW}
    assert missing in missing_err
    assert sorted(osc.calls()) == sorted([
        ('GET', '/deployables', '', 200), ('GET', '/deployables', '', 200),
        ('GET', '/deployables/' + deployable.uuid, '', 200),
        ('GET', '/deployables/' + missing, '', 404)])


def test_deployable_program(osc, db, inventory, conductor,
                            glance):  # noqa: F811
    """OSC 10.5 reads the deployable, finds the image in Glance, then
    PATCHes ``/deployables/<uuid>/program/<uuid>`` (openstacksdk names the
    deployable twice) and reads the deployable again."""
    deployable = inventory.deployables['FakeDevice']
    # The conductor finds the image in the same Glance as the client.
    conductor.glance = glance.client()
    osc.env['OS_IMAGE_ENDPOINT_OVERRIDE'] = glance.url
    bs_uuid = str(uuid.uuid4())
    fits = glance.upload_bitstream(b'gzip bitstream', **{
        'bs-uuid': bs_uuid, 'vendor': 'abcd', 'board': 'abcd'})['id']
    other_vendor = glance.upload_bitstream(b'other bitstream', **{
        'vendor': '8086', 'board': 'abcd'})['id']
    no_image = str(uuid.uuid4())
    program_path = '/deployables/%s/program/%s' % (deployable.uuid,
                                                   deployable.uuid)

    programmed = osc.run('deployable', 'program', deployable.uuid, fits,
                         '-f', 'json')

    assert programmed.returncode == 0, programmed.stderr
    shown = json.loads(programmed.stdout)
    assert list(shown) == DEPLOYABLE_SHOW
    assert (shown['uuid'], shown['name']) == (deployable.uuid, 'FakeDevice')
    assert conductor.agent.programmed == [(HOST, 'fake_driver', fits)]
    assert column_of(db, models.Deployable, models.Deployable.bitstream_id,
                     deployable.uuid) == bs_uuid
    assert osc.calls() == [
        ('GET', '/deployables/' + deployable.uuid, '', 200),
        ('PATCH', program_path, '', 200),
        ('GET', '/deployables/' + deployable.uuid, '', 200)]
    assert json.loads(osc.exchanges()[1]['body']) == [
        {'op': 'replace', 'path': '/program',
         'value': [{'image_uuid': fits}]}]

    mark = osc.mark()
    results = osc.all(
        ('deployable', 'program', deployable.uuid, other_vendor),
        # The client looks for the image first: no PATCH.
        ('deployable', 'program', deployable.uuid, no_image),
        ('deployable', 'program', str(uuid.uuid4()), fits))

    assert [rc for rc, _, _ in results] == [1, 1, 1]
    refused, not_found, no_deployable = [err for _, _, err in results]
    assert 'ConflictException: 409' in refused
    assert 'does not fit deployable FakeDevice' in refused
    assert 'image not found: %s' % no_image in not_found
    assert 'No deployable with uuid' in no_deployable
    assert conductor.agent.programmed == [(HOST, 'fake_driver', fits)]
    assert column_of(db, models.Deployable, models.Deployable.bitstream_id,
                     deployable.uuid) == bs_uuid
    assert sorted(c for c in osc.calls(mark) if c[0] == 'PATCH') == [
        ('PATCH', program_path, '', 409)]


# -- attributes --------------------------------------------------------------

ATTRIBUTE_SHOW = ['created_at', 'updated_at', 'uuid', 'deployable_id', 'key',
                  'value']
ATTRIBUTE_LIST = ['uuid', 'deployable_id', 'key', 'value']


def test_attribute_create_list_show_delete(osc, db, inventory):
    deployable = inventory.deployables['FakeDevice']

    created, second = osc.all_json(
        ('device', 'attribute', 'create', deployable.uuid, 'function',
         'gzip'),
        ('device', 'attribute', 'create', deployable.uuid, 'region', 'r0'))

    assert list(created) == ATTRIBUTE_SHOW
    assert (created['deployable_id'], created['key'], created['value'],
            created['updated_at']) == (deployable.uuid, 'function', 'gzip',
                                       None)
    assert second['key'] == 'region'
    # Wrapped, with the deployable as given on the command line.
    assert sorted(json.loads(e['body'])['attribute']['key']
                  for e in osc.exchanges()) == ['function', 'region']
    assert json.loads(osc.exchanges()[0]['body'])['attribute'][
        'deployable_id'] == deployable.uuid

    mark = osc.mark()
    listed, long_listed, shown = osc.all_json(
        ('device', 'attribute', 'list'),
        ('device', 'attribute', 'list', '--long'),
        ('device', 'attribute', 'show', created['uuid']))

    assert all(list(a) == ATTRIBUTE_LIST for a in listed)
    assert sorted((a['key'], a['value'], a['deployable_id'])
                  for a in listed) == [
        ('function', 'gzip', deployable.uuid),
        ('rc', 'FPGA', deployable.uuid),
        ('region', 'r0', deployable.uuid),
        ('trait0', 'CUSTOM_FAKE_DEVICE', deployable.uuid)]
    assert all(list(a) == ATTRIBUTE_LIST + ['created_at', 'updated_at']
               for a in long_listed)
    assert {a['uuid']: {k: a[k] for k in ATTRIBUTE_SHOW}
            for a in long_listed}[created['uuid']] == created
    assert shown == created
    assert sorted(osc.calls(mark)) == [
        ('GET', '/attributes', '', 200), ('GET', '/attributes', '', 200),
        ('GET', '/attributes/' + created['uuid'], '', 200)]

    mark = osc.mark()
    deleted = osc.run('device', 'attribute', 'delete', created['uuid'],
                      second['uuid'])

    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == ''
    with db.engine.connect() as conn:
        assert sorted(conn.execute(sa.select(models.Attribute.key))
                      .scalars()) == ['rc', 'trait0']
    assert osc.calls(mark) == [
        ('DELETE', '/attributes/' + created['uuid'], '', 204),
        ('DELETE', '/attributes/' + second['uuid'], '', 204)]


def test_attribute_errors_fail_the_command(osc, db, inventory):
    deployable = inventory.deployables['FakeDevice']
    missing = str(uuid.uuid4())

    results = osc.all(
        ('device', 'attribute', 'create', deployable.uuid, 'rc', 'GPU'),
        ('device', 'attribute', 'create', missing, 'function', 'gzip'),
        ('device', 'attribute', 'show', missing),
        ('device', 'attribute', 'delete', missing))

    assert [rc for rc, _, _ in results] == [1] * 4
    duplicate, no_deployable, show, delete = [err for _, _, err in results]
    assert 'already has an attribute rc' in duplicate
    assert missing in no_deployable
    assert missing in show
    assert '1 of 1 attributes failed to delete.' in delete
    # A deployable named in the body that does not exist is bad input.
    assert sorted(osc.calls()) == [
        ('DELETE', '/attributes/' + missing, '', 404),
        ('GET', '/attributes/' + missing, '', 404),
        ('POST', '/attributes', '', 400),
        ('POST', '/attributes', '', 409)]
    with db.engine.connect() as conn:
        assert sorted(conn.execute(sa.select(
            models.Attribute.key, models.Attribute.value))) == [
            ('rc', 'FPGA'), ('trait0', 'CUSTOM_FAKE_DEVICE')]


# -- accelerator requests ----------------------------------------------------

PROFILE = 'osc-arq-dp'
# Two ARQs for group 0, one for group 1.
ARQ_GROUPS = arq_stack.FPGA_GROUPS
ARQ_SHOW = ['uuid', 'state', 'device_profile_name', 'hostname',
            'device_rp_uuid', 'instance_uuid', 'attach_handle_type',
            'attach_handle_info']
ARQ_LIST = ['uuid', 'state', 'device_profile_name', 'instance_uuid',
            'attach_handle_type', 'attach_handle_info']
PCI_ADDRESS = {'domain', 'bus', 'device', 'function'}


def test_arq_create_list_show(osc, profile):
    created, with_group = osc.all_json(
        ('arq', 'create', profile),
        # Deprecated and not sent.
        ('arq', 'create', '--group-id', '1', profile))

    assert list(created) == ARQ_SHOW
    assert created == {'uuid': created['uuid'], 'state': 'Initial',
                       'device_profile_name': profile, 'hostname': None,
                       'device_rp_uuid': None, 'instance_uuid': None,
                       'attach_handle_type': '', 'attach_handle_info': {}}
    assert {k: v for k, v in with_group.items() if k != 'uuid'} == {
        k: v for k, v in created.items() if k != 'uuid'}
    # Only the profile's name, and no read-back: OSC shows the first ARQ
    # of the 201's list.
    assert [json.loads(e['body']) for e in osc.exchanges()] == [
        {'device_profile_name': profile}] * 2
    assert osc.calls() == [('POST', '/accelerator_requests', '', 201)] * 2
    stored = arq_rows(osc.service.db)
    assert sorted(r.device_profile_group_id for r in stored.values()) == [
        0, 0, 0, 0, 1, 1]
    assert stored[created['uuid']].device_profile_group_id == 0
    assert stored[with_group['uuid']].device_profile_group_id == 0

    mark = osc.mark()
    listed, long_listed, shown = osc.all_json(
        ('arq', 'list'), ('arq', 'list', '--long'),
        ('arq', 'show', created['uuid']))

    assert sorted(a['uuid'] for a in listed) == sorted(stored)
    assert all(list(a) == ARQ_LIST for a in listed)
    assert {(a['state'], a['device_profile_name'], a['instance_uuid'],
             a['attach_handle_type'], json.dumps(a['attach_handle_info']))
            for a in listed} == {('Initial', profile, None, '', '{}')}
    assert all(list(a) == ARQ_LIST + ['hostname', 'device_rp_uuid']
               for a in long_listed)
    assert {a['uuid']: {k: a[k] for k in ARQ_SHOW}
            for a in long_listed}[created['uuid']] == created
    assert shown == created
    assert sorted(osc.calls(mark)) == [
        ('GET', '/accelerator_requests', '', 200),
        ('GET', '/accelerator_requests', '', 200),
        ('GET', '/accelerator_requests/' + created['uuid'], '', 200)]
    assert {e['version'] for e in osc.exchanges()} == {None}


def test_arq_bind_unbind_delete(osc, compute, nova, profile, fpga_rp):
    db = osc.service.db
    arq_uuid = osc.json('arq', 'create', profile)['uuid']
    others = sorted(set(arq_rows(db)) - {arq_uuid})
    # OSC takes the server by name or id and asks Nova for its uuid.
    instance = compute.add_server('osc-vm')
    mark = osc.mark()

    bound = osc.json('arq', 'bind', arq_uuid, HOST, 'osc-vm', fpga_rp)

    assert list(bound) == ARQ_SHOW
    assert (bound['uuid'], bound['hostname'], bound['device_rp_uuid'],
            bound['instance_uuid']) == (arq_uuid, HOST, fpga_rp, instance)
    # Read right after the 202: bound or on its way.
    assert bound['state'] in ('BindStarted', 'Bound')
    assert osc.calls(mark) == [
        ('PATCH', '/accelerator_requests/' + arq_uuid, '', 202),
        ('GET', '/accelerator_requests/' + arq_uuid, '', 200)]
    assert json.loads(osc.exchanges(mark)[0]['body']) == {arq_uuid: [
        {'op': 'add', 'path': '/hostname', 'value': HOST},
        {'op': 'add', 'path': '/instance_uuid', 'value': instance},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': fpga_rp}]}
    # By id first, then by name.
    assert [p for p in compute.requests if '/servers' in p] == [
        '/v2.1/servers/osc-vm', '/v2.1/servers/detail?name=osc-vm']

    resolved, = wait_resolved(osc, arq_uuid)

    assert resolved['state'] == 'Bound'
    assert resolved['attach_handle_type'] == 'TEST_PCI'
    assert set(resolved['attach_handle_info']) == PCI_ADDRESS
    stored = arq_rows(db)
    assert (stored[arq_uuid].state, stored[arq_uuid].in_use) == (
        'Bound', True)
    assert handles_in_use(db) == 1
    assert {stored[u].state for u in others} == {'Initial'}
    assert nova.wait_for(1) == [(instance, arq_uuid, True)]

    # Bound to an instance by its id this time; the instance already has
    # its ARQ set from the first bind, so the service refuses.
    mark = osc.mark()
    (listed_rc, listed, _), (second_rc, _, second_err) = osc.all(
        ('arq', 'list', '--long', '-f', 'json'),
        ('arq', 'bind', others[0], HOST, instance, fpga_rp))

    assert listed_rc == 0
    by_uuid = {a['uuid']: a for a in json.loads(listed)}
    assert {k: by_uuid[arq_uuid][k] for k in ARQ_SHOW} == resolved
    assert second_rc == 1
    assert 'already has accelerator request %s' % arq_uuid in second_err
    assert arq_rows(db)[others[0]].state == 'Initial'
    assert ('PATCH', '/accelerator_requests/' + others[0], '', 409) in (
        osc.calls(mark))

    mark = osc.mark()
    unbound = osc.json('arq', 'unbind', arq_uuid)

    assert unbound == {**resolved, 'state': 'Unbound', 'hostname': None,
                       'device_rp_uuid': None, 'instance_uuid': None,
                       'attach_handle_type': '', 'attach_handle_info': {}}
    assert osc.calls(mark) == [
        ('PATCH', '/accelerator_requests/' + arq_uuid, '', 202),
        ('GET', '/accelerator_requests/' + arq_uuid, '', 200)]
    assert json.loads(osc.exchanges(mark)[0]['body']) == {arq_uuid: [
        {'op': 'remove', 'path': '/hostname'},
        {'op': 'remove', 'path': '/instance_uuid'},
        {'op': 'remove', 'path': '/device_rp_uuid'}]}
    stored = arq_rows(db)[arq_uuid]
    assert (stored.state, stored.hostname, stored.instance_uuid,
            stored.handle_uuid) == ('Unbound', None, None, None)
    assert handles_in_use(db) == 0

    mark = osc.mark()
    deleted = osc.run('arq', 'delete', arq_uuid, others[0])

    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == ''
    assert osc.calls(mark) == [
        ('DELETE', '/accelerator_requests/' + arq_uuid, '', 204),
        ('DELETE', '/accelerator_requests/' + others[0], '', 204)]
    assert sorted(arq_rows(db)) == others[1:]
    assert nova.wait_for(1) == [(instance, arq_uuid, True)]


def test_arq_errors_fail_the_command(osc, compute, profile, fpga_rp):
    db = osc.service.db
    kept = osc.json('arq', 'create', profile)['uuid']
    before = arq_rows(db)
    instance = compute.add_server('osc-vm')
    missing = str(uuid.uuid4())
    mark = osc.mark()

    results = osc.all(
        ('arq', 'show', missing),
        ('arq', 'delete', missing),
        ('arq', 'create', 'no-such-profile'),
        # Nova knows no such server: the client stops before the PATCH.
        ('arq', 'bind', kept, HOST, 'no-such-vm', fpga_rp),
        ('arq', 'bind', kept, HOST, instance, 'not-a-uuid'),
        ('arq', 'bind', missing, HOST, instance, fpga_rp),
        ('arq', 'unbind', missing))

    assert [rc for rc, _, _ in results] == [1] * 7
    (show, delete, create, no_server, bad_rp, missing_bind,
     missing_unbind) = [err for _, _, err in results]
    assert missing in show
    assert '1 of 1 accelerator requests failed to delete.' in delete
    assert 'no-such-profile' in create
    assert 'no-such-vm' in no_server
    assert 'device_rp_uuid' in bad_rp
    assert missing in missing_bind
    assert missing in missing_unbind
    assert arq_rows(db) == before
    assert handles_in_use(db) == 0
    assert sorted(osc.calls(mark)) == sorted([
        ('GET', '/accelerator_requests/' + missing, '', 404),
        ('DELETE', '/accelerator_requests/' + missing, '', 404),
        ('POST', '/accelerator_requests', '', 404),
        ('PATCH', '/accelerator_requests/' + kept, '', 400),
        ('PATCH', '/accelerator_requests/' + missing, '', 404),
        ('PATCH', '/accelerator_requests/' + missing, '', 404)])
