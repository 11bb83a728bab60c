"""A stand-in for Nova's compute API: ``POST /os-server-external-events``.

Nova's compute API cannot run here, so ``NovaEventsServer`` takes its
place for the one call the service makes to it. It listens on a free
port of 127.0.0.1 (from a thread), so that the service under test can
reach it from this or from another process, and it judges each request
with Nova's own code from the installed ``nova`` package:

- the microversion from ``OpenStack-API-Version: compute 2.N`` or
  ``X-OpenStack-Nova-API-Version``, found by ``microversion_parse`` as
  Nova finds it (none means 2.1; outside Nova's range 406);
- the body against the JSON schema that Nova's controller declares for
  that microversion, checked with jsonschema as Nova checks it (draft
  2020-12, UUIDs by ``oslo_utils``): an ``accelerator-request-bound``
  event below 2.82 is a 400, as is any unknown field.

A request that fails is answered as Nova would (400, 406, 415) and kept
in ``invalid``. Valid events are kept in ``events`` (thread-safe) and
answered like Nova: 200 with ``code: 200`` for each event, or 207 when
a test chose another code for an instance (``set_event_code``: 422 "not
on a host yet", 404 "unknown instance"). ``answer_next`` scripts the
next answers: an HTTP error status, ``DROP`` (close the connection
without an answer), ``STALL`` (hold it until ``release()``) or
``ANSWER`` (answer as usual).

Use it from a ``conftest.py`` (or a test module) with::

    from tests.nova_events import nova_events  # noqa: F401

and point the service at it, in this process or in another one's
configuration file::

    nova_events.configure(conf)          # a ConfigOpts of this process
    config_file.write_text(nova_events.conf_section())  # another one's
    ...
    assert nova_events.wait_for_events(2)

Nova's schemas are read once per test session by a child process that
imports Nova (a second or two): importing Nova here would register its
options on this process's global ``cfg.CONF`` and clash with ours.
"""

import collections
import contextlib
import dataclasses
import functools
import http.server
import json
import re
import subprocess
import sys
import threading

import jsonschema
import microversion_parse
from oslo_utils import uuidutils
import pytest
from requests import structures

EVENTS_PATH = '/os-server-external-events'
LEGACY_VERSION_HEADER = 'X-OpenStack-Nova-API-Version'
# Where the service appends its paths: Nova's catalog endpoint ends so.
URL_PREFIX = '/v2.1'

# Scripted answers besides an HTTP status (see answer_next).
ANSWER = 'answer'
DROP = 'drop'
STALL = 'stall'

# The per-event codes Nova's answer schema allows.
EVENT_CODES = (200, 400, 404, 422)

# Nova's names for the error bodies it sends (nova/api/openstack/wsgi.py).
_FAULT_NAMES = {400: 'badRequest', 401: 'unauthorized', 403: 'forbidden',
                404: 'itemNotFound', 405: 'badMethod',
                406: 'notAcceptable', 415: 'badMediaType',
                429: 'overLimit', 503: 'serviceUnavailable'}

# How long a STALLed request waits for release() at most.
_STALL_LIMIT = 30.0


# Run in a child process: what Nova's controller of
# os-server-external-events declares, as JSON.
_READ_NOVA = """
import json
import warnings
warnings.simplefilter('ignore')
from nova.api.openstack import api_version_request as versions
from nova.api.openstack.compute import server_external_events as events

def bound(version):
    return None if version.is_null() else version.get_string()

def table(schemas):
    return [[schema, bound(low), bound(high)]
            for schema, low, high in schemas._schemas]

create = events.ServerExternalEventsController.create
print(json.dumps({
    'request': table(create.request_body_schemas),
    'response': table(create.response_body_schemas),
    'tag_required': list(events.TAG_REQUIRED),
    'min_version': versions.min_api_version().get_string(),
    'max_version': versions.max_api_version().get_string(),
}))
"""


