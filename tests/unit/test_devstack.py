"""The devstack plugin, run by bash against stand-ins for devstack.

``devstack_stubs.sh`` defines the devstack functions the plugin calls:
``iniset`` writes real files, the rest records its arguments. Each test
sources ``devstack/settings`` and runs ``devstack/plugin.sh`` for some
phases, as ``stack.sh``, ``unstack.sh`` and ``clean.sh`` do, then reads
the files and the record. ``cyborg-dbsync`` is a wrapper that records its
arguments; for the controller stacked once and shared by most tests it
also runs the real one, on a SQLite file.
"""

import configparser
import contextlib
import os
from pathlib import Path
import pwd
import shlex
import shutil
import subprocess
import sys

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_log import log as oslo_log
from oslo_policy import opts as oslo_policy_opts
import pytest
import sqlalchemy as sa

from cyborg import conf as cyborg_conf
from cyborg import privsep as cyborg_privsep
from cyborg import service as cyborg_service
from cyborg.privsep import launcher as cyborg_launcher

REPO = Path(__file__).resolve().parents[2]
STUBS = Path(__file__).with_name('devstack_stubs.sh')
DEVSTACK_FILES = ('devstack/plugin.sh', 'devstack/lib/cyborg',
                  'devstack/settings')
BIN_DIR = Path(sys.executable).parent

SERVICE_HOST = '192.0.2.10'
KEYSTONE_URI = 'http://192.0.2.10/identity'
STACK_PHASES = (('stack', 'install'), ('stack', 'post-config'),
                ('stack', 'extra'), ('stack', 'test-config'))


class Run:
    """What one run of the plugin left: files and recorded calls."""

    def __init__(self, root, result):
        self.root = root
        self.result = result
        self.cyborg_conf = root / 'etc' / 'cyborg' / 'cyborg.conf'
        self.uwsgi_conf = root / 'etc' / 'cyborg' / 'cyborg-api-uwsgi.ini'
        self.nova_conf = root / 'etc' / 'nova' / 'nova.conf'
        self.tempest_conf = root / 'tempest' / 'etc' / 'tempest.conf'
        self.database = root / 'cyborg.sqlite'
        self.sudoers = root / 'sudoers.d' / 'cyborg-privsep'
        calls = root / 'calls'
        lines = calls.read_text().splitlines() if calls.exists() else []
        self.calls = [line.split('\t') for line in lines]

    def called(self, name):
        return [call[1:] for call in self.calls if call[0] == name]

    def names(self):
        return [call[0] for call in self.calls]


def read_ini(path):
    parser = configparser.RawConfigParser(default_section='__none__')
    parser.optionxform = str
    assert parser.read(path), '%s was not written' % path
    return parser


