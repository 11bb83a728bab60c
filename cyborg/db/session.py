"""One database per configuration: the oslo.db enginefacade around it."""

import contextlib
import logging
import os
import threading
import time

from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import enginefacade
from oslo_db.sqlalchemy import exc_filters
import sqlalchemy as sa
from sqlalchemy import orm

from cyborg.db import prepared as db_prepared

LOG = logging.getLogger(__name__)

# The execution option that marks a connection as a writer's.
_WRITER = 'cyborg_writer'
# Seconds a connection of the autocommit pool (``read_rows``) may rest and
# still be used without a ping first.
PING_AFTER_IDLE = 1.0


class Database:
    """Transactions on the database named by a ``[database]`` group.

    Every function of ``cyborg.db.api`` takes a request context; the
    transaction lives on that context for the length of the ``with`` block,
    so nested calls share it.
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
        self._options = options
        self._autocommit = None
        self._autocommit_lock = threading.Lock()
        self._sqlite = conf.database.connection.startswith('sqlite')
        if self._sqlite:
            _begin_writers_immediately(self.engine)

    def warm_up(self):
        """Do now what the first statements would do on their way: start
        the transactions' engine (oslo.db does on first use, with a test
        connection), leave a connection in each pool and map the models.
        """
        for engine in self.engines:
            with engine.connect():
                pass
        orm.configure_mappers()

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
        """A Core connection for reads that need no ORM objects (faster).

        Inside a transaction of ``context`` it is that transaction's;
        otherwise the engine's own, closed at the end of the ``with``
        block: enginefacade's bookkeeping costs more than a small SELECT,
        and it ends a read with two ROLLBACKs (its own, then the pool's)
        where closing the connection sends one.
        """
        if _in_transaction(context):
            return self._facade.reader.connection.using(context)
        return self.engine.connect()

    @contextlib.contextmanager
    def autocommit_connection(self, context):
        """A Core connection whose statements each commit on their own,
        for work that needs no transaction (each of its writes stands
        alone); inside a transaction of ``context``, that transaction's.
        Saves the BEGIN and COMMIT round trips of ``write_connection``.
        """
        if self._sqlite or _in_transaction(context):
            with self.write_connection(context) as connection:
                yield connection
            return
        with self._autocommit_engine().connect() as connection:
            yield connection

    @contextlib.contextmanager
    def write_connection(self, context):
        """A Core connection in a transaction, committed at the end of the
        ``with`` block (rolled back if it raises).

        Inside a transaction of ``context`` it is that transaction's.
        Otherwise a connection of the autocommit pool (see ``read_rows``)
        that begins and ends its own transaction: a writer of the
        transactions' pool pays a ping before and a ROLLBACK after its
        COMMIT, one round trip more to the server than BEGIN costs, and
        its session's bookkeeping. A connection found broken at BEGIN,
        when nothing was sent yet, is replaced once.
        """
        if self._sqlite or _in_transaction(context):
            with self.writer(context) as session:
                yield session.connection()
            return
        engine = self._autocommit_engine()
        connection = engine.connect()
        try:
            try:
                connection.exec_driver_sql('BEGIN')
            except db_exc.DBConnectionError:
                connection.close()
                connection = engine.connect()
                connection.exec_driver_sql('BEGIN')
            try:
                yield connection
                connection.exec_driver_sql('COMMIT')
            except BaseException:
                _roll_back(connection)
                raise
        finally:
            connection.close()

    def read_rows(self, context, statement):
        """Every row of one SELECT.

        Outside a transaction of ``context`` it runs alone, in autocommit
        on a pool of its own: a lone SELECT needs no transaction, and so
        neither the ROLLBACK after it nor the ping before it that the
        transactions' pool sends, two round trips to the server that cost
        more than a small SELECT. A connection found broken is replaced
        and the SELECT sent again, once.
        """
        if self._sqlite or _in_transaction(context):
            with self.read_connection(context) as connection:
                return connection.execute(statement).all()
        engine = self._autocommit_engine()
        try:
            with engine.connect() as connection:
                return connection.execute(statement).all()
        except db_exc.DBConnectionError:
            # The server restarted, say: the pool dropped what it had.
            with engine.connect() as connection:
                return connection.execute(statement).all()

    def read_prepared(self, context, prepared, params=None):
        """Every row of a ``prepared.Prepared`` SELECT, as tuples.

        As ``read_rows``, on the driver's cursor where the statement
        allows it (see ``cyborg.db.prepared``); through SQLAlchemy on
        SQLite and inside a transaction of ``context``.
        """
        on_cursor = self._on_cursor(context, prepared)
        if on_cursor is None:
            statement = prepared.statement
            return [tuple(row) for row in self.read_rows(
                context, statement.params(params) if params else statement)]
        engine, sql, arguments = on_cursor
        try:
            return db_prepared.fetch_all(engine, sql, arguments(params))
        except db_exc.DBConnectionError:
            # As read_rows: the server restarted, say.
            return db_prepared.fetch_all(engine, sql, arguments(params))

    def write_prepared(self, context, prepared, params=None):
        """Run a ``prepared.Prepared`` write that commits on its own (as
        in ``autocommit_connection``); the number of rows it matched.

        On the driver's cursor where the statement allows it. A driver
        error there sends the statement again through SQLAlchemy, whose
        error (translated by oslo.db) is the one raised: a statement that
        failed in autocommit changed nothing.
        """
        on_cursor = self._on_cursor(context, prepared)
        if on_cursor is not None:
            engine, sql, arguments = on_cursor
            try:
                return db_prepared.write(engine, sql, arguments(params))
            except db_exc.DBError:
                pass
        with self.autocommit_connection(context) as connection:
            return connection.execute(prepared.statement,
                                      params or {}).rowcount

    def _on_cursor(self, context, prepared):
        """``(engine, sql, arguments)`` to send ``prepared`` on the driver's
        cursor, or None where SQLAlchemy must run it: on SQLite, inside a
        transaction of ``context``, when the engine is watched or the
        statement does not allow it."""
        if self._sqlite or _in_transaction(context):
            return None
        engine = self._autocommit_engine()
        if db_prepared.watched(engine):
            return None
        form = prepared.form(engine.dialect)
        return None if form is None else (engine, *form)

    def _autocommit_engine(self):
        if self._autocommit is None:
            with self._autocommit_lock:
                if self._autocommit is None:
                    self._autocommit = _new_autocommit_engine(self._options)
        return self._autocommit

    @property
    def reuses_ids(self):
        """Whether a deleted row's id may be given to a new row: SQLite
        gives the highest id again once its row is gone; InnoDB (which
        keeps its counter across restarts) and PostgreSQL's sequences
        never do."""
        return self._sqlite

    @property
    def engine(self):
        return self._facade.writer.get_engine()

    @property
    def engines(self):
        """Every engine that runs this database's statements: the
        transactions' and, but on SQLite, that of ``read_rows``."""
        if self._sqlite:
            return [self.engine]
        return [self.engine, self._autocommit_engine()]

    def dispose(self):
        self._facade.dispose_pool()
        if self._autocommit is not None:
            self._autocommit.dispose()


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


def _new_autocommit_engine(options):
    """An engine of the ``[database]`` options whose connections are in
    autocommit, with oslo.db's error translation and MySQL SQL mode."""
    url = sa.engine.make_url(options['connection'])
    if options.get('connection_parameters'):
        url = url.update_query_string(options['connection_parameters'],
                                      append=True)
    engine = sa.create_engine(
        url, isolation_level='AUTOCOMMIT', skip_autocommit_rollback=True,
        pool_size=options.get('max_pool_size') or 5,
        max_overflow=options.get('max_overflow') or 0,
        pool_timeout=options.get('pool_timeout') or 30,
        pool_recycle=options.get('connection_recycle_time') or -1)
    exc_filters.register_engine(engine)
    sql_mode = options.get('mysql_sql_mode')

    @sa.event.listens_for(engine, 'connect')
    def connected(dbapi_connection, record):
        record.info['pid'] = os.getpid()
        if sql_mode and engine.dialect.name == 'mysql':
            cursor = dbapi_connection.cursor()
            cursor.execute('SET SESSION sql_mode = %s', [sql_mode])
            cursor.close()

    @sa.event.listens_for(engine, 'checkin')
    def returned(dbapi_connection, record):
        record.info['returned'] = time.monotonic()

    @sa.event.listens_for(engine, 'checkout')
    def usable(dbapi_connection, record, proxy):
        # A connection inherited through a fork belongs to the parent.
        if record.info.get('pid') != os.getpid():
            record.dbapi_connection = proxy.dbapi_connection = None
            raise sa.exc.DisconnectionError('a connection of another process')
        # One that rested may have been closed by the server meanwhile (a
        # restart, its wait_timeout): pinged, and replaced if it was. One
        # in steady use is not, which spares a round trip per statement.
        idle = time.monotonic() - record.info.get('returned', 0.0)
        if idle > PING_AFTER_IDLE:
            try:
                engine.dialect.do_ping(dbapi_connection)
            except engine.dialect.loaded_dbapi.Error as e:
                if engine.dialect.is_disconnect(e, dbapi_connection, None):
                    raise sa.exc.DisconnectionError(str(e)) from e
                raise

    return engine


def _roll_back(connection):
    """End the transaction of a ``write_connection``; a connection that
    cannot is closed, never pooled with a transaction open."""
    if connection.invalidated:
        return
    try:
        connection.exec_driver_sql('ROLLBACK')
    except Exception:
        connection.invalidate()


def _in_transaction(context):
    # Where enginefacade keeps the context's transaction on this thread.
    local = getattr(context, '_enginefacade_context', None)
    return getattr(local, 'current', None) is not None


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
