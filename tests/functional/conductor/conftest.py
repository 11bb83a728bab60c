"""Real databases (three engines) and a real Placement for the conductor."""

import pytest
import sqlalchemy as sa

from cyborg.conductor import host_sync as host_sync_module
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401

HOST = 'compute1.example.com'
WRITE_VERBS = ('INSERT', 'UPDATE', 'DELETE')


class WriteRecorder:
    """The rows each INSERT, UPDATE and DELETE touched, by table.

    An UPDATE or DELETE that touches no row is not a write (the SQLite
    host lock is an UPDATE that matches nothing).
    """

    def __init__(self, *engines):
        self.engines = engines
        self.writes = []
        for engine in engines:
            sa.event.listen(engine, 'after_cursor_execute', self._seen)

    def _seen(self, conn, cursor, statement, parameters, context, many):
        words = statement.split()
        verb = words[0].upper()
        # SQLite counts the rows of INSERT ... RETURNING only once they
        # are fetched; an INSERT always has rows here.
        if verb not in WRITE_VERBS or (verb != 'INSERT'
                                       and cursor.rowcount == 0):
            return
        table = words[2] if verb in ('INSERT', 'DELETE') else words[1]
        self.writes.append((verb, table.strip('`"')))

    def tables(self):
        return sorted(set(self.writes))

    def reset(self):
        self.writes.clear()

    def close(self):
        for engine in self.engines:
            sa.event.remove(engine, 'after_cursor_execute', self._seen)


@pytest.fixture
def db_writes(db):
    recorder = WriteRecorder(*db.engines)
    yield recorder
    recorder.close()


@pytest.fixture
def client(placement):  # noqa: F811
    """The conductor's Placement client; its call counter starts at zero."""
    return placement.client()


@pytest.fixture
def observer(placement):  # noqa: F811
    """A second client, to look without touching the conductor's counts."""
    return placement.client()


@pytest.fixture
def compute_node(placement):  # noqa: F811
    return create_compute_node(placement.adapter(), HOST)


@pytest.fixture
def host_sync(client):
    return host_sync_module.HostSync(client)