def run_plugin(tmp_path, phases=STACK_PHASES, env=None, before='',
               real_dbsync=False):
    """Source settings and run plugin.sh for each phase, like devstack.

    ``before`` is bash run first, as local.conf's localrc would be.
    ``cyborg-dbsync`` records its arguments and, with ``real_dbsync``,
    runs the real one.
    """
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir(exist_ok=True)
    dbsync = bin_dir / 'cyborg-dbsync'
    dbsync.write_text(
        '#!/bin/bash\n'
        '(IFS=$\'\\t\'; echo "cyborg-dbsync$IFS$*") >> %s\n%s\n' % (
            shlex.quote(str(tmp_path / 'calls')),
            'exec %s "$@"' % shlex.quote(str(BIN_DIR / 'cyborg-dbsync'))
            if real_dbsync else 'exit 0'))
    dbsync.chmod(0o755)
    (tmp_path / 'etc' / 'nova').mkdir(parents=True, exist_ok=True)

    variables = {
        'DEVSTACK_CALLS': str(tmp_path / 'calls'),
        'DEVSTACK_BIN_DIR': str(bin_dir),
        'DEST': str(tmp_path / 'opt'),
        'DATA_DIR': str(tmp_path / 'data'),
        'STACK_USER': subprocess.run(
            ['id', '-un'], capture_output=True, text=True,
            check=True).stdout.strip(),
        'CYBORG_DIR': str(REPO),
        'CYBORG_CONF_DIR': str(tmp_path / 'etc' / 'cyborg'),
        'CYBORG_SUDOERS_FILE': str(tmp_path / 'sudoers.d' /
                                   'cyborg-privsep'),
        'CYBORG_HOST': 'compute-1',
        'SERVICE_HOST': SERVICE_HOST,
        'SERVICE_PROTOCOL': 'http',
        'SERVICE_TIMEOUT': '60',
        'SERVICE_PASSWORD': 'servicesecret',
        'SERVICE_DOMAIN_NAME': 'Default',
        'SERVICE_PROJECT_NAME': 'service',
        'REGION_NAME': 'RegionOne',
        'KEYSTONE_SERVICE_URI': KEYSTONE_URI,
        'ENABLE_DEBUG_LOG_LEVEL': 'True',
        'DATABASE_TYPE': 'mysql',
        'DATABASE_USER': 'root',
        'DATABASE_PASSWORD': 'dbsecret',
        'DATABASE_HOST': '127.0.0.1',
        'NOVA_CONF': str(tmp_path / 'etc' / 'nova' / 'nova.conf'),
        'NOVA_CPU_CONF': str(tmp_path / 'etc' / 'nova' / 'nova-cpu.conf'),
        'TEMPEST_CONFIG': str(tmp_path / 'tempest' / 'etc' /
                              'tempest.conf'),
        'ENABLED_SERVICES': 'key,mysql,rabbit,placement-api,n-api,n-cpu,'
                            'n-cond,n-sch,g-api,tempest',
    }
    variables.update(env or {})
    script = ['set -o errexit -o pipefail',
              'source %s' % shlex.quote(str(STUBS))]
    script += ['%s=%s' % (k, shlex.quote(v)) for k, v in variables.items()]
    script += [before,
               'source %s' % shlex.quote(str(REPO / 'devstack/settings'))]
    script += ['source %s %s %s' % (
        shlex.quote(str(REPO / 'devstack/plugin.sh')), mode, phase)
        for mode, phase in phases]
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(('CYBORG_', 'OS_'))}
    result = subprocess.run(['bash', '-c', '\n'.join(script)],
                            capture_output=True, text=True, env=environ,
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return Run(tmp_path, result)


@pytest.fixture(scope='module')
def stacked(tmp_path_factory):
    """A controller stacked once: install, post-config, extra, test-config."""
    return run_plugin(tmp_path_factory.mktemp('stack'), real_dbsync=True)


# -- cyborg.conf --------------------------------------------------------------

def test_cyborg_conf_default_section(stacked):
    conf = read_ini(stacked.cyborg_conf)['DEFAULT']
    assert conf['auth_strategy'] == 'keystone'
    assert conf['host'] == 'compute-1'
    assert conf['transport_url'] == (
        'rabbit://stackrabbit:rabbitsecret@192.0.2.10:5672/')
    assert conf['debug'] == 'True'
    assert conf['state_path'] == str(stacked.root / 'data' / 'cyborg')
    assert (stacked.root / 'data' / 'cyborg').is_dir()
    assert ['cyborg', str(stacked.cyborg_conf)] in stacked.called(
        'iniset_rpc_backend')


def test_cyborg_conf_database_and_api(stacked):
    conf = read_ini(stacked.cyborg_conf)
    assert conf['database']['connection'] == (
        'sqlite:///%s' % stacked.database)
    assert conf['api']['public_endpoint'] == (
        'http://192.0.2.10/accelerator')


def test_cyborg_conf_keystone_authtoken(stacked):
    section = read_ini(stacked.cyborg_conf)['keystone_authtoken']
    assert [str(stacked.cyborg_conf), 'cyborg', 'keystone_authtoken',
            'accelerator'] in stacked.called(
                'configure_keystone_authtoken_middleware')
    assert section['username'] == 'cyborg'
    assert section['auth_url'] == KEYSTONE_URI
    assert section['service_token_roles'] == 'service'
    assert section['service_token_roles_required'] == 'True'


@pytest.mark.parametrize('group', ['placement', 'nova', 'glance'])
def test_cyborg_conf_service_clients(stacked, group):
    section = dict(read_ini(stacked.cyborg_conf)[group])
    if group == 'placement':
        assert section.pop('provider_layout') == 'per_device'
    assert section == {
        'auth_type': 'password',
        'auth_url': KEYSTONE_URI,
        'username': 'cyborg',
        'password': 'servicesecret',
        'user_domain_name': 'Default',
        'project_name': 'service',
        'project_domain_name': 'Default',
        'region_name': 'RegionOne',
        'valid_interfaces': 'internal,public',
    }


def test_cyborg_conf_drivers_and_policy(stacked):
    conf = read_ini(stacked.cyborg_conf)
    assert conf['agent']['enabled_drivers'] == 'fake_driver'
    assert dict(conf['oslo_policy']) == {'enforce_new_defaults': 'True'}


def _service_conf(path):
    """cyborg.conf loaded as the services load it."""
    conf = cfg.ConfigOpts()
    oslo_log.register_options(conf)
    oslo_policy_opts.set_defaults(conf)
    cyborg_conf.load([], conf=conf, default_config_files=[str(path)])
    # Registers [DEFAULT] transport_url as the services do.
    assert cyborg_service.message_bus_hosts(conf) == [(SERVICE_HOST, 5672)]
    return conf


@contextlib.contextmanager
def _global_helper_command(command):
    """oslo.privsep reads its options from cfg.CONF."""
    cfg.CONF.set_override('helper_command', command,
                          group=cyborg_privsep.CONFIG_SECTION)
    try:
        yield
    finally:
        cfg.CONF.clear_override('helper_command',
                                group=cyborg_privsep.CONFIG_SECTION)


def test_cyborg_conf_is_what_the_services_read(stacked):
    conf = _service_conf(stacked.cyborg_conf)
    assert conf.host == 'compute-1'
    assert conf.auth_strategy == 'keystone'
    assert conf.debug is True
    assert conf.agent.enabled_drivers == ['fake_driver']
    assert conf.oslo_policy.enforce_new_defaults is True
    assert conf.keystone_authtoken.service_token_roles == ['service']
    assert conf.keystone_authtoken.service_token_roles_required is True
    for group in ('placement', 'nova', 'glance'):
        auth = ks_loading.load_auth_from_conf_options(conf, group)
        assert auth.auth_url == KEYSTONE_URI
        # Loading the plugin registered its options.
        assert conf[group].username == 'cyborg'
        assert conf[group].project_name == 'service'
        assert conf[group].region_name == 'RegionOne'
        assert conf[group].valid_interfaces == ['internal', 'public']


def test_cyborg_conf_has_no_unknown_options(stacked):
    """Every option written is one the services (or their libraries) know:
    a misspelt name would be silently ignored by oslo.config."""
    conf = _service_conf(stacked.cyborg_conf)
    password_opts = {o.dest for o in
                     ks_loading.get_auth_plugin_conf_options('password')}
    written = read_ini(stacked.cyborg_conf)
    for section in written.sections():
        known = set(conf) if section == 'DEFAULT' else set(conf[section])
        if section in ('placement', 'nova', 'glance', 'keystone_authtoken'):
            known |= password_opts
        unknown = set(written[section]) - known
        assert not unknown, (section, unknown)


# -- Keystone -----------------------------------------------------------------

def test_accounts_service_and_endpoint(stacked):
    assert stacked.called('create_service_user') == [['cyborg', 'admin']]
    roles = stacked.called('get_or_add_user_project_role')
    assert ['service', 'cyborg', 'service', 'Default', 'Default'] in roles
    # Nova's service token has to carry the service role.
    assert ['service', 'nova', 'service', 'Default', 'Default'] in roles
    services = stacked.called('get_or_create_service')
    assert len(services) == 1
    assert services[0][:2] == ['cyborg', 'accelerator']
    assert stacked.called('get_or_create_endpoint') == [
        ['accelerator', 'RegionOne', 'http://192.0.2.10/accelerator/v2']]


# -- database -----------------------------------------------------------------

def test_database_recreated_and_migrated(stacked):
    names = stacked.names()
    assert stacked.called('recreate_database') == [['cyborg']]
    assert stacked.called('cyborg-dbsync') == [
        ['--config-file', str(stacked.cyborg_conf), 'upgrade']]
    assert names.index('recreate_database') < names.index('cyborg-dbsync')
    engine = sa.create_engine('sqlite:///%s' % stacked.database)
    try:
        with engine.connect() as connection:
            version = connection.execute(
                sa.text('SELECT version_num FROM alembic_version')).scalar()
    finally:
        engine.dispose()
    assert version


# -- the API under uwsgi, the conductor and the agent -------------------------

def test_uwsgi_mounts_the_app_at_accelerator(stacked):
    assert stacked.called('write_uwsgi_config') == [[
        str(stacked.uwsgi_conf), 'cyborg.wsgi.api:application',
        '/accelerator', '', 'cyborg-api']]
    uwsgi = read_ini(stacked.uwsgi_conf)['uwsgi']
    assert uwsgi['module'] == 'cyborg.wsgi.api:application'
    assert uwsgi['env'] == 'CYBORG_CONFIG_FILES=%s' % stacked.cyborg_conf


def test_processes_started_in_order(stacked):
    started = stacked.called('run_process')
    assert [p[0] for p in started] == [
        'cyborg-api', 'cyborg-conductor', 'cyborg-agent']
    api, conductor, agent = (p[1] for p in started)
    assert api == ('/usr/local/bin/uwsgi --procname-prefix cyborg-api '
                   '--ini %s' % stacked.uwsgi_conf)
    bin_dir = stacked.root / 'bin'
    assert conductor == '%s/cyborg-conductor --config-file %s' % (
        bin_dir, stacked.cyborg_conf)
    assert agent == '%s/cyborg-agent --config-file %s' % (
        bin_dir, stacked.cyborg_conf)
    assert stacked.called('wait_for_service') == [
        ['60', 'http://192.0.2.10/accelerator']]


def test_agent_user(tmp_path):
    # A user that exists here: the link directory is made its own.
    run = run_plugin(tmp_path, env={'CYBORG_AGENT_USER': 'nobody'})
    agent = [p for p in run.called('run_process') if p[0] == 'cyborg-agent']
    assert agent[0][2:] == ['', 'nobody']
    assert run.sudoers.read_text().startswith('nobody ALL=(root) NOPASSWD: ')
    links = run.root / 'data' / 'cyborg' / 'privsep'
    assert links.stat().st_uid == pwd.getpwnam('nobody').pw_uid


def test_the_agent_starts_its_privsep_daemon_with_sudo(stacked):
    """The agent's user may run privsep-helper as root with the agent's
    configuration file, the agent's context and the link to the socket,
    word for word, and nothing else: the rule has no wildcard."""
    bin_dir = stacked.root / 'bin'
    helper = ['%s/privsep-helper' % bin_dir, '--config-file',
              str(stacked.cyborg_conf)]
    links = stacked.root / 'data' / 'cyborg' / 'privsep'
    link = str(links / 'agent.sock')
    user = subprocess.run(['id', '-un'], capture_output=True, text=True,
                          check=True).stdout.strip()
    rule = stacked.sudoers.read_text()
    assert '*' not in rule
    assert rule == '%s ALL=(root) NOPASSWD: %s --privsep_context ' \
        'cyborg.privsep.agent_pctxt --privsep_sock_path %s\n' % (
            user, ' '.join(helper), link)
    assert rule == cyborg_launcher.sudoers_rule(
        user, ['sudo', *helper], link) + '\n'
    assert oct(stacked.sudoers.stat().st_mode & 0o777) == '0o440'
    conf = _service_conf(stacked.cyborg_conf)
    assert conf.privsep_agent.helper_command.split() == [
        '%s/cyborg-privsep-launcher' % bin_dir, link, 'sudo', *helper]
    # The link's directory: the agent user's alone.
    assert links.stat().st_uid == os.geteuid()
    assert oct(links.stat().st_mode & 0o777) == '0o700'
    # What oslo.privsep runs is the launcher, and what the launcher runs
    # as root is what the rule allows.
    context = cyborg_privsep.agent_pctxt
    with _global_helper_command(conf.privsep_agent.helper_command):
        command = context.helper_command('/tmp/x/privsep.sock')
    got_link, launched, socket_path = cyborg_launcher.parse(command[1:])
    assert (got_link, socket_path) == (link, '/tmp/x/privsep.sock')
    assert launched == ['sudo', *helper]
    assert [*helper, *cyborg_launcher.pinned_arguments(link)] == (
        rule.split()[3:])


def test_install_phase(stacked):
    assert stacked.called('setup_develop') == [[str(REPO)]]


# -- Nova and tempest ---------------------------------------------------------

def test_nova_conf(stacked):
    nova = read_ini(stacked.nova_conf)
    assert nova['cyborg']['region_name'] == 'RegionOne'
    assert nova['service_user']['send_service_user_token'] == 'True'
    assert nova['service_user']['username'] == 'nova'
    assert nova['service_user']['auth_type'] == 'password'
    # nova-cpu.conf did not exist yet: it is not created.
    assert not (stacked.root / 'etc' / 'nova' / 'nova-cpu.conf').exists()


def test_nova_service_user_kept_when_configured(tmp_path):
    nova_dir = tmp_path / 'etc' / 'nova'
    nova_dir.mkdir(parents=True)
    (nova_dir / 'nova.conf').write_text(
        '[service_user]\nusername = nova-svc\nauth_type = password\n')
    (nova_dir / 'nova-cpu.conf').write_text('[DEFAULT]\n')
    run = run_plugin(tmp_path, phases=[('stack', 'post-config')])
    nova = read_ini(run.nova_conf)
    assert nova['service_user']['username'] == 'nova-svc'
    assert nova['service_user']['send_service_user_token'] == 'True'
    cpu = read_ini(nova_dir / 'nova-cpu.conf')
    assert cpu['cyborg']['region_name'] == 'RegionOne'
    assert cpu['service_user']['send_service_user_token'] == 'True'


def test_nova_left_alone_when_asked(tmp_path):
    run = run_plugin(tmp_path, phases=[('stack', 'post-config')],
                     env={'CYBORG_CONFIGURE_NOVA': 'False'})
    assert not run.nova_conf.exists()


def test_tempest_conf(stacked):
    tempest = read_ini(stacked.tempest_conf)
    assert tempest['service_available']['cyborg'] == 'True'
    assert tempest['cyborg_policy']['enforce_new_defaults'] == 'True'
    assert not tempest.has_section('cyborg_pci')


def test_legacy_policy_and_tempest_options(tmp_path):
    run = run_plugin(tmp_path, env={
        'CYBORG_ENFORCE_NEW_DEFAULTS': 'False',
        'CYBORG_ENABLED_DRIVERS': 'fake_driver,pci_driver',
        'CYBORG_TEMPEST_PCI_DEVICE_PROFILE': 'pci-dp',
        'CYBORG_TEMPEST_PCI_VENDOR_ID': '8086',
        'CYBORG_TEMPEST_PCI_PRODUCT_ID': '1572',
        'CYBORG_TEMPEST_IMAGE_REF': 'image-uuid',
    })
    conf = _service_conf(run.cyborg_conf)
    assert conf.oslo_policy.enforce_new_defaults is False
    assert conf.agent.enabled_drivers == ['fake_driver', 'pci_driver']
    tempest = read_ini(run.tempest_conf)
    assert tempest['cyborg_policy']['enforce_new_defaults'] == 'False'
    assert dict(tempest['cyborg_pci']) == {
        'device_profile_name': 'pci-dp', 'vendor_id': '8086',
        'product_id': '1572'}
    assert dict(tempest['cyborg']) == {'image_ref': 'image-uuid'}


def test_no_tempest_config_without_tempest(tmp_path):
    run = run_plugin(tmp_path, phases=[('stack', 'test-config')],
                     env={'ENABLED_SERVICES': 'key,mysql,rabbit'})
    assert not run.tempest_conf.exists()


# -- other hosts, unstack, clean ----------------------------------------------

def test_compute_node_runs_only_the_agent(tmp_path):
    run = run_plugin(
        tmp_path,
        env={'ENABLED_SERVICES': 'n-cpu,placement-client'},
        before='disable_service cyborg-api cyborg-conductor')
    assert [p[0] for p in run.called('run_process')] == ['cyborg-agent']
    for name in ('create_service_user', 'get_or_create_endpoint',
                 'recreate_database', 'cyborg-dbsync', 'wait_for_service'):
        assert not run.called(name), name
    conf = read_ini(run.cyborg_conf)
    assert conf['agent']['enabled_drivers'] == 'fake_driver'
    assert conf['glance']['auth_type'] == 'password'


def test_no_sudo_rule_without_the_agent(tmp_path):
    run = run_plugin(tmp_path, phases=[('stack', 'post-config')],
                     before='disable_service cyborg-agent')
    assert not run.sudoers.exists()
    assert not read_ini(run.cyborg_conf).has_section('privsep_agent')


def test_disabled_plugin_does_nothing(tmp_path):
    run = run_plugin(
        tmp_path,
        phases=STACK_PHASES + (('unstack', ''), ('clean', '')),
        before='disable_service cyborg-api cyborg-conductor cyborg-agent')
    assert run.names() == ['define_plugin']
    assert not run.cyborg_conf.exists()


def test_unstack_stops_every_service(tmp_path):
    run = run_plugin(tmp_path, phases=[('unstack', '')])
    assert run.called('stop_process') == [
        ['cyborg-agent'], ['cyborg-conductor'], ['cyborg-api']]


def test_clean_drops_the_database(tmp_path):
    state = tmp_path / 'data' / 'cyborg'
    state.mkdir(parents=True)
    (tmp_path / 'sudoers.d').mkdir()
    (tmp_path / 'sudoers.d' / 'cyborg-privsep').write_text('rule\n')
    run = run_plugin(tmp_path, phases=[('clean', '')])
    assert run.called('remove_uwsgi_config') == [
        [str(run.uwsgi_conf), 'cyborg-api']]
    assert run.called('mysql') == [
        ['-uroot', '-pdbsecret', '-h127.0.0.1', '-e',
         'DROP DATABASE IF EXISTS cyborg;']]
    assert not state.exists()
    assert not run.sudoers.exists()


def test_clean_drops_a_postgresql_database(tmp_path):
    run = run_plugin(tmp_path, phases=[('clean', '')],
                     env={'DATABASE_TYPE': 'postgresql'})
    assert run.called('dropdb') == [
        ['-h', '127.0.0.1', '-U', 'root', '--if-exists', 'cyborg']]


# -- style --------------------------------------------------------------------

def test_bashate():
    """bashate (test-requirements) finds nothing, not even a long line."""
    bashate = BIN_DIR / 'bashate'
    if not bashate.exists():
        bashate = shutil.which('bashate')
    assert bashate, 'bashate is not installed (it is in test-requirements)'
    result = subprocess.run([str(bashate), '-v', *DEVSTACK_FILES],
                            capture_output=True, text=True, cwd=REPO)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert 'warning' not in output and 'error' not in output, output
