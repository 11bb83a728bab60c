"""/v2/services: the conductors and agents and whether they are alive.

Admins only, from microversion 2.4; below it the path does not exist.
Each row is one process kind on one host, written by its heartbeat; a
service is ``up`` while its last heartbeat is younger than ``[DEFAULT]
service_down_time``.
"""

import pecan

from cyborg import exception
from cyborg.api import expose
from cyborg.api import views
from cyborg.api.controllers import resource
from cyborg.db import models
from cyborg.db.api import services as db

FROM_VERSION = (2, 4)
BINARIES = (db.CONDUCTOR, db.AGENT)
# The host column's width.
MAX_HOST = 255


def _view(row, down_after, now):
    return {
        'host': row.host,
        'binary': row.binary,
        'version': row.version,
        'rpc_version': row.rpc_version,
        'state': 'up' if db.is_alive(row, down_after, now) else 'down',
        'last_seen_at': views.timestamp(row.last_seen_at),
        'created_at': views.timestamp(row.created_at),
        'updated_at': views.timestamp(row.updated_at),
    }


def _filter(params, name, check):
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise exception.Invalid('Give %s= at most once.' % name,
                                code='cyborg.service.invalid_filter')
    problem = check(value)
    if problem:
        raise exception.Invalid(problem, code='cyborg.service.invalid_filter')
    return value


def _binary_problem(value):
    if value not in BINARIES:
        return 'binary must be one of %s, not %r.' % (', '.join(BINARIES),
                                                       value)


def _host_problem(value):
    if not value or len(value) > MAX_HOST or not value.isprintable():
        return ('host must be a host name of 1 to %d printable characters, '
                'not %r.' % (MAX_HOST, value))


class ServicesController(resource.ResourceController):

    FROM_VERSION = FROM_VERSION

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        request.authorize('cyborg:service:get_all')
        binary = _filter(params, 'binary', _binary_problem)
        host = _filter(params, 'host', _host_problem)
        rows = db.list_services(request.context, binary=binary, host=host)
        down_after = request.app_state.conf.service_down_time
        now = models.utcnow()
        return {'services': [_view(r, down_after, now) for r in rows]}
