"""One database per configuration: the oslo.db enginefacade around it."""

from oslo_db.sqlalchemy import enginefacade


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

    def reader(self, context):
        return self._facade.reader.using(context)

    def writer(self, context):
        return self._facade.writer.using(context)

    def read_connection(self, context):
        """A Core connection for reads that need no ORM objects (faster)."""
        return self._facade.reader.connection.using(context)

    @property
    def engine(self):
        return self._facade.writer.get_engine()

    def dispose(self):
        self._facade.dispose_pool()
