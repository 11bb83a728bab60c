"""``cyborg-status upgrade check`` run as operators run it: a process with
a configuration file, against a real database (SQLite, MariaDB and
PostgreSQL where the check reads tables) and a real Placement served on
127.0.0.1."""

import datetime
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
import uuid

import pytest
import sqlalchemy as sa

from cyborg import states
from cyborg.db import migration
from cyborg.db import models
from tests import inventory_rows
from tests.conftest import create_schema
from tests.functional.db import test_online_migrations as old_rows
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.placement_service import placement_url  # noqa: F401

STATUS = os.path.join(os.path.dirname(sys.executable), 'cyborg-status')

SCHEMA = 'Database schema'
POLICY = 'Policy file'
PLACEMENT = 'Placement API'
STALE = 'Stale accelerator requests'
ONLINE = 'Online data migrations'
PROFILE_NAMES = 'Device profile names'
SERVICES = 'Services'

SUCCESS, WARNING, FAILURE = 0, 1, 2


def _config(tmp_path, connection, placement_endpoint=None, token='admin',
            policy_file=None, extra=''):
    policy_file = policy_file or tmp_path / 'no-such-policy.yaml'
    lines = ['[database]', 'connection = %s' % connection,
             '[oslo_policy]', 'policy_file = %s' % policy_file]
    if placement_endpoint:
        lines += ['[placement]', 'auth_type = admin_token',
                  'endpoint = %s' % placement_endpoint,
                  'token = %s' % token,
                  'endpoint_override = %s' % placement_endpoint,
                  'timeout = 10']
    path = tmp_path / 'cyborg.conf'
    path.write_text('\n'.join(lines) + '\n' + extra)
    return path


def _status(config_file, *args):
    return subprocess.run(
        [STATUS, '--config-file', str(config_file), 'upgrade', 'check',
         *args], capture_output=True, text=True, timeout=120,
        cwd=config_file.parent)


def _unwrapped(table):
    """The cells of a result table as one line of text."""
    cells = (line.strip('|').strip() for line in table.splitlines()
             if line.startswith('|'))
    # textwrap breaks lines after hyphens too.
    return re.sub(r'-\s+', '-', ' '.join(cells))


def _checks(config_file):
    """``(exit code, {check: (result, details)})`` of a --json run."""
    result = _status(config_file, '--json')
    assert result.stdout, result.stderr
    checks = json.loads(result.stdout)['checks']
    return result.returncode, {c['check']: (c['result'], c['details'])
                               for c in checks}


def _previous_revision():
    from alembic import config as alembic_config
    from alembic import script as alembic_script
    config = alembic_config.Config()
    config.set_main_option('script_location', migration.SCRIPT_LOCATION)
    scripts = alembic_script.ScriptDirectory.from_config(config)
    return scripts.get_revision(migration.head()).down_revision


@pytest.fixture
def sqlite_db_url(sqlite_url):
    """One engine is enough for checks that do not read tables."""
    create_schema(sqlite_url)
    return sqlite_url


# --- everything ready ---------------------------------------------------

def test_a_ready_deployment_passes(db_url, placement_url, tmp_path):  # noqa: F811
    config = _config(tmp_path, db_url, placement_url)

    result = _status(config)

    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for name in (SCHEMA, POLICY, PLACEMENT, STALE, ONLINE, PROFILE_NAMES,
                 SERVICES):
        assert 'Check: %s' % name in out
    assert out.count('Result: Success') == 7
    assert 'Warning' not in out and 'Failure' not in out
    code, checks = _checks(config)
    assert code == 0
    assert checks[SCHEMA] == (SUCCESS, 'The database schema is at the '
                              'newest revision, %s.' % migration.head())
    assert checks[PLACEMENT][0] == SUCCESS
    assert 'cyborg needs 1.39' in checks[PLACEMENT][1]


# --- the database schema --------------------------------------------------

