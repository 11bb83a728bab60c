"""A small client of the Placement API.

Every request uses one microversion (``MICROVERSION``) so that the shape
of each answer is known. The client counts the calls it makes, split
into reads and writes, so that callers can check that an unchanged state
costs no writes.

Build it from the ``[placement]`` options (``from_conf``, which gives
every call a timeout), or hand it a
keystoneauth ``Adapter`` (``PlacementClient(adapter)``), for example one
that reaches a Placement WSGI app in the same process (``wsgi_adapter``).
"""

import collections
import io
import threading
import time
import urllib.parse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session
import requests
import requests.adapters
import requests.structures
import requests.utils

from cyborg import context as cyborg_context
from cyborg.conf import placement as placement_conf

# 1.39 covers everything used here: in_tree (1.14), the provider in the
# POST answer (1.20), reserved == total (1.26), consumer generations on
# allocations (1.28) and error codes in every 409 (1.23).
MICROVERSION = '1.39'
SERVICE_TYPE = 'placement'
# A call that gets no answer must not hold a host's sync (and its lock)
# forever; this applies when [placement] timeout is unset.
DEFAULT_TIMEOUT = 30.0
# A pooled connection that Placement's server closed (keep-alive expiry)
# fails at its next use; one more attempt on a fresh connection spares
# the host a whole retry interval. Applies when [placement]
# connect_retries is unset.
DEFAULT_CONNECT_RETRIES = 1

# Placement's stable error codes (placement/errors.py).
CODE_CONCURRENT_UPDATE = 'placement.concurrent_update'
CODE_DUPLICATE_NAME = 'placement.duplicate_name'
CODE_INVENTORY_IN_USE = 'placement.inventory.inuse'
CODE_PROVIDER_IN_USE = 'placement.resource_provider.inuse'
CODE_PROVIDER_HAS_CHILDREN = (
    'placement.resource_provider.cannot_delete_parent')


class PlacementError(Exception):
    """Placement answered with an error status."""

    def __init__(self, method, path, status, code=None, detail=''):
        self.method = method
        self.path = path
        self.status = status
        self.code = code
        self.detail = detail
        super().__init__('%s %s: %d %s%s' % (
            method, path, status, detail or 'error',
            ' (%s)' % code if code else ''))


class NotFound(PlacementError):
    pass


class Conflict(PlacementError):
    pass


class GenerationConflict(Conflict):
    """Someone changed the provider since we read its generation: re-read."""


class DuplicateProvider(Conflict):
    """A provider with that name or UUID exists already."""


class InUse(Conflict):
    """Refused because allocations still use the resources."""


class InventoryInUse(InUse):
    pass


class ProviderInUse(InUse):
    pass


class ProviderHasChildren(Conflict):
    pass


_CONFLICTS_BY_CODE = {
    CODE_CONCURRENT_UPDATE: GenerationConflict,
    CODE_DUPLICATE_NAME: DuplicateProvider,
    CODE_INVENTORY_IN_USE: InventoryInUse,
    CODE_PROVIDER_IN_USE: ProviderInUse,
    CODE_PROVIDER_HAS_CHILDREN: ProviderHasChildren,
}


def _error_for(method, path, response):
    code = detail = None
    try:
        errors = response.json().get('errors') or [{}]
        code = errors[0].get('code')
        detail = errors[0].get('detail') or errors[0].get('title')
    except ValueError:
        detail = response.text[:200]
    if response.status_code == 404:
        cls = NotFound
    elif response.status_code == 409:
        cls = _CONFLICTS_BY_CODE.get(code, Conflict)
    else:
        cls = PlacementError
    return cls(method, path, response.status_code, code, detail or '')


class CallCounter:
    """HTTP calls made, by method; GET and HEAD are reads, others writes."""

    READ_METHODS = frozenset(('GET', 'HEAD'))

    def __init__(self):
        self._lock = threading.Lock()
        self.by_method = collections.Counter()

    def record(self, method):
        with self._lock:
            self.by_method[method] += 1

    @property
    def reads(self):
        return sum(n for m, n in self.by_method.items()
                   if m in self.READ_METHODS)

    @property
    def writes(self):
        return sum(n for m, n in self.by_method.items()
                   if m not in self.READ_METHODS)

    def snapshot(self):
        """``(reads, writes)`` now, to subtract from a later snapshot."""
        with self._lock:
            return self.reads, self.writes

    def reset(self):
        with self._lock:
            self.by_method.clear()


