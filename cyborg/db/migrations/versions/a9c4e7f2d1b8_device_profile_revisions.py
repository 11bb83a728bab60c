"""Device profiles: revisions kept, ARQs bound by theirs, enabled and
disabled, public or private to a list of projects.

Revision ID: a9c4e7f2d1b8
Revises: e1f4b8a2c6d0
Create Date: 2026-11-29 17:30:00
"""

from alembic import op
import sqlalchemy as sa

revision = 'a9c4e7f2d1b8'
down_revision = 'e1f4b8a2c6d0'
branch_labels = None
depends_on = None


# Where SQLite must copy a table to add its columns, the copy keeps
# AUTOINCREMENT: ids are never given twice (b7d3e9f1a5c2).
_KEEP_IDS = {'sqlite_autoincrement': True}


# Forward only: to go back, restore a backup.
def upgrade():
    with op.batch_alter_table('device_profiles',
                              table_kwargs=_KEEP_IDS) as batch:
        batch.add_column(sa.Column('revision', sa.Integer, nullable=False,
                                   server_default='1'))
        batch.add_column(sa.Column('generation', sa.Integer, nullable=False,
                                   server_default='1'))
        batch.add_column(sa.Column('enabled', sa.Boolean, nullable=False,
                                   server_default=sa.true()))
        batch.add_column(sa.Column('is_public', sa.Boolean, nullable=False,
                                   server_default=sa.true()))
    with op.batch_alter_table('extended_accelerator_requests',
                              table_kwargs=_KEEP_IDS) as batch:
        batch.add_column(sa.Column('device_profile_revision', sa.Integer,
                                   nullable=False, server_default='1'))
    revisions = op.create_table(
        'device_profile_revisions',
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('device_profile_id', sa.Integer,
                  sa.ForeignKey('device_profiles.id', ondelete='CASCADE',
                                name='fk_device_profile_revisions_'
                                'device_profile_id_device_profiles'),
                  nullable=False),
        sa.Column('revision', sa.Integer, nullable=False),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('description', sa.Text),
        sa.Column('profile_json', sa.Text, nullable=False),
        sa.Column('created_at', sa.DateTime, nullable=False),
        sa.Column('reason', sa.String(32), nullable=False,
                  server_default='created'),
        sa.PrimaryKeyConstraint('id', name='pk_device_profile_revisions'),
        sa.UniqueConstraint(
            'device_profile_id', 'revision',
            name='uq_device_profile_revisions_device_profile_id_revision'))
    op.create_table(
        'device_profile_projects',
        sa.Column('id', sa.Integer, primary_key=True),
        sa.Column('device_profile_id', sa.Integer,
                  sa.ForeignKey('device_profiles.id', ondelete='CASCADE',
                                name='fk_device_profile_projects_'
                                'device_profile_id_device_profiles'),
                  nullable=False),
        sa.Column('project_id', sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint('id', name='pk_device_profile_projects'),
        sa.UniqueConstraint(
            'device_profile_id', 'project_id',
            name='uq_device_profile_projects_device_profile_id_project_id'))
    op.create_index('ix_device_profile_projects_project_id',
                    'device_profile_projects', ['project_id'])
    # Each existing profile's first revision is what it holds now.
    profiles = sa.table(
        'device_profiles', sa.column('id', sa.Integer),
        sa.column('name', sa.String), sa.column('description', sa.Text),
        sa.column('profile_json', sa.Text),
        sa.column('created_at', sa.DateTime))
    op.execute(revisions.insert().from_select(
        ['device_profile_id', 'revision', 'name', 'description',
         'profile_json', 'created_at', 'reason'],
        sa.select(profiles.c.id, sa.literal(1), profiles.c.name,
                  profiles.c.description, profiles.c.profile_json,
                  profiles.c.created_at, sa.literal('created'))))