def test_a_schema_one_revision_behind_fails(database_url, placement_url,  # noqa: F811
                                            tmp_path):
    previous = _previous_revision()
    migration.upgrade(database_url, previous)
    config = _config(tmp_path, database_url, placement_url)

    code, checks = _checks(config)

    assert code == 2
    assert checks[SCHEMA] == (FAILURE, (
        'The database schema is at revision %s but this code needs %s '
        '(1 migration behind); run "cyborg-dbsync upgrade" before starting '
        'the services.' % (previous, migration.head())))
    assert checks[PLACEMENT][0] == SUCCESS
    # The checks that read tables wait for the schema.
    for name in (STALE, ONLINE):
        assert checks[name][0] == WARNING
        assert checks[name][1].startswith('Not checked: the database schema '
                                          'is not at %s' % migration.head())
    # The table says it too, wrapped.
    table = _status(config)
    assert table.returncode == 2
    assert ('Check: Database schema Result: Failure Details: The database '
            'schema is at revision %s but this code needs %s'
            % (previous, migration.head())) in _unwrapped(table.stdout)


def test_an_empty_database_fails(sqlite_url, tmp_path):
    code, checks = _checks(_config(tmp_path, sqlite_url))

    assert code == 2
    assert checks[SCHEMA] == (FAILURE, (
        'The database has no cyborg schema (no alembic revision); run '
        '"cyborg-dbsync upgrade" to create it (revision %s).'
        % migration.head()))


def test_a_schema_newer_than_the_code_fails(sqlite_db_url, tmp_path):
    engine = sa.create_engine(sqlite_db_url)
    with engine.begin() as connection:
        connection.execute(sa.text(
            "UPDATE alembic_version SET version_num = 'f00dfacef00d'"))
    engine.dispose()

    code, checks = _checks(_config(tmp_path, sqlite_db_url))

    assert code == 2
    assert checks[SCHEMA][0] == FAILURE
    assert checks[SCHEMA][1].startswith(
        'The database schema is at revision f00dfacef00d, which this code '
        'does not know: newer code migrated it.')


def test_an_unreachable_database_fails(tmp_path):
    # Nothing listens on port 1; the password is not shown.
    config = _config(tmp_path,
                     'mysql+pymysql://root:secret@127.0.0.1:1/cyborg')

    code, checks = _checks(config)

    assert code == 2
    result, details = checks[SCHEMA]
    assert result == FAILURE
    assert details.startswith(
        'Cannot check the schema: cannot reach the database '
        'mysql+pymysql://root:***@127.0.0.1:1/cyborg: ')
    assert 'secret' not in json.dumps(checks)
    assert checks[STALE] == (WARNING, 'Not checked: the database cannot be '
                             'reached (see the database schema check).')


# --- the policy file ------------------------------------------------------

def test_a_json_policy_file_warns(sqlite_db_url, placement_url, tmp_path):  # noqa: F811
    policy_file = tmp_path / 'policy.json'
    policy_file.write_text(json.dumps({
        'cyborg:arq:get_all': 'role:reader or role:admin'}))
    config = _config(tmp_path, sqlite_db_url, placement_url,
                     policy_file=policy_file)

    code, checks = _checks(config)

    assert code == 1
    assert checks[POLICY] == (WARNING, (
        'The policy file %s is JSON, which is deprecated: convert it to '
        'YAML with "oslopolicy-convert-json-to-yaml --namespace cyborg '
        '--policy-file %s --output-file policy.yaml" and set '
        '[oslo_policy] policy_file to the new file.'
        % (policy_file, policy_file)))
    assert {name for name, (result, _) in checks.items()
            if result != SUCCESS} == {POLICY}


def test_a_yaml_policy_file_with_a_typo_and_a_pinned_default_warns(
        sqlite_db_url, placement_url, tmp_path):  # noqa: F811
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text(
        '# an alias that other rules use is no typo\n'
        'cyborg_admin: "role:admin"\n'
        '"cyborg:arq:delete": "rule:cyborg_admin"\n'
        '"cyborg:device_profile:craete": "role:admin"\n'
        '"cyborg:device_profile:get_all": "@"\n')
    config = _config(tmp_path, sqlite_db_url, placement_url,
                     policy_file=policy_file)

    code, checks = _checks(config)

    assert code == 1
    result, details = checks[POLICY]
    assert result == WARNING
    assert 'JSON' not in details
    assert ('sets 1 rule that cyborg does not have '
            '(cyborg:device_profile:craete); it has no effect') in details
    assert ('sets 1 rule to the deprecated default '
            '(cyborg:device_profile:get_all)'
            in details)
    assert 'cyborg_admin' not in details


