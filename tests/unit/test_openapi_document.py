"""``cyborg/api/openapi.yaml`` is a valid OpenAPI 3.1 document and says
what the controllers serve, at the microversions the service speaks."""

import pathlib
import re

import openapi_spec_validator
import pytest
import yaml

from cyborg.api import microversion
from cyborg.api import uuids
from cyborg.api.controllers import resource
from cyborg.api.controllers import root

DOCUMENT = (pathlib.Path(__file__).resolve().parents[2] / 'cyborg' / 'api'
            / 'openapi.yaml')
METHODS = ('get', 'put', 'post', 'delete', 'patch')
# Routed by DeployablesController._route onto .../program, as
# openstacksdk sends it.
ALIASES = {('PATCH', '/v2/deployables/{}/program/{}')}
VERSIONED_HEADERS = {microversion.HEADER, microversion.MIN_HEADER,
                     microversion.MAX_HEADER, 'Vary',
                     'x-openstack-request-id'}


@pytest.fixture(scope='module')
def document():
    return yaml.safe_load(DOCUMENT.read_text())


def _operations(document):
    for path, item in document['paths'].items():
        for method in METHODS:
            if method in item:
                yield path, method, item, item[method]


def _resolved(document, value):
    while '$ref' in value:
        node = document
        for part in value['$ref'].lstrip('#/').split('/'):
            node = node[part.replace('~1', '/').replace('~0', '~')]
        value = node
    return value


def served_routes():
    """(method, path) of every route of the controllers, each path
    parameter written ``{}``."""
    routes = {('GET', '/'), ('GET', '/v2')}
    for name, controller in vars(root.V2Controller).items():
        if not isinstance(controller, resource.ResourceController):
            continue
        base = '/v2/' + name
        for (method, depth), handler in resource.ROUTES.items():
            if hasattr(controller, handler):
                routes.add((method, base + '/{}' * depth))
        for method, action in controller.ACTIONS:
            routes.add((method, '%s/{}/%s' % (base, action)))
        for method, action in controller.ITEM_ACTIONS:
            routes.add((method, '%s/{}/%s/{}' % (base, action)))
    return routes


def test_the_document_is_valid_openapi_3_1(document):
    openapi_spec_validator.validate(document)
    assert document['openapi'].startswith('3.1.')


def test_the_document_speaks_up_to_the_newest_microversion(document):
    assert document['info']['version'] == microversion.MAX_STRING
    assert microversion.MAX_STRING in document['components']['parameters'][
        'Microversion']['description']


def test_every_route_is_documented_and_every_documented_route_served(
        document):
    documented = {(method.upper(), re.sub(r'\{[^}]+\}', '{}', path))
                  for path, method, _, _ in _operations(document)}

    assert documented - ALIASES == served_routes()
    assert ALIASES.issubset(documented)


def test_each_v2_operation_takes_a_microversion_and_says_its_version(
        document):
    microversion_ref = {'$ref': '#/components/parameters/Microversion'}
    for path, method, item, operation in _operations(document):
        if path == '/':
            continue
        parameters = item.get('parameters', []) + operation.get(
            'parameters', [])
        assert microversion_ref in parameters, (method, path)
        responses = operation['responses']
        assert '406' in responses, (method, path)
        for status, response in responses.items():
            headers = _resolved(document, response).get('headers', {})
            assert set(headers) == VERSIONED_HEADERS, (method, path, status)


def test_each_error_answer_is_the_error_object(document):
    error = {'$ref': '#/components/schemas/Error'}
    for path, method, _, operation in _operations(document):
        for status, response in operation['responses'].items():
            if int(status) >= 400:
                content = _resolved(document, response)['content']
                assert content == {'application/json': {'schema': error}}, (
                    method, path, status)


@pytest.mark.parametrize('value', [
    '0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e',
    '0B2C5E1F-3A4D-4B6C-8D0E-1F2A3B4C5D6E',
    '0b2c5e1f3a4d4b6c8d0e1f2a3b4c5d6e',
    '{0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e}',
    'urn:uuid:0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e',
    'URN:UUID:0b2c5e1f3a4d4b6c8d0e1f2a3b4c5d6e',
    '0b2c5e1f-3a4d4b6c-8d0e-1f2a3b4c5d6e',
    '0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6',
    '0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e\n',
    '{0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e',
    'urn:uuid:{0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e}',
    'g0b2c5e13a4d4b6c8d0e1f2a3b4c5d6e',
])
def test_the_uuid_forms_are_those_the_api_reads(document, value):
    pattern = document['components']['schemas']['UuidInput']['pattern']
    # ECMA-262's $ matches at the very end only, as Python's \Z.
    documented = re.match(pattern.replace('$', r'\Z'), value) is not None

    assert documented == (uuids.canonical(value) is not None)
