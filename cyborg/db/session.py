"""One database per configuration: the oslo.db enginefacade around it."""

import contextlib
import logging

from oslo_db.sqlalchemy import enginefacade
import sqlalchemy as sa
from sqlalchemy import orm

from cyborg.db import models
from cyborg.db import prepared as db_prepared

LOG = logging.getLogger(__name__)

# Marks a session whose transaction holds SQLite's write lock.
_WRITE_LOCKED = 'cyborg_write_locked'

# SQLite's write lock, taken by a write that changes nothing: a statement
# that writes makes SQLite take the database's RESERVED lock, matched
# rows or not (``cyborg.db.api.locking`` relies on the same). On a table
# with no column written on update, so that nothing is computed for it.
_LOCKED = models.ProjectQuotaLock.__table__
SQLITE_WRITE_LOCK = sa.update(_LOCKED).where(sa.false()).values(
    project_id=_LOCKED.c.project_id)


class Database:
    """Transactions on the database named by a ``[database]`` group.

    Every statement runs through one oslo.db enginefacade, on one engine
    and its one pool, made of every ``[database]`` option. Every function
    of ``cyborg.db.api`` takes a request context; the transaction lives
    on that context for the length of the ``with`` block, so nested calls
    share it. Core statements take a connection (``read_connection``,
    ``write_connection``): enginefacade's ``.connection``, the same
    transaction a session of the context would use, without the ORM.
    """

    def __init__(self, conf):
        self._facade = enginefacade.transaction_context()
        options = dict(conf.database.items())
        for name in ('connection', 'slave_connection'):
            if options.get(name):
                options[name] = with_mysql_driver(options[name])
        # SQLite enforces foreign keys only when asked to.
        options['sqlite_fk'] = True
        # No eventlet here: yielding on every connection check-in only
        # costs time.
        options['thread_checkin'] = False
        self._facade.configure(**options)
        self._sqlite = conf.database.connection.startswith('sqlite')

    def warm_up(self):
        """Do now what the first statements would do on their way: start
        the engine (oslo.db does on first use, with a test connection),
        leave a connection in its pool and map the models. Nothing is
        written."""
        with self.engine.connect():
            pass
        orm.configure_mappers()

    def reader(self, context):
        return self._facade.reader.using(context)

    @contextlib.contextmanager
    def writer(self, context):
        """A session in a writer transaction of ``context`` (that of an
        enclosing writer, if any), committed at the end of the ``with``
        block, rolled back if it raises.

        On SQLite the transaction's first statement takes the database's
        write lock. A transaction that reads first and writes later
        cannot upgrade its lock while another writer waits to commit:
        SQLite answers "database is locked" at once instead of waiting.
        Holding the lock from the start makes writers queue (for the busy
        timeout) instead, as ``BEGIN IMMEDIATE`` would; oslo.db begins
        every transaction with a plain ``BEGIN``.
        """
        with self._facade.writer.using(context) as session:
            # A writer nested in another shares its transaction, which
            # took the lock already.
            if self._sqlite and not session.info.get(_WRITE_LOCKED):
                session.execute(SQLITE_WRITE_LOCK)
                session.info[_WRITE_LOCKED] = True
            yield session

    def read_connection(self, context):
        """A Core connection in a reader transaction of ``context`` (that
        of an enclosing reader or writer, if any), rolled back at the end
        of the ``with`` block."""
        return self._facade.reader.connection.using(context)

    @contextlib.contextmanager
    def write_connection(self, context):
        """A Core connection in a writer transaction of ``context`` (that
        of an enclosing writer, if any), committed at the end of the
        ``with`` block, rolled back if it raises."""
        if self._sqlite:
            # Through a session, which takes the write lock first (see
            # ``writer``).
            with self.writer(context) as session:
                yield session.connection()
            return
        with self._facade.writer.connection.using(context) as connection:
            yield connection

    def read_rows(self, context, statement):
        """Every row of one SELECT, read as ``read_connection`` does."""
        with self.read_connection(context) as connection:
            return connection.execute(statement).all()

    def read_prepared(self, context, prepared, params=None):
        """Every row of a ``prepared.Prepared`` SELECT, as tuples, in a
        transaction of its own (whatever ``context`` holds).

        Where the statement allows it (see ``cyborg.db.prepared``), it is
        sent on the DBAPI cursor of a connection of the one engine's pool
        (checked out with its ping and process guard, every
        ``[database]`` option applied), in the driver's implicit
        transaction, which the pool's reset at check-in rolls back: what
        a reader transaction does, without building one. A driver error
        there sends the SELECT again through SQLAlchemy, in a reader
        transaction, so that the error raised is oslo.db's.
        """
        engine = self.engine
        form = (None if db_prepared.watched(engine)
                else prepared.form(engine.dialect))
        if form is not None:
            sql, arguments = form
            try:
                return db_prepared.fetch_all(engine, sql, arguments(params))
            except engine.dialect.loaded_dbapi.Error:
                pass
        with self._facade.reader.independent.connection.using(
                context) as connection:
            return [tuple(row) for row in connection.execute(
                prepared.statement, params or {})]

    @property
    def engine(self):
        return self._facade.writer.get_engine()

    @property
    def engines(self):
        """Every engine that runs this database's statements: one."""
        return [self.engine]

    def dispose(self):
        self._facade.dispose_pool()


# SQLAlchemy's names of the MySQL drivers this chooses between; a URL
# naming another (mysqlconnector, say) is left as it is.
_MYSQL_DRIVERS = ('mysqldb', 'pymysql')


def mysql_driver():
    """mysqlclient (``mysqldb``, in C) where it is installed, else PyMySQL:
    in pure Python, PyMySQL spends more on the protocol than MariaDB spends
    on a small query."""
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        return 'pymysql'
    return 'mysqldb'


def with_mysql_driver(url):
    """``url`` with ``mysql_driver()`` when it is a MySQL URL of either
    driver (``mysql+pymysql://`` and ``mysql://`` included); any other
    URL as it is."""
    parsed = sa.engine.make_url(url)
    if (parsed.get_backend_name() != 'mysql'
            or parsed.get_driver_name() not in _MYSQL_DRIVERS):
        return url
    driver = mysql_driver()
    LOG.info('MySQL driver: %s', 'mysqlclient (mysqldb)'
             if driver == 'mysqldb' else 'PyMySQL (mysqlclient is not '
             'installed)')
    if parsed.drivername == 'mysql+' + driver:
        return url
    return parsed.set(drivername='mysql+' + driver).render_as_string(
        hide_password=False)
