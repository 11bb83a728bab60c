"""A real Keystone for tests: keystone on SQLite, served single-threaded.

Keystone cannot share the test venv (its pins differ from the service's),
so it lives in a venv of its own, ``$CYBORG_KEYSTONE_VENV`` (default
``/tmp/cyborg-tempest/venvs/keystone``, the venv ``tools/tempest/run.sh``
installs by default, so a machine installs it once for both), installed
from PyPI on first use (``KEYSTONE_REQUIREMENTS``; about 40 s, logged) and
reused after (``tests.cached_venv``: an exclusive lock on ``<venv>.lock``
keeps parallel test workers from installing it twice). A template state
directory (migrated SQLite database, fernet, receipt and credential keys,
``keystone-manage bootstrap`` done) is built once per venv and copied by
every service.

Each ``KeystoneService`` is one process: Keystone's WSGI application under
the standard library's single-threaded ``wsgiref`` server (SQLite answers
"database is locked" under concurrent writers), listening on a port of
127.0.0.1 chosen by the kernel. Passwords are hashed with the fewest bcrypt
rounds, so that each password login costs milliseconds.

What it holds once started (password auth, domain ``default``)::

    user     project    roles (Keystone implies the ones below a role)
    admin    admin      admin (> manager > member > reader); also admin
                        of the system (bootstrap)
    alice    project-a  member (> reader)
    bob      project-b  member (> reader)
    nova     service    service (Nova's service user: X-Service-Token)
    cyborg   service    service (the API's own user, for auth_token)
    auditor  (none)     reader of the system only

Use: the ``keystone_service`` fixture of
``tests/functional/keystone/conftest.py`` starts one for the session;
``tools/tempest/keystone_local.py`` starts one for the tempest runner::

    def test_x(keystone_service, conf):
        keystone_service.configure_authtoken(conf)  # auth_strategy=keystone
        token = keystone_service.token('alice')     # project-scoped
        service_token = keystone_service.token('nova')
        system = keystone_service.token('admin', system_scope='all')

``keystone_service`` is the session's service. ``add_project`` and
``add_user`` make more callers; ``install_seconds``, ``template_seconds``,
``start_seconds`` and ``populate_seconds`` tell what starting it cost.
"""

import dataclasses
import grp
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time

from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

from tests import cached_venv

LOG = logging.getLogger(__name__)

KEYSTONE_REQUIREMENTS = ('keystone==30.0.0',)
VENV = (os.environ.get('CYBORG_KEYSTONE_VENV')
        or '/tmp/cyborg-tempest/venvs/keystone')
READY = '.cyborg-keystone-ready'
# Bump when the template's recipe changes: venvs rebuild their template.
TEMPLATE_VERSION = '2'
START_TIMEOUT = 60

DOMAIN = 'default'
REGION = 'RegionOne'
ADMIN_PASSWORD = 'keystone-admin-secret'
# Prior role -> implied role: Keystone 30's bootstrap makes this chain and
# the service role; ``populate`` adds whatever an older one lacks.
IMPLIED_ROLES = (('admin', 'manager'), ('manager', 'member'),
                 ('member', 'reader'))
ROLES = ('reader', 'member', 'manager', 'admin', 'service')
# The bootstrap's catalog URLs, rewritten to the service's port.
PLACEHOLDER_URL = 'http://127.0.0.1:9/v3'

_CONF = """\
[DEFAULT]
log_file = {dir}/keystone.log
[database]
connection = sqlite:///{dir}/keystone.db
[cache]
# One process: an in-memory cache is coherent, and makes each request
# about ten times cheaper than Keystone's SQL on SQLite alone.
enabled = true
backend = oslo_cache.dict
[identity]
password_hash_algorithm = bcrypt
password_hash_rounds = 4
[token]
provider = fernet
[fernet_tokens]
key_repository = {dir}/fernet-keys
[fernet_receipts]
key_repository = {dir}/fernet-receipts
[credential]
key_repository = {dir}/credential-keys
"""

