"""One database per configuration: the oslo.db enginefacade around it."""

import contextlib

from oslo_db.sqlalchemy import enginefacade
import sqlalchemy as sa

# The execution option that marks a connection as a writer's.
_WRITER = 'cyborg_writer'


class Database:
    """Transactions on the database named by a ``[database]`` group.

    Every function of ``cyborg.db.api`` takes a request context; the
    transaction lives on that context for the length of the ``with`` block,
    so nested calls share it.
    """

    def __init__(self, conf):
        self._facade = enginefacade.transaction_context()
        options = dict(conf.database.items())
        # SQLite enforces foreign keys only when asked to.
        options['sqlite_fk'] = True
        # No eventlet here: yielding on every connection check-in only
        # costs time.
        options['thread_checkin'] = False
        self._facade.configure(**options)
        self._sqlite = conf.database.connection.startswith('sqlite')
        if self._sqlite:
            _begin_writers_immediately(self.engine)

    def reader(self, context):
        return self._facade.reader.using(context)

    @contextlib.contextmanager
    def writer(self, context):
        with self._facade.writer.using(context) as session:
            # A writer nested in another shares its connection, which
            # began as a writer's already.
            if self._sqlite and not session.info.get(_WRITER):
                session.connection(execution_options={_WRITER: True})
                session.info[_WRITER] = True
            yield session

    def read_connection(self, context):
        """A Core connection for reads that need no ORM objects (faster)."""
        return self._facade.reader.connection.using(context)

    @property
    def engine(self):
        return self._facade.writer.get_engine()

    def dispose(self):
        self._facade.dispose_pool()


def _begin_writers_immediately(engine):
    """Writers take SQLite's write lock when they begin.

    A transaction that reads first and writes later cannot upgrade its
    lock while another writer waits to commit: SQLite answers "database
    is locked" at once instead of waiting. Taking the lock up front makes
    writers queue (for the busy timeout) instead. This replaces oslo.db's
    listener, which emits a plain BEGIN for every transaction.
    """
    for listener in list(engine.dispatch.begin):
        if listener.__name__ == '_sqlite_emit_begin':
            sa.event.remove(engine, 'begin', listener)

    def begin(connection):
        if 'in_transaction' not in connection.info:
            immediate = connection.get_execution_options().get(_WRITER)
            connection.exec_driver_sql('BEGIN IMMEDIATE' if immediate
                                       else 'BEGIN')
            # oslo.db's commit and rollback listeners clear it.
            connection.info['in_transaction'] = True

    sa.event.listen(engine, 'begin', begin)
