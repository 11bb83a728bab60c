"""ARQs indexed by resource provider: a MIG bind reads the other ARQs
bound or being bound to its GPU's provider (what they asked for, what was
made for them) while it holds the GPU's lock.

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
    op.create_index('ix_extended_accelerator_requests_device_rp_uuid',
                    'extended_accelerator_requests', ['device_rp_uuid'])
