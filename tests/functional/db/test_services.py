"""The services table on the three engines, and the conductors' hash ring
read from it (``cyborg.conductor.membership``)."""

import contextlib
import datetime
import logging

import pytest
import sqlalchemy as sa

from cyborg.conductor import membership as membership_mod
from cyborg.db import models
from cyborg.db.api import services as services_db
from tests import db_servers

CONDUCTOR, AGENT = services_db.CONDUCTOR, services_db.AGENT
DOWN_AFTER = 30
HOSTS = ['compute-%03d' % i for i in range(200)]


def age(db, host, binary, seconds):
    table = models.Service.__table__
    with db.engine.begin() as connection:
        connection.execute(table.update().where(
            (table.c.host == host) & (table.c.binary == binary)).values(
            last_seen_at=models.utcnow()
            - datetime.timedelta(seconds=seconds)))


def rows(admin_context):
    return {(r.host, r.binary): r
            for r in services_db.list_services(admin_context)}


def test_heartbeat_inserts_once_then_updates(admin_context, db):
    services_db.heartbeat(admin_context, 'ctl-1', CONDUCTOR, '1.0', '1.4')
    first = rows(admin_context)[('ctl-1', CONDUCTOR)]
    assert (first.version, first.rpc_version) == ('1.0', '1.4')
    assert first.created_at is not None and first.updated_at is None

    age(db, 'ctl-1', CONDUCTOR, 100)
    services_db.heartbeat(admin_context, 'ctl-1', CONDUCTOR, '1.1')
    again = rows(admin_context)[('ctl-1', CONDUCTOR)]

    assert len(rows(admin_context)) == 1
    assert again.id == first.id and again.created_at == first.created_at
    assert again.last_seen_at > first.last_seen_at - datetime.timedelta(
        seconds=1)
    # A heartbeat without an RPC version keeps the one recorded.
    assert (again.version, again.rpc_version) == ('1.1', '1.4')
    assert again.updated_at is not None


def test_heartbeat_is_one_update_with_its_figures(admin_context,
                                                  sql_counter):
    usage = {'0000:10:00.0': {'gpu_util_percent': 7, 'observed_at': 1.5}}
    usage_at = datetime.datetime(2024, 1, 2, 3, 4, 5)
    services_db.heartbeat(admin_context, 'h', AGENT, '1.0', '1.1',
                          usage=usage, usage_at=usage_at)
    sql_counter.reset()

    services_db.heartbeat(admin_context, 'h', AGENT, '1.2', usage={},
                          usage_at=usage_at)
    services_db.heartbeat(admin_context, 'h', AGENT, '1.3', usage=usage,
                          usage_at=usage_at)
    # The same again, most likely within the same second: a row the
    # UPDATE leaves as it was still counts as found (no INSERT).
    services_db.heartbeat(admin_context, 'h', AGENT, '1.3', usage=usage,
                          usage_at=usage_at)

    assert [s.split()[0] for s in sql_counter.statements] == ['UPDATE'] * 3
    row = rows(admin_context)[('h', AGENT)]
    assert (row.version, row.rpc_version) == ('1.3', '1.1')
    assert (row.usage, row.usage_at) == (usage, usage_at)
    # Built once for each set of columns written, then reused.
    built = dict(services_db._heartbeat_updates)
    services_db.heartbeat(admin_context, 'h', AGENT, '1.4', usage=usage,
                          usage_at=usage_at)
    assert services_db._heartbeat_updates.keys() == built.keys()
    assert all(services_db._heartbeat_updates[names] is statement
               for names, statement in built.items())


def test_a_heartbeat_behind_a_newer_one_leaves_its_figures(admin_context,
                                                            db):
    newer = {'0000:10:00.0': {'gpu_util_percent': 90, 'observed_at': 20.0}}
    older = {'0000:10:00.0': {'gpu_util_percent': 5, 'observed_at': 10.0}}
    at = datetime.datetime(2024, 1, 2, 3, 4, 5)
    later = at + datetime.timedelta(seconds=10)
    assert services_db.heartbeat(admin_context, 'h', AGENT, usage=newer,
                                 usage_at=later)

    # Handled after it, though observed before: not written.
    assert not services_db.heartbeat(admin_context, 'h', AGENT,
                                     usage=older, usage_at=at)
    row = rows(admin_context)[('h', AGENT)]
    assert (row.usage, row.usage_at) == (newer, later)

    # Observed in the same second, or later: written.
    assert services_db.heartbeat(admin_context, 'h', AGENT, usage=older,
                                 usage_at=later)
    assert rows(admin_context)[('h', AGENT)].usage == older


def test_heartbeat_in_a_transaction_is_part_of_it(admin_context):
    class Undo(Exception):
        pass

    with contextlib.suppress(Undo), admin_context.db.writer(admin_context):
        services_db.heartbeat(admin_context, 'ctl-1', CONDUCTOR)
        services_db.heartbeat(admin_context, 'ctl-1', CONDUCTOR, '1.1')
        assert rows(admin_context)[('ctl-1', CONDUCTOR)].version == '1.1'
        raise Undo()

    assert rows(admin_context) == {}


