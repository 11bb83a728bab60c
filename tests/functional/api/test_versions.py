"""The public version documents and the microversion headers."""

import webtest

from cyborg.api import app as api_app


def test_root_document(api):
    body = api.get('/').json

    version = {'id': 'v2', 'status': 'CURRENT', 'min_version': '2.0',
               'max_version': '2.9',
               'links': [{'href': 'http://localhost/v2', 'rel': 'self'}]}
    assert body['versions'] == [version]
    assert body['default_version'] == version
    assert body['name'] and body['description']


def test_v2_document_has_a_self_link(api):
    response = api.get('/v2')

    assert response.json == {
        'id': 'v2.0', 'status': 'CURRENT', 'min_version': '2.0',
        'max_version': '2.9',
        'links': [{'href': 'http://localhost/v2/', 'rel': 'self'}]}
    assert response.headers['OpenStack-API-Version'] == 'accelerator 2.0'
    assert response.headers['Vary'] == 'OpenStack-API-Version'


def test_every_v2_response_carries_version_headers(api):
    for path, status in (('/v2/device_profiles', 200),
                         ('/v2/no_such_thing', 404)):
        response = api.get(path, headers={
            'OpenStack-API-Version': 'accelerator latest'},
            expect_errors=True)
        assert response.status_int == status
        assert response.headers['OpenStack-API-Minimum-Version'] == '2.0'
        assert response.headers['OpenStack-API-Maximum-Version'] == '2.9'
        assert response.headers['OpenStack-API-Version'] == (
            'accelerator 2.9')


def test_unsupported_version_is_406_with_the_range(api):
    response = api.get('/v2/device_profiles', expect_errors=True,
                       headers={'OpenStack-API-Version': 'accelerator 2.10'})

    assert response.status_int == 406
    assert response.headers['OpenStack-API-Maximum-Version'] == '2.9'
    assert '2.9' in response.json['error_message']


def test_request_id_is_returned(api):
    assert api.get('/v2').headers['x-openstack-request-id'].startswith(
        'req-')


def test_version_documents_are_public_under_keystone(conf, db):
    conf.set_override('auth_strategy', 'keystone')
    # Where a client is told to get a token; nothing is asked of it here.
    conf.set_override('www_authenticate_uri', 'http://127.0.0.1:1/v3',
                      group='keystone_authtoken')
    app = webtest.TestApp(api_app.build_app(conf, db))

    assert app.get('/').status_int == 200
    assert app.get('/v2').status_int == 200
    assert app.get('/v2/').status_int == 200
    # Everything else needs a token; keystonemiddleware says so with 401.
    assert app.get('/v2/device_profiles',
                   expect_errors=True).status_int == 401
