"""Runs the revisions on the database that cyborg.db.migration names.

The caller puts the URL in ``config.attributes['url']``: a URL may hold
``%``, which an ini option would take for interpolation.
"""

from alembic import context
import sqlalchemy as sa

from cyborg.db import models


def run_migrations(connection):
    context.configure(
        connection=connection,
        target_metadata=models.Base.metadata,
        # SQLite alters little in place; batch mode copies the table.
        render_as_batch=connection.dialect.name == 'sqlite',
    )
    with context.begin_transaction():
        context.run_migrations()


def main():
    if context.is_offline_mode():
        raise RuntimeError('Offline (--sql) migrations are not supported.')
    engine = sa.create_engine(context.config.attributes['url'],
                              poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            run_migrations(connection)
    finally:
        engine.dispose()


main()
