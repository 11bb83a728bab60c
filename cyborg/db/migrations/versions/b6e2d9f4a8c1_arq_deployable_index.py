"""ARQs indexed by deployable: a MIG bind reads the other ARQs of its GPU
(the instances made on it, the binds waiting for it) while it holds the
GPU's lock. MariaDB had an index already, the one its foreign key made;
the named one takes its place there.

Revision ID: b6e2d9f4a8c1
Revises: d7a3c9e1f5b2
Create Date: 2026-12-07 13:00:00
"""

from alembic import op

revision = 'b6e2d9f4a8c1'
down_revision = 'd7a3c9e1f5b2'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    op.create_index('ix_extended_accelerator_requests_deployable_id',
                    'extended_accelerator_requests', ['deployable_id'])