# Run in the Keystone venv: Keystone's application on the listening socket
# passed as file descriptor $CYBORG_KEYSTONE_FD, one request at a time.
_SERVE = """\
import os, socket, sys
from wsgiref import simple_server
sys.argv = sys.argv[:1]  # Keystone parses sys.argv as its command line
from keystone.wsgi.api import application  # OS_KEYSTONE_CONFIG_FILES
server = simple_server.WSGIServer(('127.0.0.1', 0),
                                  simple_server.WSGIRequestHandler,
                                  bind_and_activate=False)
server.socket.close()
server.socket = socket.socket(fileno=int(os.environ['CYBORG_KEYSTONE_FD']))
server.server_name, server.server_port = server.socket.getsockname()[:2]
server.setup_environ()
server.set_app(application)
print('keystone serves http://127.0.0.1:%d' % server.server_port,
      flush=True)
server.serve_forever()
"""

STATE = ('keystone.db', 'fernet-keys', 'fernet-receipts', 'credential-keys')


@dataclasses.dataclass
class User:
    name: str
    password: str
    project: str  # the project its project-scoped tokens are for, or None
    roles: tuple  # the roles given on ``project`` (not the implied ones)
    id: str = None
    system_roles: tuple = ()  # the roles given on the system


# name: (project, roles on it, roles on the system); the admin comes from
# the bootstrap.
USERS = {
    'alice': ('project-a', ('member',), ()),
    'bob': ('project-b', ('member',), ()),
    'nova': ('service', ('service',), ()),
    'cyborg': ('service', ('service',), ()),
    'auditor': (None, (), ('reader',)),
}
PROJECTS = ('project-a', 'project-b', 'service')


_run = cached_venv.run


def _clean_env(**extra):
    """This environment less what would steer Keystone's Python or
    configuration elsewhere."""
    # eventlet's deprecation, every run
    return cached_venv.clean_env(**{'PYTHONWARNINGS': 'ignore', **extra})


def _template_dir(venv):
    return os.path.join(venv, 'cyborg-template')


def _ready_text():
    return '\n'.join(KEYSTONE_REQUIREMENTS + ('template ' + TEMPLATE_VERSION,))


def ensure_venv(venv=VENV):
    """Install Keystone into ``venv`` and build its template unless done.

    Returns ``(install seconds, template seconds)``, zeros when both were
    there already.
    """
    # pip install is a no-op when tools/tempest/run.sh installed it already.
    took = cached_venv.ensure(venv, KEYSTONE_REQUIREMENTS, READY, 'Keystone',
                              ready_text=_ready_text(), env=_clean_env(),
                              prepare=_build_template)
    return took.install, took.prepare


def _keystone_manage(venv, directory, *args):
    _run([os.path.join(venv, 'bin', 'keystone-manage'), '--config-file',
          os.path.join(directory, 'keystone.conf'), *args],
         'keystone-manage ' + args[0], 300, env=_clean_env())


def _write_conf(directory):
    with open(os.path.join(directory, 'keystone.conf'), 'w') as out:
        out.write(_CONF.format(dir=directory))


def _build_template(venv):
    """Migrated database, key repositories, bootstrap: all but the port."""
    template = _template_dir(venv)
    shutil.rmtree(template, ignore_errors=True)
    os.makedirs(template)
    _write_conf(template)
    owner = ['--keystone-user', pwd.getpwuid(os.getuid()).pw_name,
             '--keystone-group', grp.getgrgid(os.getgid()).gr_name]
    _keystone_manage(venv, template, 'db_sync')
    for setup in ('fernet_setup', 'receipt_setup', 'credential_setup'):
        _keystone_manage(venv, template, setup, *owner)
    _keystone_manage(
        venv, template, 'bootstrap',
        '--bootstrap-password', ADMIN_PASSWORD,
        '--bootstrap-username', 'admin',
        '--bootstrap-project-name', 'admin',
        '--bootstrap-role-name', 'admin',
        '--bootstrap-service-name', 'keystone',
        '--bootstrap-region-id', REGION,
        '--bootstrap-admin-url', PLACEHOLDER_URL,
        '--bootstrap-internal-url', PLACEHOLDER_URL,
        '--bootstrap-public-url', PLACEHOLDER_URL)