class _Rejected(Exception):
    """Nova would refuse the request with ``status``."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


# Nova's syntax of a microversion (nova/api/openstack/api_version_request.py).
_VERSION = re.compile(r'^([1-9]\d*)\.([1-9]\d*|0)$')


@functools.cache
def _nova():
    """Nova's schemas by microversion, its version range, and the
    events that need a tag."""
    found = subprocess.run([sys.executable, '-c', _READ_NOVA],
                           capture_output=True, text=True)
    if found.returncode:
        raise RuntimeError("Cannot read Nova's schemas from the installed "
                           'nova package:\n' + found.stderr[-2000:])
    return json.loads(found.stdout.strip().splitlines()[-1])


def _version(text):
    match = _VERSION.match(text or '')
    return (int(match.group(1)), int(match.group(2))) if match else None


def _in_range(version, low, high):
    return ((low is None or _version(low) <= version)
            and (high is None or version <= _version(high)))


def _schema_for(table, microversion):
    version = _version(microversion)
    for schema, low, high in table:
        if _in_range(version, low, high):
            return schema
    raise LookupError('Nova has no schema at %s' % microversion)


def nova_schemas(microversion):
    """``(request schema, response schema)`` Nova uses at ``microversion``.

    The very schemas the controller of ``os-server-external-events``
    declares, for a microversion such as ``'2.82'``.
    """
    nova = _nova()
    return (_schema_for(nova['request'], microversion),
            _schema_for(nova['response'], microversion))


_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks('uuid')
def _is_uuid(value):
    # Nova's check (nova/api/validation/validators.py).
    return not isinstance(value, str) or uuidutils.is_uuid_like(value)


def validate(schema, document):
    """Validate as Nova does; raises ``ValueError`` with Nova's message."""
    try:
        jsonschema.Draft202012Validator(
            schema, format_checker=_FORMATS).validate(document)
    except jsonschema.ValidationError as exc:
        if exc.path:
            raise ValueError('Invalid input for field/attribute %s. Value: '
                             '%s. %s' % (exc.path[-1], exc.instance,
                                         exc.message))
        raise ValueError(exc.message)


def requested_microversion(headers):
    """The compute microversion Nova would serve, or ``_Rejected``."""
    nova = _nova()
    asked = microversion_parse.get_version(
        headers, service_type='compute',
        legacy_headers=[LEGACY_VERSION_HEADER])
    if asked is None:
        return nova['min_version']
    if asked == 'latest':
        return nova['max_version']
    version = _version(asked)
    if version is None:
        raise _Rejected(400, 'API Version String %s is of invalid format. '
                             'Must be of format MajorNum.MinorNum.' % asked)
    if not _in_range(version, nova['min_version'], nova['max_version']):
        raise _Rejected(406, 'Version %s is not supported by the API. '
                             'Minimum is %s and maximum is %s.'
                        % (asked, nova['min_version'], nova['max_version']))
    return asked


@dataclasses.dataclass(frozen=True)
class ReceivedEvent:
    """One event of a valid request, with the code Nova answered for it."""

    server_uuid: str
    name: str
    tag: str | None
    status: str
    code: int


@dataclasses.dataclass(frozen=True)
class Call:
    """One request as received, and what became of it.

    ``headers`` ignore case. ``status`` is None when the connection was
    dropped or stalled; ``error`` is why Nova would have refused the
    request.
    """

    method: str
    path: str
    headers: structures.CaseInsensitiveDict
    body: bytes
    microversion: str | None
    status: int | None
    error: str = ''

    def json(self):
        return json.loads(self.body)


