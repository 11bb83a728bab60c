"""A bounded fuzz of the live API against ``cyborg/api/openapi.yaml``.

schemathesis generates requests for every operation of the document at
every microversion, both valid ones and ones that break the document
(bodies, path and query parameters, headers), and sends them to the API
served on a real port, with a real conductor on the in-process transport
and a real Placement behind it. Every answer must be documented (status,
content type, headers, body) and never a 5xx, and an answer 4xx must
leave the database exactly as it was.

Each run of Hypothesis has a fixed seed, keeps no example database and
writes its caches under the test's temporary directory; the whole fuzz
takes one to two minutes. ``pytest -s`` shows its counts.
"""

import collections
import time
import uuid

import hypothesis
from hypothesis import configuration as hypothesis_configuration
from hypothesis import strategies as st
import pytest
import requests
import schemathesis
from schemathesis.specs.openapi import checks as openapi_checks
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import states
from cyborg.accelerator.drivers import fake
from cyborg.api import microversion
from cyborg.db import models
from cyborg.db.api import arqs as arqs_db
from cyborg.db.api import device_config_policies as config_policies_db
from cyborg.db.api import device_profile_access as profile_access_db
from cyborg.db.api import device_profiles as profiles_db
from tests import arq_stack
from tests import conftest
from tests import inventory_rows
from tests.functional.api import test_openapi_samples
from tests.functional.api.test_services import add_service
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

database_url = conftest.database_url_on('sqlite')

HOST = 'compute1'
PROFILE = 'fpga-dp'
PROJECT = 'b7e9d4c2a1f04e6a8c3b5d7f9e1a2c4b'
# An admin of a project: policy lets every request reach its handler.
ADMIN = {'X-Roles': 'admin,manager,member,reader', 'X-Project-Id': PROJECT,
         'X-User-Id': 'admin'}
VERSIONS = [version for version, _ in microversion.VERSIONS]
MODES = (schemathesis.GenerationMode.POSITIVE,
         schemathesis.GenerationMode.NEGATIVE)
# Examples per operation, mode and microversion: about 2,500 requests
# in all, the document's own examples included.
EXAMPLES = 4
MIN_REQUESTS = 2000
# 5xx answers are counted apart, each one a failure.
CHECKS = [openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance,
          openapi_checks.response_headers_conformance,
          openapi_checks.response_schema_conformance]
SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES, deadline=None, database=None,
    phases=[hypothesis.Phase.generate],
    suppress_health_check=list(hypothesis.HealthCheck),
    verbosity=hypothesis.Verbosity.quiet)
# Reads first, deletes last: the seeded objects stay reachable longest.
METHOD_ORDER = ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')


# -- the service and its data -------------------------------------------------

@pytest.fixture
def hypothesis_home(tmp_path):
    """Hypothesis's caches go here, not into the working directory."""
    hypothesis_configuration.set_hypothesis_home_dir(tmp_path / 'hypothesis')
    yield
    hypothesis_configuration.set_hypothesis_home_dir(None)


@pytest.fixture
def served(conf, db, placement):  # noqa: F811
    # The conductor answers every call; on a loaded machine it may take
    # more than a second, and a 503 would then be counted as a failure.
    conf.set_override('conductor_timeout', 10, group='api')
    create_compute_node(placement.adapter(), HOST)
    with arq_stack.fake_transport(conf) as transport, \
            arq_stack.serving_conductor(
                transport, db, arq_stack.binder(conf),
                placement_client=placement.client()):
        served = conftest.ServedAPI(conf, db, transport=transport)
        try:
            yield served
        finally:
            served.stop()


