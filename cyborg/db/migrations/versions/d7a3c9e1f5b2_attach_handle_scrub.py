"""Attach handles: state (free, in_use, dirty, scrubbing) and the last
scrub's result, so that a handle released by one instance is scrubbed
and verified before another gets it.

Revision ID: d7a3c9e1f5b2
Revises: c4f8a2e6b0d3
Create Date: 2026-11-29 21:30:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'd7a3c9e1f5b2'
down_revision = 'c4f8a2e6b0d3'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    with op.batch_alter_table('attach_handles') as batch:
        batch.add_column(sa.Column('state', sa.String(16), nullable=False,
                                   server_default='free'))
        batch.add_column(sa.Column('dirty_since', sa.DateTime))
        batch.add_column(sa.Column('scrub_conductor', sa.String(255)))
        batch.add_column(sa.Column('scrub_started_at', sa.DateTime))
        batch.add_column(sa.Column('last_scrub_result', sa.String(16)))
        batch.add_column(sa.Column('last_scrub_step', sa.String(64)))
        batch.add_column(sa.Column('last_scrub_message', sa.Text))
        batch.add_column(sa.Column('last_scrub_at', sa.DateTime))
        batch.add_column(sa.Column('last_scrub_seconds', sa.Float))
        batch.create_index('ix_attach_handles_state', ['state'])
    handles = sa.table('attach_handles', sa.column('in_use', sa.Boolean),
                       sa.column('state', sa.String))
    op.execute(handles.update().where(handles.c.in_use == sa.true())
               .values(state='in_use'))