class PlacementClient:
    """What the service asks of Placement, one method per question."""

    def __init__(self, adapter):
        self._adapter = adapter
        self.calls = CallCounter()
        # Told of every call once it ends: (HTTP method, status or None
        # when no answer came, seconds); the conductor's metrics.
        self.on_request = None

    @classmethod
    def from_conf(cls, conf, group=placement_conf.GROUP):
        """From keystoneauth's session, auth and adapter options; every
        call times out after ``[placement] timeout`` seconds
        (``DEFAULT_TIMEOUT`` when unset) and is tried again once on a
        connection that failed (``[placement] connect_retries``)."""
        auth = ks_loading.load_auth_from_conf_options(conf, group)
        session = ks_loading.load_session_from_conf_options(
            conf, group, auth=auth)
        if session.timeout is None:
            session.timeout = DEFAULT_TIMEOUT
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, group, session=session, auth=auth)
        if adapter.connect_retries is None:
            adapter.connect_retries = DEFAULT_CONNECT_RETRIES
        return cls(adapter)

    @classmethod
    def from_session(cls, session, **adapter_options):
        """From a keystoneauth session; options go to the Adapter."""
        adapter_options.setdefault('service_type', SERVICE_TYPE)
        return cls(ks_adapter.Adapter(session, **adapter_options))

    # -- transport ------------------------------------------------------

    def _request(self, method, path, body=None, expected=(200,)):
        self.calls.record(method)
        kwargs = {'microversion': MICROVERSION,
                  'microversion_service_type': SERVICE_TYPE,
                  'raise_exc': False,
                  'headers': {'Accept': 'application/json'}}
        if body is not None:
            kwargs['json'] = body
        started = time.monotonic()
        status = None
        try:
            response = self._adapter.request(path, method, **kwargs)
            status = response.status_code
        finally:
            if self.on_request is not None:
                self.on_request(method, status, time.monotonic() - started)
        if response.status_code not in expected:
            raise _error_for(method, path, response)
        return response

    def _get(self, path):
        return self._request('GET', path).json()

    # -- resource providers ---------------------------------------------

    def find_provider_by_name(self, name):
        """The provider called ``name``, or None."""
        query = urllib.parse.urlencode({'name': name})
        found = self._get('/resource_providers?' + query)
        providers = found['resource_providers']
        return providers[0] if providers else None

    def get_provider(self, uuid):
        """The provider, or None when there is none with that UUID."""
        try:
            return self._get('/resource_providers/%s' % uuid)
        except NotFound:
            return None

    def providers_in_tree(self, uuid):
        """Every provider of the tree that holds ``uuid`` (one call)."""
        query = urllib.parse.urlencode({'in_tree': uuid})
        return self._get('/resource_providers?' + query)['resource_providers']

    def create_provider(self, name, uuid=None, parent_uuid=None):
        """Create a provider; returns it, with its generation (0)."""
        body = {'name': name}
        if uuid:
            body['uuid'] = uuid
        if parent_uuid:
            body['parent_provider_uuid'] = parent_uuid
        return self._request('POST', '/resource_providers', body).json()

    def delete_provider(self, uuid):
        """Raises ProviderInUse or ProviderHasChildren when refused."""
        self._request('DELETE', '/resource_providers/%s' % uuid,
                      expected=(204,))

    # -- inventories, traits, usages of one provider ----------------------

    def get_inventories(self, uuid):
        """``(generation, {resource class: inventory fields})``."""
        found = self._get('/resource_providers/%s/inventories' % uuid)
        return found['resource_provider_generation'], found['inventories']

    def put_inventories(self, uuid, generation, inventories):
        """Replace every inventory; returns the new generation."""
        body = {'resource_provider_generation': generation,
                'inventories': inventories}
        answer = self._request(
            'PUT', '/resource_providers/%s/inventories' % uuid, body).json()
        return answer['resource_provider_generation']

    def get_traits(self, uuid):
        """``(generation, frozenset of trait names)``."""
        found = self._get('/resource_providers/%s/traits' % uuid)
        return found['resource_provider_generation'], frozenset(
            found['traits'])

    def put_traits(self, uuid, generation, traits):
        """Replace every trait; returns the new generation."""
        body = {'resource_provider_generation': generation,
                'traits': sorted(traits)}
        answer = self._request(
            'PUT', '/resource_providers/%s/traits' % uuid, body).json()
        return answer['resource_provider_generation']

    def get_usages(self, uuid):
        """``{resource class: amount allocated}``."""
        return self._get('/resource_providers/%s/usages' % uuid)['usages']

    # -- allocations -----------------------------------------------------

    def get_provider_allocations(self, uuid):
        """``{consumer uuid: {resource class: amount}}`` on the provider."""
        found = self._get('/resource_providers/%s/allocations' % uuid)
        return {consumer: dict(allocation['resources'])
                for consumer, allocation in found['allocations'].items()}

    def get_allocations(self, consumer_uuid):
        """A consumer's allocations as Placement shows them: providers'
        resources, ``consumer_generation``, ``project_id``, ``user_id``
        and ``consumer_type``."""
        return self._get('/allocations/%s' % consumer_uuid)

    def put_allocations(self, consumer_uuid, allocations, generation,
                        project_id, user_id, consumer_type):
        """Replace a consumer's allocations, if its generation is still
        ``generation``: raises GenerationConflict when it is not, and
        Conflict when a provider lacks the room."""
        self._request('PUT', '/allocations/%s' % consumer_uuid, {
            'allocations': allocations, 'consumer_generation': generation,
            'project_id': project_id, 'user_id': user_id,
            'consumer_type': consumer_type}, expected=(204,))

    def reshape(self, inventories, allocations):
        """Replace inventories and the allocations of whole consumers in
        one transaction (``POST /reshaper``)."""
        self._request('POST', '/reshaper',
                      {'inventories': inventories,
                       'allocations': allocations}, expected=(204,))

    # -- global names ----------------------------------------------------

    def ensure_resource_class(self, name):
        """Create the custom resource class unless it exists (idempotent)."""
        self._request('PUT', '/resource_classes/%s' % name,
                      expected=(201, 204))

    def ensure_trait(self, name):
        """Create the custom trait unless it exists (idempotent)."""
        self._request('PUT', '/traits/%s' % name, expected=(201, 204))