def seed(db, served):
    """Rows of every kind, one ARQ bound; the existing values of each
    path parameter of the document."""
    device, = inventory_rows.add_host(db.engine, HOST,
                                      inventory_rows.fake_devices())
    inventory_rows.set_health(db.engine, device.uuid, health='degraded',
                              health_reason='PCIe link trained at x8',
                              health_updated_at=models.utcnow())
    inventory_rows.record_usage(db.engine, HOST, {str(fake.ADDRESS): {
        'temperature_c': 54, 'observed_at': time.time()}})
    deployable = device.deployables['FakeDevice']
    # The conductor serving here, so that binds and status changes go to it.
    add_service(db, 'conductor-1', 'cyborg-conductor')
    add_service(db, 'compute2', 'cyborg-agent', rpc_version='1.1', age=3600)
    context = cyborg_context.admin_context(db, project_id=PROJECT)
    arq_stack.make_profile(context, PROFILE, [
        {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}])
    arqs = [arq['uuid'] for _ in range(3)
            for arq in arqs_db.create_arqs(context, PROFILE, PROJECT)]
    # Private, shared with the project: its list of projects exists.
    profiles_db.update_profile(context, {'is_public': False}, name=PROFILE)
    profile_access_db.add_project(context, PROJECT, name=PROFILE)
    bound = requests.patch(served.url + arq_stack.ARQS, headers=ADMIN,
                           json=arq_stack.bind_body(
                               arqs[:1], arq_stack.deployable_rp(db, device),
                               str(uuid.uuid4()), HOST), timeout=30)
    assert bound.status_code == 202, bound.text
    wait_for_binds(db)
    with db.engine.connect() as conn:
        profile_uuid = conn.execute(sa.select(models.DeviceProfile.uuid)
                                    ).scalar_one()
    config_policy, _ = config_policies_db.create_policy(context, {
        'uuid': str(uuid.uuid4()), 'name': 'fake-fpga-image', 'priority': 0,
        'host_selector': [HOST], 'device_selector': {'vendor_id': 'abcd'},
        'kind': 'fpga_base_image',
        'settings': {'bitstream_uuid': str(uuid.uuid4())},
        'restore_on_delete': False})
    return {
        'device_profile': [profile_uuid, PROFILE],
        'project_id': [PROJECT, PROJECT],
        'arq_uuid': arqs,
        'device_uuid': [device.uuid],
        'deployable_uuid': [deployable.uuid],
        'same_deployable_uuid': [deployable.uuid],
        'attribute_uuid': sorted(deployable.attributes.values()),
        'device_config_policy_uuid': [config_policy.uuid],
    }


def wait_for_binds(db, timeout=10):
    """Until the conductor is done with the binds a 202 started: none is
    BindStarted and no news for Nova is pending."""
    arq = models.ExtendedAcceleratorRequest
    deadline = time.monotonic() + timeout
    while True:
        with db.engine.connect() as conn:
            busy = conn.execute(sa.select(sa.func.count()).where(
                (arq.state == states.BIND_STARTED)
                | arq.nova_event_pending)).scalar_one()
        if not busy:
            return
        assert time.monotonic() < deadline, 'a bind never ended'
        time.sleep(0.02)


def snapshot(db):
    """Every row of every table, in primary key order."""
    with db.engine.connect() as conn:
        return {table.name: conn.execute(sa.select(table).order_by(
            *table.primary_key.columns)).all()
            for table in models.Base.metadata.sorted_tables}


# -- the fuzz -----------------------------------------------------------------

