"""The migrated schema, made once per test process and engine, then copied.

Most tests want an empty database at the head revision. Running every
alembic revision for each of them costs a third of a second, most of the
suite's setup time. Instead, the first request on an engine migrates a
template database through alembic, as before, and every later one copies
it:

- SQLite: the template's file is copied;
- MariaDB: each table's ``SHOW CREATE TABLE`` of the template (foreign
  key checks off while they are replayed, so that their order does not
  matter), and the template's ``alembic_version`` row;
- PostgreSQL: migrated directly. Its copy (``CREATE DATABASE ...
  TEMPLATE``) costs as much as the migration.

The template is made from the migrations of this checkout, so a copy is
the schema the migrations make; ``tests/functional/db/test_migrations.py``
checks that a copy and a migrated database are the same.
"""

import os
import shutil
import tempfile
import threading

import sqlalchemy as sa

from tests import db_servers

_lock = threading.Lock()
_sqlite_file = None  # the migrated template's path
_mysql_script = None  # (CREATE TABLE statements, alembic version)


def create_schema(url):
    """Bring the empty database at ``url`` to the head revision."""
    backend = sa.engine.make_url(url).get_backend_name()
    if backend == 'sqlite':
        shutil.copyfile(_sqlite_template(), sa.engine.make_url(url).database)
    elif backend == 'mysql':
        _replay(url, *_mysql_template())
    else:
        _migrate(url)


def _migrate(url):
    from cyborg.db import migration
    migration.upgrade(url)


def _sqlite_template():
    global _sqlite_file
    with _lock:
        if _sqlite_file is None:
            directory = tempfile.mkdtemp(prefix='cyborg-schema-')
            path = os.path.join(directory, 'head.sqlite')
            _migrate('sqlite:///' + path)
            _sqlite_file = path
        return _sqlite_file


def _mysql_template():
    global _mysql_script
    with _lock:
        if _mysql_script is None:
            url = db_servers.create_database('mysql', None)
            try:
                _migrate(url)
                _mysql_script = _read_script(url)
            finally:
                db_servers.drop_database(url)
        return _mysql_script


def _read_script(url):
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            tables = conn.exec_driver_sql('SHOW TABLES').scalars().all()
            statements = [conn.exec_driver_sql(
                'SHOW CREATE TABLE `%s`' % table).one()[1]
                for table in tables]
            version = conn.exec_driver_sql(
                'SELECT version_num FROM alembic_version').scalar_one()
    finally:
        engine.dispose()
    return statements, version


def _replay(url, statements, version):
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql('SET FOREIGN_KEY_CHECKS = 0')
            for statement in statements:
                conn.exec_driver_sql(statement)
            conn.execute(sa.text('INSERT INTO alembic_version (version_num) '
                                 'VALUES (:version)'), {'version': version})
            conn.exec_driver_sql('SET FOREIGN_KEY_CHECKS = 1')
    finally:
        engine.dispose()