# Not SQLite: one writer at a time, nobody inserts meanwhile.
@pytest.mark.parametrize(
    'database_url', [e for e in db_servers.ENGINES if e != 'sqlite'],
    indirect=True)
def test_heartbeat_after_another_inserted_the_row_updates_it(
        admin_context, db, db_url):
    table = models.Service.__table__
    other = sa.create_engine(db_url)

    inserted = []

    def insert_first(connection, statement, *args):
        if (isinstance(statement, sa.Insert) and statement.table is table
                and not inserted):
            inserted.append(True)
            # Another process of the same agent, a moment before.
            with other.begin() as elsewhere:
                elsewhere.execute(table.insert().values(
                    host='h', binary=AGENT, version='0.9',
                    last_seen_at=models.utcnow(),
                    created_at=models.utcnow()))

    sa.event.listen(db.engine, 'before_execute', insert_first)
    try:
        services_db.heartbeat(admin_context, 'h', AGENT, '1.0', '1.1')
    finally:
        sa.event.remove(db.engine, 'before_execute', insert_first)
        other.dispose()

    assert inserted

    row = rows(admin_context)[('h', AGENT)]
    assert (row.version, row.rpc_version) == ('1.0', '1.1')
    assert len(rows(admin_context)) == 1


def test_same_host_two_binaries_are_two_rows(admin_context):
    services_db.heartbeat(admin_context, 'h', CONDUCTOR)
    services_db.heartbeat(admin_context, 'h', AGENT)
    assert sorted(rows(admin_context)) == [('h', AGENT), ('h', CONDUCTOR)]
    assert [r.binary for r in services_db.list_services(
        admin_context, binary=AGENT)] == [AGENT]


def test_live_hosts_leaves_out_old_heartbeats(admin_context, db):
    for host in ('ctl-b', 'ctl-a', 'ctl-c'):
        services_db.heartbeat(admin_context, host, CONDUCTOR)
    services_db.heartbeat(admin_context, 'compute', AGENT)
    age(db, 'ctl-c', CONDUCTOR, DOWN_AFTER + 5)

    assert services_db.live_hosts(admin_context, CONDUCTOR,
                                  DOWN_AFTER) == ['ctl-a', 'ctl-b']
    assert services_db.live_hosts(admin_context, AGENT,
                                  DOWN_AFTER) == ['compute']
    dead = rows(admin_context)[('ctl-c', CONDUCTOR)]
    assert not services_db.is_alive(dead, DOWN_AFTER)
    assert services_db.is_alive(dead, DOWN_AFTER + 60)


def test_forget_removes_the_row(admin_context):
    services_db.heartbeat(admin_context, 'ctl-1', CONDUCTOR)
    assert services_db.forget(admin_context, 'ctl-1', CONDUCTOR) == 1
    assert services_db.live_hosts(admin_context, CONDUCTOR, DOWN_AFTER) == []


# -- the ring -----------------------------------------------------------------

def _membership(admin_context, host='api'):
    membership = membership_mod.Membership(admin_context, host, DOWN_AFTER)
    membership.refresh()
    return membership


def test_two_readers_of_the_same_rows_agree(admin_context):
    for host in ('ctl-1', 'ctl-2', 'ctl-3'):
        services_db.heartbeat(admin_context, host, CONDUCTOR)
    one = _membership(admin_context, 'ctl-1')
    other = _membership(admin_context, 'api')

    owners = {h: one.owner_of(h) for h in HOSTS}
    assert owners == {h: other.owner_of(h) for h in HOSTS}
    # Every conductor gets a share of the hosts.
    assert set(owners.values()) == {'ctl-1', 'ctl-2', 'ctl-3'}
    assert one.owns(next(h for h in HOSTS if owners[h] == 'ctl-1'))
    assert not one.owns(next(h for h in HOSTS if owners[h] == 'ctl-2'))


def test_a_conductor_leaving_moves_only_its_hosts(admin_context, db):
    for host in ('ctl-1', 'ctl-2', 'ctl-3'):
        services_db.heartbeat(admin_context, host, CONDUCTOR)
    membership = _membership(admin_context)
    before = {h: membership.owner_of(h) for h in HOSTS}

    age(db, 'ctl-2', CONDUCTOR, DOWN_AFTER + 1)
    joined, left = membership.refresh()
    after = {h: membership.owner_of(h) for h in HOSTS}

    assert (joined, left) == (set(), {'ctl-2'})
    assert membership.live == ('ctl-1', 'ctl-3')
    moved = {h for h in HOSTS if before[h] != after[h]}
    assert moved == {h for h in HOSTS if before[h] == 'ctl-2'}
    assert set(after.values()) == {'ctl-1', 'ctl-3'}

    # It comes back: its hosts come back to it, and only those.
    services_db.heartbeat(admin_context, 'ctl-2', CONDUCTOR)
    assert membership.refresh() == ({'ctl-2'}, set())
    assert {h: membership.owner_of(h) for h in HOSTS} == before