class Tally:
    """What the fuzz saw."""

    def __init__(self):
        self.statuses = collections.Counter()
        self.pairs = set()  # (operation, microversion) reached
        self.server_errors = []
        self.violations = []
        self.refused_with_change = []

    @property
    def sent(self):
        return sum(self.statuses.values())

    def report(self):
        classes = collections.Counter()
        for status, count in self.statuses.items():
            classes['%dxx' % (status // 100)] += count
        return ('requests sent: %d; by status class: %s (%s); 5xx: %d; '
                'violations of the document: %d; refused with a change: %d'
                % (self.sent, dict(sorted(classes.items())),
                   ', '.join('%d: %d' % s for s in sorted(
                       self.statuses.items())),
                   len(self.server_errors), len(self.violations),
                   len(self.refused_with_change)))


def _operations(schema):
    operations = [result.ok() for result in schema.get_all_operations()]
    return sorted(operations, key=lambda op: (
        METHOD_ORDER.index(op.method.upper()), op.path))


def _strategy(operation, mode, existing):
    """Cases of ``operation``; their microversion is set when sent."""
    headers = {**ADMIN, microversion.HEADER: ''}
    strategies = [operation.as_strategy(mode, headers=headers)]
    names = [p.name for p in operation.path_parameters]
    if names and mode == schemathesis.GenerationMode.POSITIVE:
        # Objects that exist, so that more than 404 is reached.
        strategies += [
            operation.as_strategy(mode, headers=headers, path_parameters=dict(
                zip(names, values, strict=True)))
            for values in zip(*[existing[n] for n in names], strict=True)]
    return st.one_of(strategies)


class Fuzz:
    """Sends cases and checks each answer, with the database around it."""

    def __init__(self, served, db):
        self.url = served.url
        self.db = db
        self.session = requests.Session()
        self.tally = Tally()
        # The database as the last answer left it.
        self.state = snapshot(db)

    def visit(self, case, version):
        case.headers[microversion.HEADER] = '%s %s' % (
            microversion.SERVICE_TYPE, version)
        response = case.call(base_url=self.url, session=self.session,
                             timeout=30)
        status = response.status_code
        self.tally.statuses[status] += 1
        self.tally.pairs.add((case.operation.label, version))
        what = '%s %s at %s -> %d' % (case.method, response.request.url,
                                      version, status)
        if status >= 500:
            self.tally.server_errors.append('%s, body %r' % (what, case.body))
        try:
            case.validate_response(response, checks=CHECKS)
        except schemathesis.errors.FailureGroup as group:
            self.tally.violations.extend('%s: %s' % (what, failure.title)
                                         for failure in group.exceptions)
        if status == 202:
            wait_for_binds(self.db)
        before, self.state = self.state, snapshot(self.db)
        if 400 <= status < 500 and self.state != before:
            self.tally.refused_with_change.append(what)

    def run(self, schema, existing):
        seed = 0
        for operation in _operations(schema):
            for mode in MODES:
                strategy = _strategy(operation, mode, existing)
                for version in VERSIONS:
                    seed += 1
                    self._run_one(strategy, version, seed, mode)
        return self.tally

    def _run_one(self, strategy, version, seed, mode):
        # A seed of its own for each run, the same in every test run.
        @hypothesis.seed(seed)
        @SETTINGS
        @hypothesis.given(strategy)
        def run(case):
            self.visit(case, version)
        try:
            run()
        except hypothesis.errors.Unsatisfiable:
            # Nothing to break: no parameter but the fixed headers.
            if mode != schemathesis.GenerationMode.NEGATIVE:
                raise


def test_fuzz_finds_no_error_and_no_undocumented_answer(
        served, db, hypothesis_home):
    existing = seed(db, served)
    # Its defaults: no schemathesis.toml found around changes the run.
    schema = schemathesis.openapi.from_dict(test_openapi_samples.document(),
                                            config=schemathesis.Config())
    started = time.monotonic()

    tally = Fuzz(served, db).run(schema, existing)

    print('\nfuzz: %s; in %.0f s' % (tally.report(),
                                     time.monotonic() - started))
    for line in (tally.server_errors + tally.violations
                 + tally.refused_with_change)[:20]:
        print('  ' + line[:500])
    assert tally.sent >= MIN_REQUESTS
    operations = len(list(schema.get_all_operations()))
    assert len(tally.pairs) == operations * len(VERSIONS)
    assert tally.server_errors == []
    assert tally.violations == []
    assert tally.refused_with_change == []


# -- a repeated query parameter -----------------------------------------------

def _query_parameters():
    """(method, path, name) of every query parameter of the document."""
    document = test_openapi_samples.document()
    for path, item in document['paths'].items():
        for method, operation in item.items():
            if method == 'parameters' or not isinstance(operation, dict):
                continue
            for parameter in operation.get('parameters', ()):
                if parameter.get('in') == 'query':
                    yield method.upper(), path, parameter['name']


def test_a_query_parameter_given_twice_is_400(api):
    # Pecan hands a repeated parameter over as a list.
    headers = {**ADMIN, microversion.HEADER: 'accelerator latest'}
    answers = {}
    for method, path, name in _query_parameters():
        response = api.request('%s?%s=x&%s=y' % (path, name, name),
                               method=method, headers=headers,
                               expect_errors=True)
        answers['%s %s %s' % (method, path, name)] = response.status_int

    assert len(answers) > 20
    assert {k: v for k, v in answers.items() if v != 400} == {}