def test_a_yaml_policy_file_of_cyborg_rules_passes(sqlite_db_url, tmp_path):
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('"cyborg:arq:get_all": "role:admin"\n')

    code, checks = _checks(_config(tmp_path, sqlite_db_url,
                                   policy_file=policy_file))

    assert checks[POLICY] == (SUCCESS, 'The policy file %s is YAML and '
                              'overrides only cyborg rules.' % policy_file)


def test_a_policy_file_that_is_no_mapping_fails(sqlite_db_url, tmp_path):
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('- role:admin\n')

    code, checks = _checks(_config(tmp_path, sqlite_db_url,
                                   policy_file=policy_file))

    assert code == 2
    assert checks[POLICY][0] == FAILURE
    assert 'cannot load it' in checks[POLICY][1]


# --- Placement ------------------------------------------------------------

def _closed_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_an_unreachable_placement_fails(sqlite_db_url, tmp_path):
    endpoint = 'http://127.0.0.1:%d' % _closed_port()

    code, checks = _checks(_config(tmp_path, sqlite_db_url, endpoint))

    assert code == 2
    assert checks[PLACEMENT] == (FAILURE, (
        'Placement cannot be reached with the [placement] options: cannot '
        'connect to %s (connection refused).' % endpoint))
    assert {name for name, (result, _) in checks.items()
            if result != SUCCESS} == {PLACEMENT}


def test_no_placement_section_fails(sqlite_db_url, tmp_path):
    code, checks = _checks(_config(tmp_path, sqlite_db_url))

    assert code == 2
    assert checks[PLACEMENT][0] == FAILURE
    assert checks[PLACEMENT][1].startswith(
        'The [placement] section sets no auth_type')


def test_placement_refusing_the_credentials_fails(sqlite_db_url, placement_url,  # noqa: F811
                                                   tmp_path):
    # Placement's noauth2 takes the token for the user: not an admin.
    config = _config(tmp_path, sqlite_db_url, placement_url, token='demo')

    code, checks = _checks(config)

    assert code == 2
    assert checks[PLACEMENT] == (FAILURE, (
        'Placement at %s/ refuses the [placement] credentials (HTTP 403); '
        'the conductor needs an admin (or service) user there.'
        % placement_url))


class _OldPlacement(http.server.BaseHTTPRequestHandler):
    """Answers GET / with the root document of a real Placement whose
    newest microversion is replaced by Train's (1.36)."""

    document = None

    def do_GET(self):
        body = json.dumps(self.document).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_placement_too_old_fails(sqlite_db_url, placement, tmp_path):  # noqa: F811
    document = placement.adapter().get('/').json()
    for version in document['versions']:
        version['max_version'] = '1.36'
    handler = type('Handler', (_OldPlacement,), {'document': document})
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = 'http://127.0.0.1:%d' % server.server_address[1]
    try:
        code, checks = _checks(_config(tmp_path, sqlite_db_url, endpoint))
    finally:
        server.shutdown()
        server.server_close()

    assert code == 2
    assert checks[PLACEMENT] == (FAILURE, (
        'Placement at %s/ offers microversions up to 1.36, but cyborg needs '
        '1.39: upgrade Placement to Yoga (openstack-placement 7.0.0) or '
        'newer.' % endpoint))


# --- accelerator requests -------------------------------------------------

