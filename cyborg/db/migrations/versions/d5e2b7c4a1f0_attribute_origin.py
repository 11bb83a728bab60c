"""Attributes say who made them: a driver's report or an operator.

Revision ID: d5e2b7c4a1f0
Revises: c3a91f0d2e57
Create Date: 2026-11-21 08:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'd5e2b7c4a1f0'
down_revision = 'c3a91f0d2e57'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    with op.batch_alter_table('attributes') as batch:
        batch.add_column(sa.Column('origin', sa.String(16), nullable=False,
                                   server_default='operator'))
