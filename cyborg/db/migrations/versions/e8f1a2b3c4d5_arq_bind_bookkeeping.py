"""Accelerator requests remember who binds them and whether Nova was told.

Revision ID: e8f1a2b3c4d5
Revises: d5e2b7c4a1f0
Create Date: 2026-11-21 10:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'e8f1a2b3c4d5'
down_revision = 'd5e2b7c4a1f0'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    with op.batch_alter_table('extended_accelerator_requests') as batch:
        batch.add_column(sa.Column('bind_conductor', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column('bind_started_at', sa.DateTime,
                                   nullable=True))
        batch.add_column(sa.Column('nova_event_pending', sa.Boolean,
                                   nullable=False,
                                   server_default=sa.false()))
        batch.create_index(
            'ix_extended_accelerator_requests_nova_event_pending',
            ['nova_event_pending'])