def _insert_arqs(url, arqs):
    """ARQs of one new device profile of the fake FPGA, which a host
    publishes; ``arqs`` are column values."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        inventory_rows.add_host(engine, 'fpga-host',
                                inventory_rows.fake_devices())
        with engine.begin() as connection:
            profile = connection.execute(
                sa.insert(models.DeviceProfile.__table__).values(
                    uuid=str(uuid.uuid4()), name='fpga-%s' % uuid.uuid4(),
                    profile_json={'groups': [{'resources:FPGA': '1'}]})
            ).inserted_primary_key[0]
            for values in arqs:
                connection.execute(
                    sa.insert(models.ExtendedAcceleratorRequest.__table__)
                    .values(uuid=str(uuid.uuid4()),
                            device_profile_id=profile,
                            device_profile_group_id=0, **values))
    finally:
        engine.dispose()


def _ago(seconds):
    return models.utcnow() - datetime.timedelta(seconds=seconds)


def test_stale_binds_and_deletions_warn(db_url, placement_url, tmp_path):  # noqa: F811
    _insert_arqs(db_url, [
        # Two binds older than bind_timeout (60 s here), one younger.
        {'state': states.BIND_STARTED, 'bind_started_at': _ago(3600),
         'updated_at': _ago(3600)},
        {'state': states.BIND_STARTED, 'bind_started_at': _ago(61),
         'updated_at': _ago(61)},
        {'state': states.BIND_STARTED, 'bind_started_at': _ago(5),
         'updated_at': _ago(5)},
        # A deletion left half done, and one just begun.
        {'state': states.DELETING, 'updated_at': _ago(600)},
        {'state': states.DELETING, 'updated_at': _ago(1)},
        # Old but settled.
        {'state': states.BOUND, 'bind_started_at': _ago(3600),
         'updated_at': _ago(3600)},
    ])
    config = _config(tmp_path, db_url, placement_url,
                     extra='[conductor]\nbind_timeout = 60\n')

    code, checks = _checks(config)

    assert code == 1
    assert checks[STALE] == (WARNING, (
        '2 accelerator requests have been BindStarted for more than '
        '[conductor] bind_timeout (60 s): the recovery pass of a running '
        'cyborg-conductor (every 30 s) fails them, frees their attach '
        'handles and tells Nova they failed, so that Nova can reschedule '
        'their instances. 1 accelerator request has been Deleting for more '
        'than 60 s: the recovery pass of a running cyborg-conductor asks the '
        'agents of their hosts to release their devices and then removes '
        'them; if they stay, an agent cannot release a device (see its '
        'log). If no conductor is running, start one before the upgrade.'))
    assert {name for name, (result, _) in checks.items()
            if result != SUCCESS} == {STALE}


def test_young_binds_pass(db_url, tmp_path):
    _insert_arqs(db_url, [
        {'state': states.BIND_STARTED, 'bind_started_at': _ago(10),
         'updated_at': _ago(10)}])

    code, checks = _checks(_config(tmp_path, db_url))

    assert checks[STALE] == (SUCCESS, 'No accelerator request has been '
                             'BindStarted or Deleting for more than 330 s.')
    assert checks[ONLINE] == (SUCCESS,
                              'No online data migration has rows left.')


def test_pending_online_migrations_warn(database_url, placement_url,  # noqa: F811
                                        tmp_path):
    # A bind in progress while the schema gained bind_started_at.
    migration.upgrade(database_url, old_rows.BEFORE_BIND_BOOKKEEPING)
    old_rows.insert_old_arqs(database_url, [
        {'state': states.BIND_STARTED, 'created_at': _ago(7200),
         'updated_at': _ago(10)}])
    migration.upgrade(database_url)
    _publish_the_fake_fpga(database_url)
    config = _config(tmp_path, database_url, placement_url)

    code, checks = _checks(config)

    assert code == 1
    assert checks[ONLINE] == (WARNING, (
        'Online data migrations have rows left (fill_bind_started_at: 1); '
        'run "cyborg-dbsync online_data_migrations" until it exits 0. Until '
        'then a BindStarted accelerator request made before revision '
        'e8f1a2b3c4d5 has no bind start time, so the conductor never times '
        'it out.'))
    # Without a start time the bind does not count as stale yet.
    assert checks[STALE][0] == SUCCESS

    dbsync = os.path.join(os.path.dirname(sys.executable), 'cyborg-dbsync')
    migrated = subprocess.run(
        [dbsync, '--config-file', str(config), 'online_data_migrations'],
        capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr

    code, checks = _checks(config)
    assert code == 0, checks


def _publish_the_fake_fpga(url):
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        inventory_rows.add_host(engine, 'fpga-host',
                                inventory_rows.fake_devices())
    finally:
        engine.dispose()


# --- device profiles ------------------------------------------------------

def test_profiles_naming_what_no_device_publishes_warn(db_url, tmp_path):
    _publish_the_fake_fpga(db_url)
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as connection:
            for name, groups in (
                    ('fpga', [{'resources:FPGA': '1',
                               'trait:CUSTOM_FAKE_DEVICE': 'required'}]),
                    ('vulkan', [{'resources:CUSTOM_PGPU': '1',
                                 'trait:CUSTOM_HW_GPU_API_VULKAN':
                                     'required'}])):
                connection.execute(sa.insert(
                    models.DeviceProfile.__table__).values(
                        uuid=str(uuid.uuid4()), name=name,
                        profile_json={'groups': groups}))
    finally:
        engine.dispose()

    code, checks = _checks(_config(tmp_path, db_url))

    assert checks[PROFILE_NAMES] == (WARNING, (
        'No device publishes what some device profiles ask for (device '
        'profile vulkan names resource class CUSTOM_PGPU, trait '
        'CUSTOM_HW_GPU_API_VULKAN): their accelerator requests find no '
        'host. Fix the profiles (PATCH, microversion 2.7) or the devices, '
        'or run "cyborg-dbsync online_data_migrations" where a custom name '
        'became a standard one.'))


# --- services ---------------------------------------------------------------

def _add_services(url, rows):
    """``(host, binary, rpc_version, seconds since the heartbeat)``."""
    engine = sa.create_engine(url)
    table = models.Service.__table__
    with engine.begin() as connection:
        for host, binary, rpc_version, age in rows:
            connection.execute(table.insert().values(
                host=host, binary=binary, version='1.0',
                rpc_version=rpc_version,
                last_seen_at=_ago(age), created_at=_ago(age)))
    engine.dispose()


def test_services_all_alive_pass(sqlite_db_url, tmp_path):
    _add_services(sqlite_db_url, [
        ('ctl-1', 'cyborg-conductor', '1.4', 1),
        ('ctl-2', 'cyborg-conductor', '1.4', 5),
        ('compute-1', 'cyborg-agent', '1.1', 2)])

    code, checks = _checks(_config(tmp_path, sqlite_db_url))

    assert checks[SERVICES] == (SUCCESS, '2 conductors and 1 agent alive.')


def test_services_before_any_registered_pass(sqlite_db_url, tmp_path):
    code, checks = _checks(_config(tmp_path, sqlite_db_url))
    assert checks[SERVICES] == (SUCCESS, 'No conductor or agent has '
                                'registered yet; each one does when it '
                                'starts.')


def test_dead_services_and_mixed_rpc_versions_warn(sqlite_db_url, tmp_path):
    _add_services(sqlite_db_url, [
        ('ctl-1', 'cyborg-conductor', '1.4', 1),
        ('ctl-2', 'cyborg-conductor', '1.3', 1),
        ('ctl-3', 'cyborg-conductor', '1.4', 600),
        ('compute-1', 'cyborg-agent', '1.1', 2),
        ('compute-2', 'cyborg-agent', '1.1', 90)])

    code, checks = _checks(_config(tmp_path, sqlite_db_url))

    assert checks[SERVICES] == (WARNING, (
        '1 cyborg-conductor sent no heartbeat within 30 s: ctl-3. The live '
        'cyborg-conductors speak different RPC versions (1.3, 1.4): finish '
        'upgrading them. 1 cyborg-agent sent no heartbeat within 30 s: '
        'compute-2.'))


def test_no_live_conductor_fails(sqlite_db_url, tmp_path):
    _add_services(sqlite_db_url, [
        ('ctl-2', 'cyborg-conductor', '1.4', 100),
        ('ctl-1', 'cyborg-conductor', '1.4', 400),
        ('compute-1', 'cyborg-agent', '1.1', 2)])
    config = _config(tmp_path, sqlite_db_url,
                     extra='[DEFAULT]\nservice_down_time = 60\n')

    code, checks = _checks(config)

    assert checks[SERVICES] == (FAILURE, (
        'No cyborg-conductor is alive: none has sent a heartbeat within '
        '[DEFAULT] service_down_time (60 s); the last ones were ctl-1, '
        'ctl-2. Reports, binds and recovery wait for a conductor: start '
        'one.'))
