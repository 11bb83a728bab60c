"""Service membership: each conductor and agent process and its heartbeat.

A service is one row per (host, binary), written by its own heartbeat
(or, for an agent, by the conductor that receives it). A service is
alive while its last heartbeat is younger than ``[DEFAULT]
service_down_time``; clocks of the hosts are assumed in step (NTP), as
Nova assumes for its services table.
"""

import datetime

from oslo_db import exception as db_exception
import sqlalchemy as sa

from cyborg.db import models

CONDUCTOR = 'cyborg-conductor'
AGENT = 'cyborg-agent'

_services = models.Service.__table__


# The heartbeat's UPDATE by the names of the columns it sets, built once:
# a conductor runs it for every agent's heartbeat (hundreds a second in
# a large fleet), and building a statement costs more than running it.
_heartbeat_updates = {}


def _heartbeat_update(names):
    statement = _heartbeat_updates.get(names)
    if statement is None:
        where = ((_services.c.host == sa.bindparam('w_host'))
                 & (_services.c.binary == sa.bindparam('w_binary')))
        if 'usage_at' in names:
            # A heartbeat that waited behind a newer one of its host (on
            # the bus, or for the database) leaves the newer's figures.
            # The caller stamps no later than its now; a row stamped in
            # the future (by a clock that ran ahead) orders nothing.
            where &= (_services.c.usage_at.is_(None)
                      | (_services.c.usage_at <= sa.bindparam('v_usage_at'))
                      | (_services.c.usage_at > sa.bindparam(
                          'w_now', type_=_services.c.usage_at.type)))
        statement = _services.update().where(where).values({
            name: sa.bindparam('v_' + name, type_=_services.c[name].type)
            for name in names})
        _heartbeat_updates[names] = statement
    return statement


def heartbeat(context, host, binary, version=None, rpc_version=None,
              **figures):
    """Record that ``binary`` on ``host`` is alive now: one UPDATE, and
    an INSERT the first time. ``figures`` are other columns of the row
    written with it (an agent's ``usage`` and ``usage_at``). Returns
    whether it was written: not when the row holds figures observed
    later (``usage_at``) than these, from a heartbeat handled first.
    ``usage_at`` counts no later than this server's now: a host's clock
    that ran ahead once does not silence its later heartbeats."""
    now = models.utcnow()
    if figures.get('usage_at') is not None:
        figures['usage_at'] = min(figures['usage_at'], now)
    values = dict(figures, last_seen_at=now, updated_at=now)
    if version is not None:
        values['version'] = version
    if rpc_version is not None:
        values['rpc_version'] = rpc_version
    update = _heartbeat_update(tuple(sorted(values)))
    parameters = {'v_' + name: value for name, value in values.items()}
    parameters.update(w_host=host, w_binary=binary)
    if 'usage_at' in values:
        parameters['w_now'] = now
    # Not a writer's session: for one UPDATE, its bookkeeping costs more
    # than the statement.
    with context.db.write_connection(context) as connection:
        updated = connection.execute(update, parameters).rowcount
    if updated:
        return True
    try:
        with context.db.writer(context) as session:
            session.connection().execute(_services.insert().values(
                host=host, binary=binary, version=version, **figures,
                rpc_version=rpc_version, last_seen_at=now, created_at=now))
        return True
    except db_exception.DBDuplicateEntry:
        # Another process of the same host and binary inserted first, or
        # the row holds newer figures.
        with context.db.write_connection(context) as connection:
            return bool(connection.execute(update, parameters).rowcount)


def list_services(context, binary=None, host=None):
    """Every service row, by binary then host."""
    stmt = sa.select(_services).order_by(_services.c.binary,
                                         _services.c.host)
    if binary is not None:
        stmt = stmt.where(_services.c.binary == binary)
    if host is not None:
        stmt = stmt.where(_services.c.host == host)
    with context.db.read_connection(context) as connection:
        return connection.execute(stmt).all()


def live_hosts(context, binary, down_after_seconds, now=None):
    """The hosts whose ``binary`` sent a heartbeat within
    ``down_after_seconds``, sorted."""
    return [host for host, _ in live_heartbeats(
        context, binary, down_after_seconds, now)]


def live_heartbeats(context, binary, down_after_seconds, now=None):
    """``(host, last_seen_at)`` of the live ``binary`` services, sorted by
    host. ``now`` keeps its fraction of a second: a heartbeat expires
    the moment it is ``down_after_seconds`` old, not up to a second
    later."""
    now = now or precise_utcnow()
    since = now - datetime.timedelta(seconds=down_after_seconds)
    stmt = (sa.select(_services.c.host, _services.c.last_seen_at)
            .where(_services.c.binary == binary)
            .where(_services.c.last_seen_at >= since)
            .order_by(_services.c.host))
    with context.db.read_connection(context) as connection:
        return [(row.host, row.last_seen_at)
                for row in connection.execute(stmt)]


def precise_utcnow():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def is_alive(row, down_after_seconds, now=None):
    """Whether a service row's heartbeat is recent enough."""
    now = now or models.utcnow()
    return (now - row.last_seen_at).total_seconds() <= down_after_seconds


def forget(context, host, binary):
    """Remove a service row (an operator retired the host)."""
    with context.db.writer(context) as session:
        return session.connection().execute(_services.delete().where(
            (_services.c.host == host)
            & (_services.c.binary == binary))).rowcount
