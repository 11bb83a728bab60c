"""Throwaway databases on the real engines of this machine.

SQLite is a file; MariaDB (root, no password) and PostgreSQL (trust) run on
127.0.0.1. Each call makes a new empty database and the caller drops it.
"""

import os
import uuid

import sqlalchemy as sa

ENGINES = ('sqlite', 'mysql', 'postgresql')

MYSQL_SERVER = os.environ.get('CYBORG_TEST_MYSQL',
                              'mysql+pymysql://root@127.0.0.1:3306')
POSTGRESQL_SERVER = os.environ.get(
    'CYBORG_TEST_POSTGRESQL', 'postgresql+psycopg2://postgres@127.0.0.1:5432')


def create_database(engine_name, directory):
    """The URL of a new, empty database on ``engine_name``."""
    name = 'cyborg_test_%s' % uuid.uuid4().hex[:12]
    if engine_name == 'sqlite':
        return 'sqlite:///%s/%s.sqlite' % (directory, name)
    if engine_name == 'mysql':
        admin = sa.create_engine(MYSQL_SERVER + '/')
        with admin.connect() as conn:
            conn.execute(sa.text(
                'CREATE DATABASE %s CHARACTER SET utf8mb4' % name))
        admin.dispose()
        return '%s/%s?charset=utf8mb4' % (MYSQL_SERVER, name)
    if engine_name == 'postgresql':
        admin = sa.create_engine(POSTGRESQL_SERVER + '/postgres',
                                 isolation_level='AUTOCOMMIT')
        with admin.connect() as conn:
            conn.execute(sa.text('CREATE DATABASE %s' % name))
        admin.dispose()
        return '%s/%s' % (POSTGRESQL_SERVER, name)
    raise ValueError('unknown engine %s' % engine_name)


def drop_database(url):
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == 'sqlite':
        if parsed.database and os.path.exists(parsed.database):
            os.unlink(parsed.database)
        return
    if parsed.get_backend_name() == 'mysql':
        admin = sa.create_engine(MYSQL_SERVER + '/')
        statement = 'DROP DATABASE IF EXISTS %s' % parsed.database
    else:
        admin = sa.create_engine(POSTGRESQL_SERVER + '/postgres',
                                 isolation_level='AUTOCOMMIT')
        statement = 'DROP DATABASE IF EXISTS %s WITH (FORCE)' % (
            parsed.database)
    with admin.connect() as conn:
        conn.execute(sa.text(statement))
    admin.dispose()
