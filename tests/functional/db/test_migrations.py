"""The migrations build the schema of the models, on every engine."""

import os
import pprint
import subprocess
import sys
import uuid

from alembic import autogenerate
from alembic.runtime import migration as alembic_migration
from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import migration
from cyborg.db import models
from cyborg.db import session
from tests import db_servers
from tests.conftest import create_schema
from tests.conftest import make_conf

DBSYNC = os.path.join(os.path.dirname(sys.executable), 'cyborg-dbsync')


def _engine_name(url):
    return sa.engine.make_url(url).get_backend_name()


def _with_connection(url, work):
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return work(connection)
    finally:
        engine.dispose()


# --- The migrated schema against the models ------------------------------

def _not_alembic_version(name, type_, parent_names):
    return not (type_ == 'table' and name == 'alembic_version')


def _different_server_default(context, inspected_column, metadata_column,
                              inspected_default, metadata_default,
                              rendered_metadata_default):
    # MariaDB keeps a boolean as TINYINT and reports false() as 0, which
    # alembic reads as a change; let the server say if the values differ.
    if (isinstance(metadata_column.type, sa.Boolean)
            and inspected_default and rendered_metadata_default):
        same = context.connection.scalar(sa.text(
            'SELECT %s = %s' % (inspected_default, rendered_metadata_default)))
        return not same
    return None


def _differences_from_models(connection):
    context = alembic_migration.MigrationContext.configure(
        connection, opts={
            'compare_type': True,
            'compare_server_default': _different_server_default,
            'include_name': _not_alembic_version,
        })
    return autogenerate.compare_metadata(context, models.Base.metadata)


def test_migrated_schema_matches_the_models(database_url):
    migration.upgrade(database_url)

    diff = _with_connection(database_url, _differences_from_models)

    assert diff == [], 'migrations and models differ:\n' + pprint.pformat(
        diff)


def _reflected_schema(connection):
    """Every table as the engine reports it, constraint names included."""
    inspector = sa.inspect(connection)
    schema = {}
    for table in inspector.get_table_names():
        if table == 'alembic_version':
            continue
        pk = inspector.get_pk_constraint(table)
        schema[table] = {
            'columns': {
                c['name']: (str(c['type']), c['nullable'], c['default'],
                            c.get('autoincrement'))
                for c in inspector.get_columns(table)},
            'primary key': (pk['name'], pk['constrained_columns']),
            'foreign keys': sorted(
                (fk['name'], fk['constrained_columns'], fk['referred_table'],
                 fk['referred_columns'], fk['options'].get('ondelete'))
                for fk in inspector.get_foreign_keys(table)),
            'unique constraints': sorted(
                (uq['name'], uq['column_names'])
                for uq in inspector.get_unique_constraints(table)),
            'indexes': sorted(
                (ix['name'], ix['column_names'], ix['unique'])
                for ix in inspector.get_indexes(table)),
        }
    return schema


def test_migrated_schema_is_what_the_models_create(database_url, tmp_path):
    # Compares names (cut to the engine's length limit), defaults and the
    # indexes that MariaDB adds for foreign keys, as each engine stores
    # them; compare_metadata leaves those out.
    migration.upgrade(database_url)
    models_url = db_servers.create_database(_engine_name(database_url),
                                            tmp_path)
    try:
        _with_connection(models_url, _create_all_and_commit)
        from_models = _with_connection(models_url, _reflected_schema)
    finally:
        db_servers.drop_database(models_url)

    migrated = _with_connection(database_url, _reflected_schema)

    assert set(migrated) == set(models.Base.metadata.tables)
    assert migrated == from_models


def test_the_suites_schema_copy_is_the_migrated_schema(database_url,
                                                       tmp_path):
    # Tests get their schema from tests.schema_template (a copy of one
    # migrated database): it must be what the migrations make, version
    # included.
    migration.upgrade(database_url)
    copy_url = db_servers.create_database(_engine_name(database_url),
                                          tmp_path)
    try:
        create_schema(copy_url)
        copied = _with_connection(copy_url, _reflected_schema)
        copied_version = migration.version(copy_url)
    finally:
        db_servers.drop_database(copy_url)

    assert copied == _with_connection(database_url, _reflected_schema)
    assert copied_version == migration.version(database_url) is not None


def test_foreign_keys_restrict_deletes(database_url):
    # SQLite enforces them only because session.Database asks for it.
    migration.upgrade(database_url)
    db = session.Database(make_conf(database_url))
    context = cyborg_context.admin_context(db)
    try:
        with db.writer(context) as writer:
            profile = models.DeviceProfile(
                uuid=str(uuid.uuid4()), name='fpga',
                profile_json={'groups': [{'resources:FPGA': '1'}]})
            writer.add(profile)
            writer.flush()
            writer.add(models.ExtendedAcceleratorRequest(
                uuid=str(uuid.uuid4()), device_profile_id=profile.id,
                device_profile_group_id=0))
        delete_profile = sa.delete(models.DeviceProfile).where(
            models.DeviceProfile.id == profile.id)

        with (pytest.raises(db_exc.DBReferenceError),
              db.writer(context) as writer):
            writer.execute(delete_profile)

        with db.reader(context) as reader:
            left = reader.scalar(sa.select(sa.func.count()).select_from(
                models.DeviceProfile))
        assert left == 1
    finally:
        db.dispose()