class _WSGITransport(requests.adapters.BaseAdapter):
    """Hands each request to a WSGI application instead of a socket."""

    def __init__(self, app):
        super().__init__()
        self._app = app

    def send(self, request, **kwargs):
        url = urllib.parse.urlsplit(request.url)
        body = request.body or b''
        if isinstance(body, str):
            body = body.encode('utf-8')
        environ = {
            'REQUEST_METHOD': request.method,
            'SCRIPT_NAME': '',
            # PEP 3333: the path decoded, carried as latin-1 text.
            'PATH_INFO': urllib.parse.unquote_to_bytes(
                url.path or '/').decode('latin-1'),
            'QUERY_STRING': url.query,
            'SERVER_NAME': url.hostname or 'localhost',
            'SERVER_PORT': str(url.port or 80),
            'SERVER_PROTOCOL': 'HTTP/1.1',
            'CONTENT_LENGTH': str(len(body)),
            'wsgi.version': (1, 0),
            'wsgi.url_scheme': url.scheme or 'http',
            'wsgi.input': io.BytesIO(body),
            'wsgi.errors': io.StringIO(),
            'wsgi.multithread': True,
            'wsgi.multiprocess': False,
            'wsgi.run_once': False,
        }
        for name, value in request.headers.items():
            key = name.upper().replace('-', '_')
            if key == 'CONTENT_TYPE':
                environ['CONTENT_TYPE'] = value
            elif key != 'CONTENT_LENGTH':
                environ['HTTP_' + key] = value

        status_headers = []

        def start_response(status, headers, exc_info=None):
            status_headers[:] = [status, headers]

        # Placement's own request context must not stay this thread's.
        previous = cyborg_context.current()
        try:
            chunks = self._app(environ, start_response)
            try:
                content = b''.join(chunks)
            finally:
                if hasattr(chunks, 'close'):
                    chunks.close()
        finally:
            cyborg_context.restore_current(previous)
        status, headers = status_headers
        response = requests.Response()
        response.status_code = int(status.split(' ', 1)[0])
        response.reason = status.split(' ', 1)[-1]
        response.headers = requests.structures.CaseInsensitiveDict(headers)
        response.encoding = requests.utils.get_encoding_from_headers(
            response.headers)
        response.raw = io.BytesIO(content)
        response._content = content
        response.url = request.url
        response.request = request
        return response

    def close(self):
        pass


def wsgi_adapter(app, headers=None):
    """A keystoneauth Adapter whose requests go to ``app`` in-process.

    For the single-machine mode and tests: Placement runs as a WSGI app
    in this process and no port is opened. ``headers`` are sent with
    every request (Placement's noauth2 wants an ``X-Auth-Token``).
    """
    endpoint = 'http://placement.in-process'
    http = requests.Session()
    http.mount(endpoint, _WSGITransport(app))
    session = ks_session.Session(session=http,
                                 additional_headers=headers or {})
    return ks_adapter.Adapter(session, service_type=SERVICE_TYPE,
                              endpoint_override=endpoint)
