"""The samples of the API reference agree with ``cyborg/api/openapi.yaml``.

Every sample in ``doc/source/api/samples/`` is a real request or answer
of the service (``test_api_samples.py`` keeps them so). Each is mapped
here to its operation, and to the status for an answer, and validated
against the document's schema for it: JSON Schema 2020-12, as OpenAPI
3.1 schemas are, with formats checked. A sample that is not mapped
fails, so a new sample must be placed here.
"""

import functools
import json
import pathlib
from urllib import parse

import jsonschema
import pytest
import referencing
import referencing.jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOCUMENT = ROOT / 'cyborg' / 'api' / 'openapi.yaml'
SAMPLES = ROOT / 'doc' / 'source' / 'api' / 'samples'
BASE = 'urn:cyborg:openapi'

DEVICE = '/v2/devices/{device_uuid}'
DEPLOYABLE = '/v2/deployables/{deployable_uuid}'
ARQS = '/v2/accelerator_requests'
ARQ = ARQS + '/{arq_uuid}'
PROFILES = '/v2/device_profiles'
PROFILE = PROFILES + '/{device_profile}'
CONFIG_POLICIES = '/v2/device_config_policies'
CONFIG_POLICY = CONFIG_POLICIES + '/{device_config_policy_uuid}'

# Answer sample -> (method, path, status).
ANSWERS = {
    'arq-get-resp.json': ('get', ARQ, '200'),
    'arq-get-unbound-resp.json': ('get', ARQ, '200'),
    'arqs-create-resp.json': ('post', ARQS, '201'),
    'arqs-list-resolved-resp.json': ('get', ARQS, '200'),
    'arqs-list-resp.json': ('get', ARQS, '200'),
    'attribute-create-resp.json': ('post', '/v2/attributes', '201'),
    'attribute-get-resp.json': ('get', '/v2/attributes/{attribute_uuid}',
                                '200'),
    'attributes-list-resp.json': ('get', '/v2/attributes', '200'),
    'deployable-get-resp.json': ('get', DEPLOYABLE, '200'),
    'deployable-get-v2.5-resp.json': ('get', DEPLOYABLE, '200'),
    'deployable-get-v2.9-resp.json': ('get', DEPLOYABLE, '200'),
    'deployable-program-resp.json': ('patch', DEPLOYABLE + '/program',
                                     '409'),
    'deployables-list-resp.json': ('get', '/v2/deployables', '200'),
    'device-disable-resp.json': ('post', DEVICE + '/disable', '200'),
    'device-enable-resp.json': ('post', DEVICE + '/enable', '200'),
    'device-get-resp.json': ('get', DEVICE, '200'),
    'device-get-v2.3-resp.json': ('get', DEVICE, '200'),
    'device-get-v2.5-resp.json': ('get', DEVICE, '200'),
    'device-health-override-resp.json': ('put', DEVICE + '/health_override',
                                         '200'),
    'device-profile-get-resp.json': ('get', PROFILE, '200'),
    'device-profile-get-v2.7-resp.json': ('get', PROFILE, '200'),
    'device-profile-update-resp.json': ('patch', PROFILE, '200'),
    'device-profile-revisions-resp.json': ('get', PROFILE + '/revisions',
                                           '200'),
    'device-profile-projects-add-resp.json': ('post', PROFILE + '/projects',
                                              '201'),
    'device-profile-projects-list-resp.json': ('get', PROFILE + '/projects',
                                               '200'),
    'arqs-create-v2.7-resp.json': ('post', ARQS, '201'),
    'error-409-disabled-resp.json': ('post', ARQS, '409'),
    'device-profiles-create-resp.json': ('post', PROFILES, '201'),
    'device-profiles-list-resp.json': ('get', PROFILES, '200'),
    'devices-list-health-resp.json': ('get', '/v2/devices', '200'),
    'devices-list-resp.json': ('get', '/v2/devices', '200'),
    'device-config-policy-create-resp.json': ('post', CONFIG_POLICIES,
                                              '201'),
    'device-config-policies-list-resp.json': ('get', CONFIG_POLICIES, '200'),
    'device-config-policy-get-resp.json': ('get', CONFIG_POLICY, '200'),
    'device-config-policy-status-resp.json': ('get', CONFIG_POLICY
                                              + '/status', '200'),
    'device-config-policy-update-resp.json': ('patch', CONFIG_POLICY,
                                              '200'),
    'device-config-policy-unfit-resp.json': ('post', CONFIG_POLICIES,
                                             '400'),
    'device-config-policy-conflict-resp.json': ('post', CONFIG_POLICIES,
                                                '409'),
    'error-400-resp.json': ('post', PROFILES, '400'),
    'error-404-resp.json': ('get', ARQ, '404'),
    'error-406-resp.json': ('get', PROFILE, '406'),
    'error-409-resp.json': ('delete', PROFILES, '409'),
    'error-423-resp.json': ('get', ARQS, '423'),
    'services-list-resp.json': ('get', '/v2/services', '200'),
    'limits-get-resp.json': ('get', '/v2/limits', '200'),
    'versions-root-resp.json': ('get', '/', '200'),
    'versions-v2-resp.json': ('get', '/v2', '200'),
}

