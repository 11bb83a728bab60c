"""A fleet of services: membership, per-host Placement sync state, per-ARQ
bind deadlines and deployable reservations.

Revision ID: f3c7a1d9b2e4
Revises: e8f1a2b3c4d5
Create Date: 2026-11-23 09:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'f3c7a1d9b2e4'
down_revision = 'e8f1a2b3c4d5'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    op.create_table(
        'services',
        sa.Column('id', sa.Integer, nullable=False),
        sa.Column('host', sa.String(255), nullable=False),
        sa.Column('binary', sa.String(64), nullable=False),
        sa.Column('version', sa.String(64), nullable=True),
        sa.Column('rpc_version', sa.String(16), nullable=True),
        sa.Column('last_seen_at', sa.DateTime, nullable=False),
        sa.Column('created_at', sa.DateTime, nullable=False),
        sa.Column('updated_at', sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_services')),
        sa.UniqueConstraint('host', 'binary',
                            name=op.f('uq_services_host_binary')),
    )
    op.create_table(
        'host_sync_states',
        sa.Column('id', sa.Integer, nullable=False),
        sa.Column('hostname', sa.String(255), nullable=False),
        sa.Column('desired_generation', sa.Integer, nullable=False,
                  server_default='1'),
        sa.Column('synced_generation', sa.Integer, nullable=False,
                  server_default='0'),
        sa.Column('compute_node_uuid', sa.String(36), nullable=True),
        sa.Column('synced_at', sa.DateTime, nullable=True),
        sa.Column('last_error', sa.Text, nullable=True),
        sa.Column('created_at', sa.DateTime, nullable=False),
        sa.Column('updated_at', sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_host_sync_states')),
        sa.UniqueConstraint('hostname',
                            name=op.f('uq_host_sync_states_hostname')),
    )
    with op.batch_alter_table('extended_accelerator_requests') as batch:
        batch.add_column(sa.Column('bind_deadline', sa.DateTime,
                                   nullable=True))
    with op.batch_alter_table('deployables') as batch:
        batch.add_column(sa.Column('reservation', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column('reserved_at', sa.DateTime,
                                   nullable=True))