class KeystoneService:
    """One Keystone process on 127.0.0.1 with its own state directory."""

    def __init__(self, directory, venv=VENV):
        self.directory = str(directory)
        self.venv = venv
        self.log_path = os.path.join(self.directory, 'keystone.log')
        self.serve_log_path = os.path.join(self.directory, 'serve.log')
        self.url = None
        self.auth_url = None
        self.admin_password = ADMIN_PASSWORD
        self.users = {}     # name -> User
        self.projects = {}  # name -> id
        self.roles = {}     # name -> id
        self.install_seconds = None
        self.template_seconds = None
        self.start_seconds = None
        self.populate_seconds = None
        self._process = None
        self._tokens = {}
        self._admin = None
        self._system = None

    # -- life --------------------------------------------------------------

    def start(self):
        self.install_seconds, self.template_seconds = ensure_venv(self.venv)
        started = time.monotonic()
        template = _template_dir(self.venv)
        for name in STATE:
            source = os.path.join(template, name)
            target = os.path.join(self.directory, name)
            if os.path.isdir(source):
                shutil.copytree(source, target)
            else:
                shutil.copyfile(source, target)
        _write_conf(self.directory)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(('127.0.0.1', 0))
            listener.listen(64)
            listener.set_inheritable(True)
            port = listener.getsockname()[1]
            with open(self.serve_log_path, 'ab') as log:
                self._process = subprocess.Popen(
                    [os.path.join(self.venv, 'bin', 'python'), '-c',
                     _SERVE],
                    cwd=self.directory, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(listener.fileno(),),
                    env=_clean_env(
                        CYBORG_KEYSTONE_FD=str(listener.fileno()),
                        OS_KEYSTONE_CONFIG_FILES=os.path.join(
                            self.directory, 'keystone.conf')))
        finally:
            listener.close()
        self.url = 'http://127.0.0.1:%d' % port
        self.auth_url = self.url + '/v3'
        try:
            self._wait_until_up()
            self.start_seconds = time.monotonic() - started
            started = time.monotonic()
            self.populate()
            self.populate_seconds = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        LOG.warning('Keystone serves %s (started in %.1f s, populated in '
                    '%.1f s)', self.url, self.start_seconds,
                    self.populate_seconds)
        return self

    def _wait_until_up(self):
        deadline = time.monotonic() + START_TIMEOUT
        session = ks_session.Session()
        while True:
            if self._process.poll() is not None:
                raise RuntimeError('keystone exited with %s:\n%s' % (
                    self._process.returncode, self.log_tail()))
            try:
                if session.get(self.auth_url, authenticated=False,
                               raise_exc=False,
                               timeout=2).status_code == 200:
                    return
            except Exception:  # not listening yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError('keystone did not answer on %s within '
                                   '%d s:\n%s' % (self.url, START_TIMEOUT,
                                                  self.log_tail()))
            time.sleep(0.1)

    def log_tail(self, size=4000):
        tails = []
        for path in (self.serve_log_path, self.log_path):
            try:
                with open(path, 'rb') as log:
                    log.seek(0, os.SEEK_END)
                    log.seek(max(0, log.tell() - size))
                    tails.append(log.read().decode('utf-8', 'replace'))
            except OSError:
                pass
        return '\n'.join(tails)

    def stop(self):
        if self._process is not None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=15)
            self._process = None

    @property
    def pid(self):
        """The Keystone process's id; None when it is not running."""
        return None if self._process is None else self._process.pid

    # -- the admin's REST calls ----------------------------------------------

    def _call(self, method, path, expected=(200,), body=None):
        response = self._admin.request(
            self.auth_url + path, method, json=body, raise_exc=False)
        if response.status_code not in expected:
            raise AssertionError('keystone: %s %s: %d %s' % (
                method, path, response.status_code, response.text[:500]))
        return response.json() if response.content else None

    def _ensure(self, collection, key, body, **filters):
        """The id of the first ``collection`` object matching ``filters``,
        created from ``body`` when there is none."""
        query = '&'.join('%s=%s' % item for item in sorted(filters.items()))
        found = self._call('GET', '/%s?%s' % (collection, query))[collection]
        if found:
            return found[0]['id']
        return self._call('POST', '/' + collection, (201,),
                          {key: body})[key]['id']

    def populate(self):
        """Roles, projects and users of the module docstring; the catalog
        pointed at this port."""
        self.users['admin'] = User('admin', ADMIN_PASSWORD, 'admin',
                                   ('admin',), system_roles=('admin',))
        self._admin = ks_session.Session(auth=self.auth('admin'))
        for role in ROLES:
            self.roles[role] = self._ensure('roles', 'role', {'name': role},
                                            name=role)
        for prior, implied in IMPLIED_ROLES:
            path = '/roles/%s/implies/%s' % (self.roles[prior],
                                             self.roles[implied])
            if self._admin.get(self.auth_url + path,
                               raise_exc=False).status_code == 404:
                self._call('PUT', path, (201,))
        for endpoint in self._call('GET', '/endpoints')['endpoints']:
            if endpoint['url'] == PLACEHOLDER_URL:
                self._call('PATCH', '/endpoints/' + endpoint['id'],
                           body={'endpoint': {'url': self.auth_url}})
        self.projects['admin'] = self._ensure(
            'projects', 'project', {}, name='admin', domain_id=DOMAIN)
        self.users['admin'].id = self._ensure(
            'users', 'user', {}, name='admin', domain_id=DOMAIN)
        for project in PROJECTS:
            self.add_project(project)
        for name, (project, roles, system_roles) in USERS.items():
            self.add_user(name, project, roles, system_roles=system_roles)

    def add_project(self, name):
        """A project of the default domain (made if missing); its id."""
        self.projects[name] = self._ensure(
            'projects', 'project',
            {'name': name, 'domain_id': DOMAIN,
             'description': 'for cyborg tests'},
            name=name, domain_id=DOMAIN)
        return self.projects[name]

    def add_user(self, name, project, roles, password=None,
                 system_roles=()):
        """A user holding ``roles`` on ``project`` (None: no project) and
        ``system_roles`` on the system (made if missing)."""
        if project is not None and project not in self.projects:
            self.add_project(project)
        password = password or '%s-secret' % name
        body = {'name': name, 'domain_id': DOMAIN, 'password': password}
        if project is not None:
            body['default_project_id'] = self.projects[project]
        user_id = self._ensure('users', 'user', body, name=name,
                               domain_id=DOMAIN)
        grants = ['/projects/%s/users/%s/roles/' % (self.projects[project],
                                                   user_id) + role
                  for role in roles]
        grants += ['/system/users/%s/roles/' % user_id + role
                   for role in system_roles]
        for grant in grants:
            path, role = grant.rsplit('/', 1)
            if role not in self.roles:
                self.roles[role] = self._ensure(
                    'roles', 'role', {'name': role}, name=role)
            self._call('PUT', '%s/%s' % (path, self.roles[role]), (204,))
        self.users[name] = User(name, password, project, tuple(roles),
                                user_id, tuple(system_roles))
        return self.users[name]

    # -- catalog and limits ------------------------------------------------

    def system_call(self, method, path, expected=(200,), body=None):
        """One REST call as the admin of the system, which Keystone's
        limit calls want; the JSON answer."""
        if self._system is None:
            self._system = ks_session.Session(
                auth=self.auth('admin', system_scope='all'))
        response = self._system.request(
            self.auth_url + path, method, json=body, raise_exc=False)
        if response.status_code not in expected:
            raise AssertionError('keystone: %s %s: %d %s' % (
                method, path, response.status_code, response.text[:500]))
        return response.json() if response.content else None

    def ensure_service(self, service_type, name, url='http://127.0.0.1:9'):
        """The id of the service of that type, made with a public
        endpoint in ``REGION`` if missing."""
        found = self.system_call(
            'GET', '/services?type=' + service_type)['services']
        if found:
            return found[0]['id']
        service_id = self.system_call('POST', '/services', (201,), {
            'service': {'type': service_type, 'name': name}})['service']['id']
        self.system_call('POST', '/endpoints', (201,), {'endpoint': {
            'service_id': service_id, 'interface': 'public',
            'region_id': REGION, 'url': url}})
        return service_id

    def registered_limits(self, service_id):
        """{resource name: (id, default limit)} of ``service_id`` in
        ``REGION``."""
        found = self.system_call(
            'GET', '/registered_limits?service_id=%s&region_id=%s'
            % (service_id, REGION))['registered_limits']
        return {r['resource_name']: (r['id'], r['default_limit'])
                for r in found}

    def set_registered_limit(self, service_id, resource_name, default):
        """Register ``resource_name`` with ``default``, or change it."""
        kept = self.registered_limits(service_id).get(resource_name)
        if kept is None:
            self.system_call('POST', '/registered_limits', (201,), {
                'registered_limits': [{
                    'service_id': service_id, 'region_id': REGION,
                    'resource_name': resource_name,
                    'default_limit': default}]})
        elif kept[1] != default:
            self.system_call('PATCH', '/registered_limits/' + kept[0],
                             body={'registered_limit': {
                                 'default_limit': default}})

    def set_project_limit(self, service_id, project_id, resource_name,
                          limit):
        """Give ``project_id`` its own limit of ``resource_name`` (whose
        registered limit must exist), or change it."""
        found = self.system_call(
            'GET', '/limits?service_id=%s&region_id=%s&project_id=%s'
            '&resource_name=%s' % (service_id, REGION, project_id,
                                   resource_name))['limits']
        if not found:
            self.system_call('POST', '/limits', (201,), {'limits': [{
                'service_id': service_id, 'region_id': REGION,
                'project_id': project_id, 'resource_name': resource_name,
                'resource_limit': limit}]})
        elif found[0]['resource_limit'] != limit:
            self.system_call('PATCH', '/limits/' + found[0]['id'],
                             body={'limit': {'resource_limit': limit}})

    # -- callers -------------------------------------------------------------

    def auth(self, user, project=None, system_scope=None):
        """A keystoneauth password plugin for ``user``: scoped to
        ``project`` (by default the user's own), or to the system
        (``system_scope='all'``)."""
        who = self.users[user]
        scope = ({'system_scope': system_scope} if system_scope else
                 {'project_name': project or who.project,
                  'project_domain_id': DOMAIN})
        return v3.Password(auth_url=self.auth_url, username=who.name,
                           password=who.password, user_domain_id=DOMAIN,
                           **scope)

    def token(self, user, project=None, system_scope=None):
        """A token of ``user`` (see ``auth``), issued once per session."""
        key = (user, project, system_scope)
        if key not in self._tokens:
            session = ks_session.Session(
                auth=self.auth(user, project, system_scope))
            self._tokens[key] = session.get_token()
        return self._tokens[key]

    def configure_authtoken(self, conf, service_user='cyborg',
                            service_token_roles=('service',),
                            service_token_roles_required=True):
        """Make ``conf`` (the API's) authenticate with this Keystone:
        ``auth_strategy = keystone``, ``[keystone_authtoken]`` with
        ``service_user``'s password and the service token rules."""
        group = 'keystone_authtoken'
        ks_loading.register_auth_conf_options(conf, group)
        conf.register_opts(ks_loading.get_auth_plugin_conf_options(
            'password'), group=group)
        who = self.users[service_user]
        conf.set_override('auth_strategy', 'keystone')
        for name, value in {
                'www_authenticate_uri': self.auth_url,
                'auth_url': self.auth_url,
                'auth_type': 'password',
                'username': who.name,
                'password': who.password,
                'user_domain_id': DOMAIN,
                'project_name': who.project,
                'project_domain_id': DOMAIN,
                'region_name': REGION,
                'service_token_roles': list(service_token_roles),
                'service_token_roles_required': service_token_roles_required,
        }.items():
            conf.set_override(name, value, group=group)
        return conf

