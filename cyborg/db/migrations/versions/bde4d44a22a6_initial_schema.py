"""Initial schema: devices, their deployables and attach handles, ARQs.

Revision ID: bde4d44a22a6
Revises:
Create Date: 2026-11-21 07:00:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'bde4d44a22a6'
down_revision = None
branch_labels = None
depends_on = None


def _id():
    return sa.Column('id', sa.Integer(), nullable=False)


def _uuid():
    return sa.Column('uuid', sa.String(36), nullable=False)


def _timestamps():
    return (sa.Column('created_at', sa.DateTime(), nullable=False),
            sa.Column('updated_at', sa.DateTime(), nullable=True))


def _restrict(column, target, name):
    # Rows are deleted bottom-up by the services, never by cascade.
    return sa.ForeignKeyConstraint([column], [target], name=op.f(name),
                                   ondelete='RESTRICT')


def upgrade():
    op.create_table(
        'devices',
        _id(),
        _uuid(),
        sa.Column('type', sa.String(30), nullable=False),
        sa.Column('vendor', sa.String(255), nullable=False),
        sa.Column('model', sa.String(255), nullable=False),
        sa.Column('std_board_info', sa.Text(), nullable=True),
        sa.Column('vendor_board_info', sa.Text(), nullable=True),
        sa.Column('hostname', sa.String(255), nullable=False),
        sa.Column('status', sa.String(32), nullable=False,
                  server_default='enabled'),
        *_timestamps(),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_devices')),
        sa.UniqueConstraint('uuid', name=op.f('uq_devices_uuid')),
    )
    op.create_index(op.f('ix_devices_hostname'), 'devices', ['hostname'])
    op.create_index(op.f('ix_devices_type'), 'devices', ['type'])
    op.create_index(op.f('ix_devices_vendor'), 'devices', ['vendor'])

    op.create_table(
        'controlpath_ids',
        _id(),
        _uuid(),
        sa.Column('device_id', sa.Integer(), nullable=False),
        sa.Column('cpid_type', sa.String(30), nullable=False),
        sa.Column('cpid_info', sa.String(255), nullable=False),
        *_timestamps(),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_controlpath_ids')),
        sa.UniqueConstraint('uuid', name=op.f('uq_controlpath_ids_uuid')),
        sa.UniqueConstraint(
            'device_id', 'cpid_type', 'cpid_info',
            name=op.f('uq_controlpath_ids_device_id_cpid_type_cpid_info')),
        _restrict('device_id', 'devices.id',
                  'fk_controlpath_ids_device_id_devices'),
    )

    op.create_table(
        'deployables',
        _id(),
        _uuid(),
        sa.Column('parent_id', sa.Integer(), nullable=True),
        sa.Column('root_id', sa.Integer(), nullable=True),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('num_accelerators', sa.Integer(), nullable=False),
        sa.Column('device_id', sa.Integer(), nullable=False),
        sa.Column('driver_name', sa.String(100), nullable=True),
        sa.Column('rp_uuid', sa.String(36), nullable=True),
        sa.Column('bitstream_id', sa.String(36), nullable=True),
        *_timestamps(),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_deployables')),
        sa.UniqueConstraint('uuid', name=op.f('uq_deployables_uuid')),
        _restrict('parent_id', 'deployables.id',
                  'fk_deployables_parent_id_deployables'),
        _restrict('root_id', 'deployables.id',
                  'fk_deployables_root_id_deployables'),
        _restrict('device_id', 'devices.id',
                  'fk_deployables_device_id_devices'),
    )
    op.create_index(op.f('ix_deployables_device_id'), 'deployables',
                    ['device_id'])
    op.create_index(op.f('ix_deployables_rp_uuid'), 'deployables',
                    ['rp_uuid'])

    op.create_table(
        'attributes',
        _id(),
        _uuid(),
        sa.Column('deployable_id', sa.Integer(), nullable=False),
        sa.Column('key', sa.String(255), nullable=False),
        sa.Column('value', sa.String(255), nullable=False),
        *_timestamps(),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_attributes')),
        sa.UniqueConstraint('uuid', name=op.f('uq_attributes_uuid')),
        sa.UniqueConstraint('deployable_id', 'key',
                            name=op.f('uq_attributes_deployable_id_key')),
        _restrict('deployable_id', 'deployables.id',
                  'fk_attributes_deployable_id_deployables'),
    )
    op.create_index(op.f('ix_attributes_key'), 'attributes', ['key'])

    op.create_table(
        'attach_handles',
        _id(),
        _uuid(),
        sa.Column('deployable_id', sa.Integer(), nullable=False),
        sa.Column('cpid_id', sa.Integer(), nullable=False),
        sa.Column('attach_type', sa.String(30), nullable=False),
        sa.Column('attach_info', sa.Text(), nullable=False),
        sa.Column('in_use', sa.Boolean(), nullable=False,
                  server_default=sa.false()),
        *_timestamps(),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_attach_handles')),
        sa.UniqueConstraint('uuid', name=op.f('uq_attach_handles_uuid')),
        _restrict('deployable_id', 'deployables.id',
                  'fk_attach_handles_deployable_id_deployables'),
        _restrict('cpid_id', 'controlpath_ids.id',
                  'fk_attach_handles_cpid_id_controlpath_ids'),
    )
    # Allocation looks for a free handle of one deployable.
    op.create_index(op.f('ix_attach_handles_deployable_id_in_use'),
                    'attach_handles', ['deployable_id', 'in_use'])

    op.create_table(
        'device_profiles',
        _id(),
        _uuid(),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('profile_json', sa.Text(), nullable=False),
        *_timestamps(),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_device_profiles')),
        sa.UniqueConstraint('uuid', name=op.f('uq_device_profiles_uuid')),
        sa.UniqueConstraint('name', name=op.f('uq_device_profiles_name')),
    )

    op.create_table(
        'extended_accelerator_requests',
        _id(),
        _uuid(),
        sa.Column('project_id', sa.String(255), nullable=True),
        sa.Column('state', sa.String(32), nullable=False,
                  server_default='Initial'),
        sa.Column('device_profile_id', sa.Integer(), nullable=False),
        sa.Column('device_profile_group_id', sa.Integer(), nullable=False),
        sa.Column('hostname', sa.String(255), nullable=True),
        sa.Column('device_rp_uuid', sa.String(36), nullable=True),
        sa.Column('instance_uuid', sa.String(36), nullable=True),
        sa.Column('deployable_id', sa.Integer(), nullable=True),
        sa.Column('attach_handle_id', sa.Integer(), nullable=True),
        *_timestamps(),
        sa.PrimaryKeyConstraint(
            'id', name=op.f('pk_extended_accelerator_requests')),
        sa.UniqueConstraint(
            'uuid', name=op.f('uq_extended_accelerator_requests_uuid')),
        # One attach handle is never given to two ARQs.
        sa.UniqueConstraint(
            'attach_handle_id',
            name=op.f('uq_extended_accelerator_requests_attach_handle_id')),
        # op.f() cuts names beyond an engine's limit (63 characters on
        # PostgreSQL, 64 on MariaDB) with a hash, as the models do.
        _restrict('device_profile_id', 'device_profiles.id',
                  'fk_extended_accelerator_requests_device_profile_id_'
                  'device_profiles'),
        _restrict('deployable_id', 'deployables.id',
                  'fk_extended_accelerator_requests_deployable_id_'
                  'deployables'),
        _restrict('attach_handle_id', 'attach_handles.id',
                  'fk_extended_accelerator_requests_attach_handle_id_'
                  'attach_handles'),
    )
    for column in ('instance_uuid', 'project_id', 'device_profile_id',
                   'state'):
        op.create_index(op.f('ix_extended_accelerator_requests_' + column),
                        'extended_accelerator_requests', [column])
