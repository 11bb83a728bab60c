"""The limits of a project, read from Keystone through oslo.limit.

oslo.limit's ``Enforcer`` finds this service's endpoint (``[oslo_limit]``
of the process's ``cfg.CONF``: ``endpoint_id``, or the service type and
region) and reads registered limits (each resource's default) and the
project's own limits. Each API worker keeps what it read for
``[quota] limits_cache_seconds``: Keystone is asked at most twice per
project in that time (its limits, the registered ones), not on every
creation, and never while a project's creations are locked.

oslo.limit's own ``enforce`` is not used: it counts usage through a
callback outside any transaction, while a creation here counts it in the
transaction that inserts the ARQs, under the project's lock
(``cyborg.db.api.project_usage``).
"""

import threading
import time

from keystoneauth1 import exceptions as ksa_exceptions
from openstack import exceptions as sdk_exceptions
from oslo_config import cfg
from oslo_limit import exception as limit_exc
from oslo_log import log as logging

from cyborg import exception

LOG = logging.getLogger(__name__)


class LimitsUnavailable(exception.CyborgError):
    status = 503
    code = 'cyborg.quota.limits_unavailable'


class NoLimits:
    """``[quota] driver = noop``: nothing is limited."""

    enforced = False

    def limits_of(self, project_id):
        return {}


def _usage_in_transaction(project_id, resource_names):
    raise RuntimeError('Usage is counted in the transaction that creates '
                       'the accelerator requests (project_usage), not by '
                       'oslo.limit.')


class UnifiedLimits:
    """Keystone's unified limits of this service, per project, kept for
    ``[quota] limits_cache_seconds``."""

    enforced = True

    def __init__(self, conf, clock=time.monotonic):
        self._ttl = conf.quota.limits_cache_seconds
        self._timeout = conf.quota.keystone_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._enforcer = None
        self._registered = None  # (read at, {name: default limit})
        self._projects = {}  # project id -> (read at, {name: limit})

    def limits_of(self, project_id):
        """{resource name: limit} for ``project_id``: its own limit where
        it has one, else the registered default; -1 is unlimited."""
        now = self._clock()
        kept = self._projects.get(project_id)
        if kept is not None and now - kept[0] < self._ttl:
            return kept[1]
        with self._lock:
            try:
                limits = dict(self._registered_limits(now))
                limits.update(self._enforcer_now().get_project_limits(
                    project_id, None))
            except (ksa_exceptions.ClientException,
                    sdk_exceptions.SDKException, limit_exc.SessionInitError,
                    ValueError) as e:
                LOG.warning('Limits of project %s could not be read from '
                            'Keystone: %s', project_id, e)
                raise LimitsUnavailable(
                    'The limits of project %s could not be read from '
                    'Keystone, so no accelerator request was created; try '
                    'again later.' % project_id) from e
            if len(self._projects) > 10000:
                self._projects.clear()
            self._projects[project_id] = (now, limits)
            return limits

    def _registered_limits(self, now):
        if self._registered is None or now - self._registered[0] >= self._ttl:
            self._registered = (now, dict(
                self._enforcer_now().get_registered_limits(None)))
        return self._registered[1]

    def _enforcer_now(self):
        if self._enforcer is None:
            from oslo_limit import limit
            group = cfg.CONF.oslo_limit
            if group.timeout is None:
                cfg.CONF.set_default('timeout', self._timeout,
                                     group='oslo_limit')
            # cache=False: what it reads is kept here, for a time.
            self._enforcer = limit.Enforcer(_usage_in_transaction,
                                            cache=False)
        return self._enforcer


def from_conf(conf):
    from cyborg.conf import quota
    if conf.quota.driver == quota.UNIFIED_LIMITS:
        return UnifiedLimits(conf)
    return NoLimits()