# Request sample -> (method, path).
REQUESTS = {
    'arq-unbind-req.json': ('patch', ARQ),
    'arqs-bind-req.json': ('patch', ARQS),
    'arqs-create-req.json': ('post', ARQS),
    'attribute-create-req.json': ('post', '/v2/attributes'),
    'deployable-program-req.json': ('patch', DEPLOYABLE + '/program'),
    'device-health-override-req.json': ('put', DEVICE + '/health_override'),
    'device-profiles-create-req.json': ('post', PROFILES),
    'device-profile-update-req.json': ('patch', PROFILE),
    'device-profile-private-req.json': ('patch', PROFILE),
    'device-profile-projects-add-req.json': ('post', PROFILE + '/projects'),
    'device-config-policy-create-req.json': ('post', CONFIG_POLICIES),
    'device-config-policy-update-req.json': ('patch', CONFIG_POLICY),
}


@functools.cache
def _text():
    return DOCUMENT.read_text()


def document():
    """The OpenAPI document, a fresh copy for each caller."""
    return yaml.safe_load(_text())


@functools.cache
def _registry():
    resource = referencing.Resource.from_contents(
        document(), default_specification=referencing.jsonschema.DRAFT202012)
    return referencing.Registry().with_resource(BASE, resource)


def _pointer(*parts):
    return '/' + '/'.join(p.replace('~', '~0').replace('/', '~1')
                          for p in parts)


def _resolved(pointer):
    """The object at ``pointer``, following a ``$ref`` it holds."""
    resolver = _registry().resolver()
    contents = resolver.lookup(BASE + '#' + parse.quote(pointer)).contents
    while '$ref' in contents:
        pointer = parse.unquote(contents['$ref'].lstrip('#'))
        contents = resolver.lookup(BASE + contents['$ref']).contents
    return pointer, contents


def _validate(instance, pointer):
    validator = jsonschema.Draft202012Validator(
        {'$ref': BASE + '#' + parse.quote(pointer)}, registry=_registry(),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(instance), key=str)
    assert not errors, '\n'.join(
        '%s: %s' % ('/'.join(map(str, e.absolute_path)), e.message)
        for e in errors)


def answer_schema(method, path, status):
    """The pointer of the JSON schema of an answer."""
    pointer, response = _resolved(_pointer('paths', path, method,
                                           'responses', status))
    assert 'application/json' in response['content']
    return pointer + _pointer('content', 'application/json', 'schema')


def request_schema(method, path):
    pointer, body = _resolved(_pointer('paths', path, method,
                                       'requestBody'))
    assert 'application/json' in body['content']
    return pointer + _pointer('content', 'application/json', 'schema')


def _load(name):
    return json.loads((SAMPLES / name).read_text())


@pytest.mark.parametrize('name', sorted(ANSWERS))
def test_answer_sample_is_valid(name):
    _validate(_load(name), answer_schema(*ANSWERS[name]))


@pytest.mark.parametrize('name', sorted(REQUESTS))
def test_request_sample_is_valid(name):
    _validate(_load(name), request_schema(*REQUESTS[name]))


def test_every_sample_is_mapped():
    answers = {p.name for p in SAMPLES.glob('*-resp.json')}
    asked = {p.name for p in SAMPLES.glob('*-req.json')}
    others = {p.name for p in SAMPLES.glob('*.json')} - answers - asked

    assert answers - set(ANSWERS) == set(), 'answer samples not mapped'
    assert asked - set(REQUESTS) == set(), 'request samples not mapped'
    assert set(ANSWERS) - answers == set(), 'mapped answers missing'
    assert set(REQUESTS) - asked == set(), 'mapped requests missing'
    assert others == set(), 'samples neither -req nor -resp'


def test_an_answer_that_breaks_the_document_is_refused():
    device = _load('device-get-v2.5-resp.json')
    pointer = answer_schema('get', DEVICE, '200')
    broken = [{**device, 'health': 'sick'}, {**device, 'extra': 1},
              {k: v for k, v in device.items() if k != 'uuid'},
              {k: v for k, v in device.items() if k != 'quarantined'}]

    for instance in broken:
        with pytest.raises(AssertionError):
            _validate(instance, pointer)