class NovaEventsServer:
    """The external-events endpoint of Nova's compute API, on 127.0.0.1."""

    def __init__(self, port=0, expected_token=None):
        # A request with another X-Auth-Token gets 401 (None: no check).
        self.expected_token = expected_token
        self.port = port
        self._condition = threading.Condition()
        self._calls = []
        self._events = []
        self._script = collections.deque()
        self._event_codes = {}
        self._release = threading.Event()
        self._httpd = None
        self._thread = None
        _nova()

    # -- life -----------------------------------------------------------

    @property
    def url(self):
        """The compute endpoint, for ``[nova] endpoint_override``."""
        return 'http://127.0.0.1:%d%s' % (self.port, URL_PREFIX)

    @property
    def running(self):
        return self._httpd is not None

    def start(self):
        """Listen (again, on the same port after a ``stop``)."""
        if self._httpd is not None:
            return
        self._release.clear()
        handler = functools.partial(_Handler, self)
        httpd = _HTTPServer(('127.0.0.1', self.port), handler)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={'poll_interval': 0.05},
            name='nova-events-%d' % self.port, daemon=True)
        self._thread.start()

    def stop(self):
        """Stop listening: new connections are refused from now on."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._release.set()
        httpd.shutdown()
        httpd.server_close()
        self._thread.join(timeout=5)

    def _nova_options(self):
        # keystoneauth's "none" plugin: no Keystone, no token.
        return {'auth_type': 'none', 'endpoint_override': self.url}

    def configure(self, conf):
        """Point the ``[nova]`` group of ``conf`` (a ConfigOpts) here."""
        for name, value in self._nova_options().items():
            conf.set_override(name, value, group='nova')

    def conf_section(self):
        """The ``[nova]`` section of a configuration file that points
        here; more ``[nova]`` options may follow it."""
        return '[nova]\n' + ''.join(
            '%s = %s\n' % item for item in self._nova_options().items())

    # -- scripting ---------------------------------------------------------

    def answer_next(self, *answers):
        """Answer the next valid requests so, one answer each, in order.

        Each answer is an HTTP status (429, 500, 503, 403, ...; sent with
        a Nova-style error body, events not kept), ``DROP``, ``STALL``
        or ``ANSWER`` (as Nova would: for a failure after a success).
        """
        for answer in answers:
            if answer not in (ANSWER, DROP, STALL) and not (
                    isinstance(answer, int) and answer >= 400):
                raise ValueError('not an error status, ANSWER, DROP or '
                                 'STALL: %r' % (answer,))
        with self._condition:
            self._script.extend(answers)

    def set_event_code(self, instance_uuid, code):
        """Answer events for ``instance_uuid`` with ``code`` (in a 207)."""
        if code not in EVENT_CODES:
            raise ValueError('Nova answers an event with one of %s'
                             % (EVENT_CODES,))
        with self._condition:
            self._event_codes[instance_uuid] = code

    def release(self):
        """Let go of STALLed requests (closed without an answer)."""
        self._release.set()

    def reset(self):
        """Forget what was received and scripted."""
        with self._condition:
            self._calls.clear()
            self._events.clear()
            self._script.clear()
            self._event_codes.clear()

    # -- what was received -------------------------------------------------

    @property
    def calls(self):
        """Every request received, in order."""
        with self._condition:
            return list(self._calls)

    @property
    def invalid(self):
        """The requests Nova would have refused (bad version or body)."""
        return [c for c in self.calls if c.error]

    @property
    def events(self):
        """The events of valid requests that were answered, in order."""
        with self._condition:
            return list(self._events)

    def events_for(self, server_uuid):
        return [e for e in self.events if e.server_uuid == server_uuid]

    def wait_for(self, predicate, timeout=5.0):
        """Wait until ``predicate(server)`` holds; returns its last value."""
        with self._condition:
            return self._condition.wait_for(lambda: predicate(self),
                                            timeout=timeout)

    def wait_for_events(self, count, timeout=5.0):
        """The events once at least ``count`` arrived; [] on timeout."""
        if self.wait_for(lambda s: len(s._events) >= count, timeout):
            return self.events
        return []

    # -- serving (called from the handler threads) -----------------------

    def _record(self, call, events=()):
        with self._condition:
            self._calls.append(call)
            self._events.extend(events)
            self._condition.notify_all()

    def _next_scripted(self):
        with self._condition:
            return self._script.popleft() if self._script else None

    def _event_code(self, instance_uuid):
        with self._condition:
            return self._event_codes.get(instance_uuid, 200)


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that timed out and went away is no error of the server.
        pass


class _Handler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so that after stop() no
    # kept-alive connection is still served.
    protocol_version = 'HTTP/1.0'

    def __init__(self, server_state, *args, **kwargs):
        self.nova = server_state
        super().__init__(*args, **kwargs)

    def log_message(self, format, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(length)
        path = self.path.split('?', 1)[0]
        headers = structures.CaseInsensitiveDict(self.headers.items())
        if not path.endswith(EVENTS_PATH):
            return self._fault(404, 'Unknown resource %s' % path)
        microversion = None

        def record(status, events=(), error=''):
            self.nova._record(Call('POST', path, headers, body,
                                   microversion, status, error), events)

        try:
            self._check_token(headers)
            microversion = requested_microversion(headers)
            request_schema, response_schema = nova_schemas(microversion)
            document = self._check_body(body, request_schema)
        except _Rejected as rejected:
            record(rejected.status, error=rejected.message)
            return self._fault(rejected.status, rejected.message)

        scripted = self.nova._next_scripted()
        if scripted == DROP:
            record(None)
            return
        if scripted == STALL:
            record(None)
            self.nova._release.wait(_STALL_LIMIT)
            return
        if scripted not in (None, ANSWER):
            record(scripted)
            return self._fault(scripted, 'Scripted failure %d' % scripted)

        status, answer, received = self._answer(document)
        try:
            # The answer must be one Nova could give, or the stand-in lies.
            validate(response_schema, answer)
        except ValueError as exc:
            message = 'The stand-in answer is not valid: %s' % exc
            record(500, error=message)
            return self._fault(500, message)
        record(status, received)
        self._send(status, answer)

    def do_GET(self):
        self._fault(404 if not self.path.endswith(EVENTS_PATH) else 405,
                    'Only POST is served here')

    do_PUT = do_DELETE = do_PATCH = do_GET

    def _check_token(self, headers):
        token = self.nova.expected_token
        if token is not None and headers.get('X-Auth-Token') != token:
            raise _Rejected(401, 'The request you have made requires '
                                 'authentication.')

    def _check_body(self, body, schema):
        content_type = self.headers.get('Content-Type', '')
        if content_type.split(';')[0].strip() != 'application/json':
            raise _Rejected(415, 'Unsupported Content-Type %r'
                                 % content_type)
        try:
            document = json.loads(body)
        except ValueError:
            raise _Rejected(400, 'Malformed request body')
        try:
            validate(schema, document)
        except ValueError as exc:
            raise _Rejected(400, str(exc))
        return document

    def _answer(self, document):
        """``(status, body, events)`` as Nova's controller makes them."""
        tag_required = _nova()['tag_required']
        status = 200
        answered = []
        received = []
        for event in document['events']:
            code = self.nova._event_code(event['server_uuid'])
            if (code == 200 and event['name'] in tag_required
                    and event.get('tag') is None):
                code = 400
            status = status if code == 200 else 207
            # Nova answers "completed" for every event it accepts, even
            # one sent as "failed"; what it dispatches keeps the status.
            answered.append(dict(
                event, code=code,
                status='completed' if code == 200 else 'failed'))
            received.append(ReceivedEvent(
                server_uuid=event['server_uuid'], name=event['name'],
                tag=event.get('tag'),
                status=event.get('status', 'completed'), code=code))
        return status, {'events': answered}, received

    def _fault(self, status, message):
        name = _FAULT_NAMES.get(status, 'computeFault')
        self._send(status, {name: {'code': status, 'message': message}})

    def _send(self, status, document):
        payload = json.dumps(document).encode('utf-8')
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextlib.contextmanager
def serve(**kwargs):
    """A started ``NovaEventsServer``, stopped on the way out."""
    server = NovaEventsServer(**kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nova_events():
    """Nova's external-events endpoint on 127.0.0.1 for one test."""
    with serve() as server:
        yield server
