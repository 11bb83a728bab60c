"""Schema migrations: the alembic revisions in cyborg/db/migrations.

Each function takes a database URL; the alembic configuration is built
here, so no alembic.ini is needed.
"""

from alembic import command
from alembic import config as alembic_config
from alembic import script as alembic_script
from alembic.runtime import migration as alembic_migration
import sqlalchemy as sa

SCRIPT_LOCATION = 'cyborg.db:migrations'


def _config(url):
    config = alembic_config.Config()
    config.set_main_option('script_location', SCRIPT_LOCATION)
    # Read by env.py; kept out of the ini options, which would take a '%'
    # in the URL (an escaped password, say) for interpolation.
    config.attributes['url'] = url
    return config


def upgrade(url, revision='head'):
    """Migrate the database at ``url`` up to ``revision``."""
    command.upgrade(_config(url), revision)


def stamp(url, revision):
    """Record ``revision`` as the database's version, running nothing."""
    command.stamp(_config(url), revision)


def version(url):
    """The revision the database is at, or None if it has none."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            context = alembic_migration.MigrationContext.configure(connection)
            return context.get_current_revision()
    finally:
        engine.dispose()


def head():
    """The newest revision of the migrations."""
    scripts = alembic_script.ScriptDirectory.from_config(_config(None))
    return scripts.get_current_head()
