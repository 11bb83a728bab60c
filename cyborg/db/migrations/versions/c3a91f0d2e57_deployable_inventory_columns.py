"""Typed inventory columns: a deployable's resource class and traits, and
when a device stopped being reported.

Revision ID: c3a91f0d2e57
Revises: bde4d44a22a6
Create Date: 2026-11-21 07:10:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'c3a91f0d2e57'
down_revision = 'bde4d44a22a6'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    with op.batch_alter_table('deployables') as batch:
        batch.add_column(sa.Column('resource_class', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column('traits', sa.Text(), nullable=True))
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('missing_since', sa.DateTime(),
                                   nullable=True))
