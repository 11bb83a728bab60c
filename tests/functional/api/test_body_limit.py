"""Request bodies: refused past ``[oslo_middleware] max_request_body_size``
before they are read, and read only once the caller is authorized.

The size limit is checked against the API served by cheroot on a real
port, spoken to over a raw socket, so that a body can be announced and
then withheld: an answer that comes while the body is still unsent is
one that did not read it.
"""

import gc
import io
import json
import socket
import warnings

import pytest
import webob

from cyborg.api import app as api_app
from tests import conftest

database_url = conftest.database_url_on('sqlite')

DP = '/v2/device_profiles'
LIMIT = 4096
ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'p1',
         'X-User-Id': 'u-admin'}
READER = {'X-Roles': 'reader', 'X-Project-Id': 'p1', 'X-User-Id': 'u-reader'}
# Long enough to wait for an answer that a server which reads the
# withheld body would never give.
ANSWER_TIMEOUT = 10


def profile_body(name):
    return json.dumps([{'name': name, 'groups': [
        {'resources:FPGA': '1',
         'trait:CUSTOM_FAKE_DEVICE': 'required'}]}]).encode()


@pytest.fixture
def served(conf, db):
    conf.set_override('max_request_body_size', LIMIT,
                      group='oslo_middleware')
    served = conftest.ServedAPI(conf, db)
    yield served
    served.stop()


def connect(served):
    host, port = served.url.rsplit('/', 1)[-1].rsplit(':', 1)
    sock = socket.create_connection((host, int(port)),
                                    timeout=ANSWER_TIMEOUT)
    return sock


def head(path, headers):
    lines = ['POST %s HTTP/1.1' % path, 'Host: cyborg',
             'Content-Type: application/json']
    lines += ['%s: %s' % item for item in {**ADMIN, **headers}.items()]
    return ('\r\n'.join(lines) + '\r\n\r\n').encode()


def answer(sock):
    """(status, JSON body) of the response read from ``sock``."""
    received = b''
    while b'\r\n\r\n' not in received:
        chunk = sock.recv(65536)
        assert chunk, 'the server closed the connection without answering'
        received += chunk
    header, body = received.split(b'\r\n\r\n', 1)
    status = int(header.split(b' ', 2)[1])
    length = next(int(line.split(b':', 1)[1]) for line in
                  header.split(b'\r\n')
                  if line.lower().startswith(b'content-length:'))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return status, json.loads(body)


def chunk(data):
    return b'%x\r\n%s\r\n' % (len(data), data)


def test_announced_body_over_the_limit_is_refused_unread(served):
    with connect(served) as sock:
        # 27 MB announced; none of it is ever sent.
        sock.sendall(head(DP, {'Content-Length': str(27 * 2 ** 20)}))
        status, body = answer(sock)
    assert status == 413
    assert body['code'] == 'cyborg.request_too_large'
    assert body['error_message'] == (
        'The request body is larger than the %d bytes the API accepts.'
        % LIMIT)


def test_chunked_body_is_refused_once_past_the_limit(served):
    with connect(served) as sock:
        sock.sendall(head(DP, {'Transfer-Encoding': 'chunked'}))
        # Past the limit, and never finished (no last chunk): only a
        # server that stops reading at the limit can answer.
        for _ in range(3):
            sock.sendall(chunk(b' ' * (LIMIT // 2)))
        status, body = answer(sock)
    assert status == 413
    assert body['code'] == 'cyborg.request_too_large'


def test_chunked_body_within_the_limit_is_read(served):
    data = profile_body('chunked-profile')
    with connect(served) as sock:
        sock.sendall(head(DP, {'Transfer-Encoding': 'chunked'}))
        sock.sendall(chunk(data[:10]) + chunk(data[10:]) + chunk(b''))
        status, body = answer(sock)
    assert status == 201, body
    assert body['name'] == 'chunked-profile'


def test_body_at_the_limit_is_accepted(served):
    data = profile_body('at-the-limit')
    data += b' ' * (LIMIT - len(data))
    with connect(served) as sock:
        sock.sendall(head(DP, {'Content-Length': str(LIMIT)}) + data)
        status, body = answer(sock)
    assert status == 201, body


class RecordedInput:
    """A request body that notes each read of it."""

    def __init__(self, data):
        self._data = data
        self.reads = 0

    def read(self, size=-1):
        self.reads += 1
        data, self._data = self._data, b''
        return data

    readline = read


@pytest.mark.parametrize('data', [b'{"not json', profile_body('x')],
                         ids=['malformed', 'valid'])
def test_unauthorized_caller_body_is_not_read(conf, db, data):
    app = api_app.build_app(conf, db)
    given = RecordedInput(data)
    request = webob.Request.blank(DP, method='POST', headers=READER)
    request.environ.update({'wsgi.input': given,
                            'CONTENT_TYPE': 'application/json',
                            'CONTENT_LENGTH': str(len(data))})
    response = request.get_response(app)
    assert response.status_int == 403, response.text
    assert response.json['code'] == 'cyborg.policy.forbidden'
    assert given.reads == 0


def test_chunked_body_cut_off_leaves_no_open_file(conf, db):
    # webob copies a body of no announced length to a temporary file as
    # it reads it; cut off by the limit midway, that file would be left
    # to the garbage collector, which warns.
    app = api_app.build_app(conf, db)
    request = webob.Request.blank(DP, method='POST', headers=ADMIN)
    request.environ.update({'wsgi.input': io.BytesIO(b' ' * 300000),
                            'wsgi.input_terminated': True,
                            'CONTENT_TYPE': 'application/json'})
    request.environ.pop('CONTENT_LENGTH', None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', ResourceWarning)
        response = request.get_response(app)
        del request
        gc.collect()
    assert response.status_int == 413
    assert [str(w.message) for w in caught
            if issubclass(w.category, ResourceWarning)] == []
