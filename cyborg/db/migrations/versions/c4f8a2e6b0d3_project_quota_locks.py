"""A row per project that ARQ creation locks while it counts the
project's usage against its limits.

Revision ID: c4f8a2e6b0d3
Revises: a9c4e7f2d1b8
Create Date: 2026-11-29 21:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'c4f8a2e6b0d3'
down_revision = 'a9c4e7f2d1b8'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    op.create_table(
        'project_quota_locks',
        sa.Column('project_id', sa.String(255), nullable=False),
        sa.Column('created_at', sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint('project_id', name='pk_project_quota_locks'))
