"""Device health and usage: each device's health state, its reason and
quarantine, the operator's override, and the latest usage figures of each
agent's host on its service row.

Revision ID: a4b8c2d6e0f1
Revises: f3c7a1d9b2e4
Create Date: 2026-11-23 12:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'a4b8c2d6e0f1'
down_revision = 'f3c7a1d9b2e4'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('health', sa.String(16), nullable=False,
                                   server_default='unknown'))
        batch.add_column(sa.Column('health_reason', sa.Text, nullable=True))
        batch.add_column(sa.Column('health_updated_at', sa.DateTime,
                                   nullable=True))
        batch.add_column(sa.Column('quarantined', sa.Boolean,
                                   nullable=False,
                                   server_default=sa.false()))
        batch.add_column(sa.Column('health_override', sa.String(16),
                                   nullable=True))
        batch.create_index('ix_devices_health', ['health'])
    with op.batch_alter_table('services') as batch:
        batch.add_column(sa.Column('usage', sa.Text, nullable=True))
        batch.add_column(sa.Column('usage_at', sa.DateTime, nullable=True))
