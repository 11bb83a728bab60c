"""Device configuration: the operators' policies and each selected
device's configuration status.

Revision ID: c9e4f2a7b1d3
Revises: b7d3e9f1a5c2
Create Date: 2026-11-28 14:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'c9e4f2a7b1d3'
down_revision = 'b7d3e9f1a5c2'
branch_labels = None
depends_on = None


# Forward only: to go back, restore a backup.
def upgrade():
    op.create_table(
        'device_config_policies',
        sa.Column('id', sa.Integer, nullable=False),
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('priority', sa.Integer, nullable=False),
        sa.Column('host_selector', sa.Text, nullable=False),
        sa.Column('device_selector', sa.Text, nullable=False),
        sa.Column('kind', sa.String(32), nullable=False),
        sa.Column('settings', sa.Text, nullable=False),
        sa.Column('restore_on_delete', sa.Boolean, nullable=False,
                  server_default=sa.false()),
        sa.Column('created_at', sa.DateTime, nullable=False),
        sa.Column('updated_at', sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_device_config_policies')),
        sa.UniqueConstraint('uuid',
                            name=op.f('uq_device_config_policies_uuid')),
        sa.UniqueConstraint('name',
                            name=op.f('uq_device_config_policies_name')),
        # Ids are never reused: a status row names its policy by id.
        sqlite_autoincrement=True,
    )
    op.create_table(
        'device_config_status',
        sa.Column('id', sa.Integer, nullable=False),
        sa.Column('device_id', sa.Integer, nullable=False),
        sa.Column('policy_id', sa.Integer, nullable=False),
        sa.Column('wanted_settings', sa.Text, nullable=False),
        sa.Column('applied_settings', sa.Text, nullable=True),
        sa.Column('state', sa.String(16), nullable=False,
                  server_default='pending'),
        sa.Column('failed_task', sa.String(255), nullable=True),
        sa.Column('message', sa.Text, nullable=True),
        sa.Column('created_at', sa.DateTime, nullable=False),
        sa.Column('updated_at', sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_device_config_status')),
        sa.ForeignKeyConstraint(
            ['device_id'], ['devices.id'], ondelete='CASCADE',
            name=op.f('fk_device_config_status_device_id_devices')),
        sa.ForeignKeyConstraint(
            ['policy_id'], ['device_config_policies.id'], ondelete='CASCADE',
            name=op.f('fk_device_config_status_policy_id_'
                      'device_config_policies')),
        sa.UniqueConstraint('device_id',
                            name=op.f('uq_device_config_status_device_id')),
    )
    op.create_index(op.f('ix_device_config_status_policy_id'),
                    'device_config_status', ['policy_id'])
