"""One access log line per request; no request id outlives its request."""

import concurrent.futures
import gc
import logging
import warnings

import pytest
import requests
import webtest

from cyborg.api import app as api_app
from tests.conftest import ServedAPI
from tests.conftest import create_schema
from tests.oslo_log_lines import oslo_log_lines  # noqa: F401

LOG = logging.getLogger(__name__)
TOKEN = 'gAAAAAB-a-token-that-must-not-be-logged'
REQUEST_ID = 'x-openstack-request-id'


@pytest.fixture
def db_url(sqlite_url):
    """One engine is enough: the log is the subject here."""
    create_schema(sqlite_url)
    return sqlite_url


def access_lines(caplog):
    return [line for line in caplog.text.splitlines()
            if ' cyborg.api.access ' in line]


def test_a_line_per_request_with_its_id_and_caller(
        conf, db, oslo_log_lines):  # noqa: F811
    api = webtest.TestApp(api_app.build_app(conf, db))
    listed = api.get('/v2/device_profiles?name=gpu&limit=5', headers={
        'X-Auth-Token': TOKEN, 'X-User-Id': 'u-1', 'X-Project-Id': 'p-1'})
    missing = api.get('/v2/no_such_thing', expect_errors=True)

    lines = access_lines(oslo_log_lines)
    assert len(lines) == 2, oslo_log_lines.text
    assert ' INFO cyborg.api.access ' in lines[0]
    assert (' "GET /v2/device_profiles?name=gpu&limit=5" status 200 len %d '
            'time ' % len(listed.body)) in lines[0]
    assert listed.headers[REQUEST_ID] in lines[0]
    assert ' u-1 p-1 ' in lines[0]
    assert ' "GET /v2/no_such_thing" status 404 len %d ' % len(
        missing.body) in lines[1]
    assert missing.headers[REQUEST_ID] in lines[1]
    assert TOKEN not in oslo_log_lines.text


def test_a_refused_token_is_logged_with_the_request_id(
        conf, db, oslo_log_lines):  # noqa: F811
    conf.set_override('auth_strategy', 'keystone')
    conf.set_override('www_authenticate_uri', 'http://127.0.0.1:1/v3',
                      group='keystone_authtoken')
    api = webtest.TestApp(api_app.build_app(conf, db))
    refused = api.get('/v2/device_profiles', expect_errors=True)

    assert refused.status_int == 401
    [line] = access_lines(oslo_log_lines)
    assert ' "GET /v2/device_profiles" status 401 ' in line
    assert refused.headers[REQUEST_ID] in line


def test_no_request_id_in_later_lines_of_the_thread(
        conf, db, oslo_log_lines):  # noqa: F811
    api = webtest.TestApp(api_app.build_app(conf, db))

    def request_then_other_work():
        # WebTest runs the app on the calling thread, as a server runs it
        # on one of its own.
        served = api.get('/v2/device_profiles')
        LOG.info('unrelated work after the request')
        return served

    # A thread of its own, which starts without a current context.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        served = pool.submit(request_then_other_work).result(timeout=60)

    [after] = [line for line in oslo_log_lines.text.splitlines()
               if 'unrelated work' in line]
    assert served.headers[REQUEST_ID] not in after
    assert ' [-] ' in after  # oslo.log's prefix for a line without context


def test_served_over_http(conf, db, oslo_log_lines):  # noqa: F811
    served = ServedAPI(conf, db)
    try:
        answer = requests.get(served.url + '/v2', timeout=10)
    finally:
        served.stop()

    [line] = access_lines(oslo_log_lines)
    assert '127.0.0.1 "GET /v2" status 200 len %d ' % len(
        answer.content) in line
    assert answer.headers[REQUEST_ID] in line


def test_the_copy_of_a_large_body_is_closed(conf, db):
    # webob copies a body over 10 KiB to a temporary file when the API
    # reads it; left to the garbage collector, it warns.
    api = webtest.TestApp(api_app.build_app(conf, db))
    profile = {'name': 'large', 'groups': [{'resources:FPGA': '1'}],
               'description': 'x' * 20000}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', ResourceWarning)
        status = api.post_json('/v2/device_profiles', [profile],
                               expect_errors=True).status_int
        gc.collect()
    assert status in (201, 400)
    assert [str(w.message) for w in caught
            if issubclass(w.category, ResourceWarning)] == []


def test_control_characters_cannot_forge_a_line(
        conf, db, oslo_log_lines):  # noqa: F811
    api = webtest.TestApp(api_app.build_app(conf, db))
    forged = '127.0.0.1 "GET /v2/forged" status 200 len 0 time 0.1 ms'
    api.get('/v2/device_profiles/x%0D%0A' + forged.replace(' ', '%20')
            + '%22%25', expect_errors=True)
    api.get('/v2/device_profiles?name=a%0Ab&q="\x7f', expect_errors=True)

    lines = access_lines(oslo_log_lines)
    assert len(lines) == 2, oslo_log_lines.text
    assert not any('/v2/forged' in line and '"GET /v2/forged"' in line
                   for line in oslo_log_lines.text.splitlines())
    assert ('"GET /v2/device_profiles/x%0D%0A127.0.0.1%20%22GET%20/v2/'
            'forged%22%20status%20200' in lines[0])
    assert lines[0].split(' status ')[1].startswith('404 ')
    assert '%22%25" status 404' in lines[0]
    assert '"GET /v2/device_profiles?name=a%0Ab&q=%22%7F" status' in lines[1]
