"""Writers that take turns on a name until their transaction ends.

For changes whose conflict lies in rows that may not exist yet (a host's
first report, the first bind of an instance): row locks alone would not
do, as there is nothing to lock before the first writer inserts or
updates.

- PostgreSQL: a transaction-scoped advisory lock per name, keyed by a
  hash of the name.
- MySQL/MariaDB: ``SELECT ... FOR UPDATE`` of the rows the names stand
  for, through an index. InnoDB's next-key locks cover the empty range
  too; two writers into the same empty range then deadlock on their
  writes and one is rolled back (``DBDeadlock``), which the caller
  retries.
- SQLite: an UPDATE that matches nothing still takes the database's
  write lock, the only lock SQLite has.
"""

import hashlib

import sqlalchemy as sa


def take_turns(connection, names, table, where):
    """Hold the lock of every name of ``names`` (strings) until the
    transaction of ``connection`` ends; ``where`` selects the rows of
    ``table`` that they stand for."""
    dialect = connection.dialect.name
    if dialect == 'postgresql':
        # In one order, so that two writers never wait on each other.
        for name in sorted(set(names)):
            digest = hashlib.sha256(name.encode('utf-8')).digest()
            key = int.from_bytes(digest[:8], 'big', signed=True)
            connection.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))
    elif dialect == 'mysql':
        connection.execute(sa.select(table.c.id).where(where)
                           .with_for_update())
    else:
        connection.execute(sa.update(table).where(sa.false())
                           .values(id=table.c.id))
