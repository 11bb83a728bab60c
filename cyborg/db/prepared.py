"""The one fast path: SELECTs built once and sent on the driver's cursor.

SQLAlchemy's execution (its execution context, the Result and its Row
objects) costs more than the round trip of a small SELECT on a busy
endpoint. A ``Prepared`` SELECT is compiled by SQLAlchemy once per
dialect, then sent as plain SQL on the DBAPI cursor of a connection of the
engine that enginefacade made (``Database.read_prepared``): the same
engine, pool and ``[database]`` options as every other statement, in the
driver's implicit transaction that the pool rolls back at check-in; only
the execution differs, and its rows come back as the driver's tuples.

Only a statement that SQLAlchemy would add nothing to qualifies: no
column whose type converts what the driver returns, no parameter whose
type converts what is sent, no parameter rendered at execution
(expanding IN lists). Anything else runs through SQLAlchemy as usual, and
so does every statement of an engine whose statements something watches
(SQL logging, ``[database] connection_debug``, or an event listener: a
profiler, a statement counter), so that it misses none.

Reads only: a SELECT that fails on the cursor is sent again through
SQLAlchemy in a new reader transaction, so that the error raised is the
one oslo.db translates (a SELECT may be sent twice; a write could not).
tests/functional/db/test_prepared.py runs each statement both ways on
every engine.
"""

import logging
import threading

from sqlalchemy import exc as sa_exc


class Prepared:
    """A Core statement, built once (at import, or cached)."""

    def __init__(self, statement):
        self.statement = statement
        self._forms = {}
        self._lock = threading.Lock()

    def form(self, dialect):
        """``(sql, arguments)`` for ``dialect``, where ``arguments(params)``
        gives the driver's parameters; None if SQLAlchemy must run it."""
        key = (dialect.name, dialect.driver)
        try:
            return self._forms[key]
        except KeyError:
            pass
        with self._lock:
            if key not in self._forms:
                self._forms[key] = _form(self.statement, dialect)
        return self._forms[key]


def _form(statement, dialect):
    compiled = statement.compile(dialect=dialect)
    if compiled.literal_execute_params or compiled.post_compile_params:
        return None
    # A write (no RETURNING) has no columns to convert.
    for column in getattr(statement, 'selected_columns', ()):
        if column.type.dialect_impl(dialect).result_processor(
                dialect, None) is not None:
            return None
    for bind in compiled.binds.values():
        if bind.type.dialect_impl(dialect).bind_processor(dialect):
            return None
    if compiled.positional:
        order = tuple(compiled.positiontup)

        def arguments(params):
            values = compiled.construct_params(params)
            return tuple(values[name] for name in order)
    else:
        escaped = compiled.escaped_bind_names

        def arguments(params):
            values = compiled.construct_params(params)
            return {escaped.get(name, name): value
                    for name, value in values.items()}
    # The statement's own values, worked out once (unless some must be
    # given). Sent even when empty, so that the driver turns the
    # compiler's escaped '%%' back into '%'.
    try:
        own = arguments(None)
    except sa_exc.InvalidRequestError:
        return compiled.string, arguments
    return compiled.string, lambda params: (
        arguments(params) if params else own)


def watched(engine):
    """Whether something sees ``engine``'s statements as they are sent."""
    return bool(engine.logger.isEnabledFor(logging.INFO)
                or engine.dispatch.before_cursor_execute
                or engine.dispatch.after_cursor_execute)


def fetch_all(engine, sql, arguments):
    """Every row of ``sql`` on a connection of ``engine``'s pool, as the
    driver's tuples. A connection that turns out broken is invalidated,
    not pooled again; the driver's error is raised."""
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        try:
            cursor.execute(sql, arguments)
            return list(cursor.fetchall())
        except engine.dialect.loaded_dbapi.Error as e:
            if engine.dialect.is_disconnect(
                    e, connection.dbapi_connection, cursor):
                connection.invalidate(e)
            raise
        finally:
            try:
                cursor.close()
            except engine.dialect.loaded_dbapi.Error:
                pass  # its connection is gone: nothing to free
    finally:
        connection.close()
