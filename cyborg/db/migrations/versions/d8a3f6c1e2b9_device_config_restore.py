"""Device configuration: a policy deleted while its devices are put back
as discovered.

Revision ID: d8a3f6c1e2b9
Revises: c9e4f2a7b1d3
Create Date: 2026-11-29 12:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'd8a3f6c1e2b9'
down_revision = 'c9e4f2a7b1d3'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    with op.batch_alter_table('device_config_policies') as batch:
        batch.add_column(sa.Column('deleted_at', sa.DateTime, nullable=True))