def test_profiles_made_before_revisions_get_their_first(database_url):
    """The profiles and ARQs of a database migrated before revisions
    existed: each profile gets revision 1, holding what it holds, and
    each ARQ binds by it."""
    migration.upgrade(database_url, 'e1f4b8a2c6d0')
    groups = '{"groups": [{"resources:FPGA": "1"}]}'

    def store(connection):
        connection.execute(sa.text(
            "INSERT INTO device_profiles (uuid, name, description, "
            "profile_json, created_at) VALUES (:uuid, 'old', 'kept', "
            ":groups, :now)"), {'uuid': str(uuid.uuid4()), 'groups': groups,
                                'now': models.utcnow()})
        profile_id = connection.execute(sa.text(
            "SELECT id FROM device_profiles")).scalar_one()
        connection.execute(sa.text(
            "INSERT INTO extended_accelerator_requests (uuid, state, "
            "device_profile_id, device_profile_group_id, created_at) "
            "VALUES (:uuid, 'Initial', :profile, 0, :now)"),
            {'uuid': str(uuid.uuid4()), 'profile': profile_id,
             'now': models.utcnow()})
        connection.commit()

    _with_connection(database_url, store)
    migration.upgrade(database_url)

    def read(connection):
        return (connection.execute(sa.select(
            models.DeviceProfile.revision, models.DeviceProfile.generation,
            models.DeviceProfile.enabled,
            models.DeviceProfile.is_public)).one(),
            connection.execute(sa.select(
                models.DeviceProfileRevision.revision,
                models.DeviceProfileRevision.name,
                models.DeviceProfileRevision.description,
                models.DeviceProfileRevision.profile_json,
                models.DeviceProfileRevision.reason)).all(),
            connection.execute(sa.select(
                models.ExtendedAcceleratorRequest.device_profile_revision)
            ).scalars().all())

    profile, revisions, arq_revisions = _with_connection(database_url, read)
    assert tuple(profile) == (1, 1, True, True)
    assert [tuple(r) for r in revisions] == [
        (1, 'old', 'kept', {'groups': [{'resources:FPGA': '1'}]},
         'created')]
    assert arq_revisions == [1]


# --- version, stamp, upgrade ----------------------------------------------

def test_version_is_none_then_head(database_url):
    assert migration.version(database_url) is None

    migration.upgrade(database_url)
    assert migration.version(database_url) == migration.head()

    # A second upgrade finds nothing to do.
    migration.upgrade(database_url)
    assert migration.version(database_url) == migration.head()


def test_stamp_records_a_schema_made_without_migrations(database_url):
    _with_connection(database_url, _create_all_and_commit)

    migration.stamp(database_url, 'head')

    assert migration.version(database_url) == migration.head()
    # Nothing is left to run, so the existing tables are not created again.
    migration.upgrade(database_url)
    migration.stamp(database_url, 'base')
    assert migration.version(database_url) is None


def _create_all_and_commit(connection):
    models.Base.metadata.create_all(connection)
    connection.commit()


def test_url_with_percent_sign(tmp_path):
    # An ini option would take '%' for interpolation.
    url = 'sqlite:///%s' % (tmp_path / '100%_cyborg.sqlite')

    migration.upgrade(url)

    assert migration.version(url) == migration.head()


# --- cyborg-dbsync ---------------------------------------------------------

def _dbsync(tmp_path, connection, *args):
    config_file = tmp_path / 'cyborg.conf'
    config_file.write_text('[database]\nconnection = %s\n' % connection)
    return subprocess.run(
        [DBSYNC, '--config-file', str(config_file), *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_dbsync_upgrade_then_version(database_url, tmp_path):
    before = _dbsync(tmp_path, database_url, 'version')
    assert (before.returncode, before.stdout) == (0, 'None\n'), before.stderr

    upgraded = _dbsync(tmp_path, database_url, 'upgrade')
    assert upgraded.returncode == 0, upgraded.stderr
    assert 'Running upgrade' in upgraded.stderr

    after = _dbsync(tmp_path, database_url, 'version')
    assert (after.returncode, after.stdout) == (
        0, migration.head() + '\n'), after.stderr
    assert migration.version(database_url) == migration.head()


def test_dbsync_upgrade_to_a_revision_and_stamp(sqlite_url, tmp_path):
    head = migration.head()
    upgraded = _dbsync(tmp_path, sqlite_url, 'upgrade', '--revision', head)
    assert upgraded.returncode == 0, upgraded.stderr

    stamped = _dbsync(tmp_path, sqlite_url, 'stamp', 'base')
    assert stamped.returncode == 0, stamped.stderr
    assert migration.version(sqlite_url) is None

    stamped = _dbsync(tmp_path, sqlite_url, 'stamp', head)
    assert stamped.returncode == 0, stamped.stderr
    assert migration.version(sqlite_url) == head


def test_dbsync_unknown_revision(sqlite_url, tmp_path):
    result = _dbsync(tmp_path, sqlite_url, 'upgrade', '--revision', 'nope')

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "cyborg-dbsync: Can't locate revision identified by 'nope'")


@pytest.mark.parametrize('connection, shown', [
    # Nothing listens on port 1; the password is not shown.
    ('mysql+pymysql://root:secret@127.0.0.1:1/cyborg',
     'mysql+pymysql://root:***@127.0.0.1:1/cyborg'),
    ('sqlite:////nonexistent-directory/cyborg.sqlite',
     'sqlite:////nonexistent-directory/cyborg.sqlite'),
], ids=['mysql', 'sqlite'])
def test_dbsync_unreachable_database(tmp_path, connection, shown):
    result = _dbsync(tmp_path, connection, 'upgrade')

    assert result.returncode == 1
    assert result.stdout == ''
    [line] = result.stderr.splitlines()
    assert line.startswith(
        'cyborg-dbsync: cannot reach the database %s: ' % shown)
    assert 'secret' not in result.stderr