def test_no_live_conductor_means_no_owner(admin_context, db):
    membership = _membership(admin_context, 'ctl-1')
    assert membership.owner_of('compute-1') is None
    # Before its first heartbeat is read, a conductor acts for every host.
    assert membership.owns('compute-1')

    services_db.heartbeat(admin_context, 'ctl-1', CONDUCTOR)
    age(db, 'ctl-1', CONDUCTOR, DOWN_AFTER + 1)
    membership.refresh()
    assert membership.owner_of('compute-1') is None
    assert not membership.is_alive('ctl-1')


def test_current_reads_again_only_after_max_age(admin_context):
    membership = membership_mod.Membership(admin_context, 'api', DOWN_AFTER,
                                           max_age=3600)
    assert membership.current().live == ()
    services_db.heartbeat(admin_context, 'ctl-1', CONDUCTOR)
    assert membership.current().live == ()
    membership.max_age = 0
    assert membership.current().live == ('ctl-1',)


def test_heartbeat_logs_the_change_and_runs_the_hooks(admin_context, db,
                                                      caplog):
    services_db.heartbeat(admin_context, 'ctl-2', CONDUCTOR)
    calls = []

    def broken(joined, left):
        raise RuntimeError('a broken hook')

    membership = membership_mod.Membership(admin_context, 'ctl-1',
                                           DOWN_AFTER)
    heartbeat = membership_mod.Heartbeat(
        admin_context, membership, '1.0', '1.4',
        [broken, lambda joined, left: calls.append((joined, left))])
    with caplog.at_level(logging.INFO, 'cyborg.conductor.membership'):
        assert heartbeat.beat() == ({'ctl-1', 'ctl-2'}, set())
        assert heartbeat.beat() == (set(), set())
        age(db, 'ctl-2', CONDUCTOR, DOWN_AFTER + 1)
        heartbeat.beat()

    assert calls == [({'ctl-1', 'ctl-2'}, set()), (set(), {'ctl-2'})]
    own = rows(admin_context)[('ctl-1', CONDUCTOR)]
    assert (own.version, own.rpc_version) == ('1.0', '1.4')
    changes = [r.getMessage() for r in caplog.records
               if 'ring changed' in r.getMessage()]
    assert changes[-1] == ('Conductor ring changed: joined none, left '
                           'ctl-2; 1 live conductors: ctl-1')
    assert any('a broken hook' in (r.exc_text or '') for r in caplog.records)


def test_the_watch_looks_again_when_the_oldest_peer_expires(admin_context,
                                                             db):
    for host in ('ctl-1', 'ctl-2', 'ctl-3'):
        services_db.heartbeat(admin_context, host, CONDUCTOR)
    age(db, 'ctl-2', CONDUCTOR, 20)
    age(db, 'ctl-3', CONDUCTOR, 5)
    membership = _membership(admin_context, 'ctl-1')
    now = models.utcnow()
    # ctl-2 expires first, DOWN_AFTER - 20 s from now.
    assert 10 <= membership.seconds_to_expiry(now) <= 10.1
    # Its own heartbeat is not a peer's: alone, nothing to watch for.
    alone = membership_mod.Membership(admin_context, 'ctl-1', DOWN_AFTER)
    age(db, 'ctl-2', CONDUCTOR, 100)
    age(db, 'ctl-3', CONDUCTOR, 100)
    alone.refresh()
    assert alone.live == ('ctl-1',)
    assert alone.seconds_to_expiry(now) is None


def test_a_watch_past_the_expiry_finds_the_peer_gone(admin_context, db,
                                                    monkeypatch):
    for host in ('ctl-1', 'ctl-2'):
        services_db.heartbeat(admin_context, host, CONDUCTOR)
    age(db, 'ctl-2', CONDUCTOR, DOWN_AFTER - 1)
    membership = _membership(admin_context, 'ctl-1')
    assert membership.live == ('ctl-1', 'ctl-2')
    now = services_db.precise_utcnow()
    due = membership.seconds_to_expiry(now)
    assert 0.1 <= due <= 1.1
    # The clock when the watch wakes, ``due`` seconds on (not the time
    # this test takes): the expiry has passed.
    monkeypatch.setattr(services_db, 'precise_utcnow', lambda: (
        now + datetime.timedelta(seconds=due)))
    moved = []
    heartbeat = membership_mod.Heartbeat(
        admin_context, membership, '1', '1',
        hooks=[lambda joined, left: moved.append(left)])
    heartbeat.watch()
    assert membership.live == ('ctl-1',)
    assert moved == [{'ctl-2'}]
