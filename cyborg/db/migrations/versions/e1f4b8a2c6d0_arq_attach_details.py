"""Accelerator requests keep what their host made for them at bind (a MIG
instance's identity), so that only that is destroyed at unbind.

Revision ID: e1f4b8a2c6d0
Revises: d8a3f6c1e2b9
Create Date: 2026-11-29 14:30:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'e1f4b8a2c6d0'
down_revision = 'd8a3f6c1e2b9'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    with op.batch_alter_table('extended_accelerator_requests') as batch:
        batch.add_column(sa.Column('attach_details', sa.Text, nullable=True))
