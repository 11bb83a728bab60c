"""Ids of ARQs and device profiles are never given to a new row again.

SQLite gives a new row the highest id in use plus one, so the id of the
newest row, once deleted, comes back: a bind still at work on a deleted
ARQ would then find another ARQ under its id, and a profile re-made
under a name could match what a worker remembers of the old one.
AUTOINCREMENT makes SQLite count on from the highest id it ever gave.
InnoDB and PostgreSQL's sequences never reuse ids: nothing to do there.

Revision ID: b7d3e9f1a5c2
Revises: a4b8c2d6e0f1
Create Date: 2026-12-07 09:00:00
"""

from alembic import op

revision = 'b7d3e9f1a5c2'
down_revision = 'a4b8c2d6e0f1'
branch_labels = None
depends_on = None

_TABLES = ('device_profiles', 'extended_accelerator_requests')


# Forward only: to go back, restore a backup.
def upgrade():
    if op.get_bind().dialect.name != 'sqlite':
        return
    # Copied into a table made with AUTOINCREMENT; the copied ids set
    # its counter to the highest of them.
    for table in _TABLES:
        with op.batch_alter_table(
                table, recreate='always',
                table_kwargs={'sqlite_autoincrement': True}):
            pass
