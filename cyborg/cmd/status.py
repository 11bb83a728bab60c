"""cyborg-status: is this deployment ready for the code installed here?

    cyborg-status [--config-file F ...] upgrade check [--json]

Run it after ``cyborg-dbsync upgrade`` and before restarting the services
on new code, with their configuration. It prints one result per check and
exits 0 when all pass, 1 when one warns (look, but the services will
run) and 2 when one fails (fix it first); 255 means a check crashed.

The checks read the database with plain SQL, not the service's object
code, and change nothing:

- Database schema: alembic's revision of the database is the head of
  this code's migrations.
- Policy file: ``[oslo_policy] policy_file``, when it exists, is YAML
  (JSON policy files are deprecated), names only cyborg's rules (another
  name is most likely a typo and has no effect) and does not pin a
  deprecated default.
- Placement API: Placement answers on the endpoint the ``[placement]``
  options find, with the microversion the conductor uses, and accepts
  those credentials.
- Stale accelerator requests: none has been BindStarted or Deleting for
  longer than ``[conductor] bind_timeout``; a conductor's recovery pass
  fails or finishes those, and the check says how many there are.
- Online data migrations: ``cyborg-dbsync online_data_migrations`` has
  nothing left to do.
- Device profile names: every resource class and required trait a
  profile names is one some device of this service publishes (a custom
  name that became a standard one, or a driver that stopped publishing
  it, leaves ARQs of the profile with no host).
- Services: a conductor is alive (a heartbeat younger than ``[DEFAULT]
  service_down_time``) once any has registered; dead conductors and
  agents, and live ones of one kind speaking different RPC versions (an
  upgrade half done), are warnings.
"""

import datetime
import json
import re
import sys

from alembic import config as alembic_config
from alembic import script as alembic_script
from alembic import util as alembic_util
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_policy import opts as policy_opts
from oslo_policy import policy as oslo_policy
from oslo_upgradecheck import upgradecheck
import sqlalchemy as sa

from cyborg import conf as cyborg_conf
from cyborg import policy
from cyborg import states
from cyborg.clients import placement as placement_client
from cyborg.cmd import dbsync
from cyborg.conf import placement as placement_conf
from cyborg.db import migration
from cyborg.db import models
from cyborg.db import online_migrations
from cyborg.db.api import profile_renames
from cyborg.db.api import services as services_db

Code = upgradecheck.Code
Result = upgradecheck.Result
ARQ = models.ExtendedAcceleratorRequest

# The Placement release that first offered MICROVERSION.
PLACEMENT_RELEASE = 'Yoga (openstack-placement 7.0.0)'
# A provider that does not exist: asking for it tests the credentials.
_NO_PROVIDER = '00000000-0000-0000-0000-000000000000'
# Seconds to wait for Placement when [placement] timeout is not set.
PLACEMENT_TIMEOUT = 30


def _scripts():
    config = alembic_config.Config()
    config.set_main_option('script_location', migration.SCRIPT_LOCATION)
    return alembic_script.ScriptDirectory.from_config(config)


def _microversion(text):
    major, minor = str(text).split('.')
    return int(major), int(minor)


def _plural(count, one, many):
    return '%d %s' % (count, one if count == 1 else many)


class UpgradeChecks(upgradecheck.UpgradeCommands):
    """The checks of ``cyborg-status upgrade check``, on ``conf``."""

    def __init__(self, conf):
        self.conf = conf
        # Why the database cannot be read at head, once the schema check
        # has run; the checks that read tables skip it then.
        self._schema_problem = None

    # -- the database schema ---------------------------------------------

    def _check_schema(self):
        url = self.conf.database.connection
        problem = dbsync.unreachable(url)
        if problem:
            self._schema_problem = 'the database cannot be reached'
            return Result(Code.FAILURE, 'Cannot check the schema: %s.'
                          % problem)
        current, head = migration.version(url), migration.head()
        if current == head:
            return Result(Code.SUCCESS, 'The database schema is at the '
                          'newest revision, %s.' % head)
        self._schema_problem = 'the database schema is not at %s' % head
        if current is None:
            return Result(Code.FAILURE, 'The database has no cyborg schema '
                          '(no alembic revision); run "cyborg-dbsync '
                          'upgrade" to create it (revision %s).' % head)
        scripts = _scripts()
        try:
            scripts.get_revision(current)
        except alembic_util.CommandError:
            return Result(Code.FAILURE, 'The database schema is at revision '
                          '%s, which this code does not know: newer code '
                          'migrated it. Install that code, or restore a '
                          'backup made before; this code needs %s.'
                          % (current, head))
        behind = sum(1 for _ in scripts.iterate_revisions(head, current))
        return Result(Code.FAILURE, 'The database schema is at revision %s '
                      'but this code needs %s (%s behind); run '
                      '"cyborg-dbsync upgrade" before starting the services.'
                      % (current, head, _plural(behind, 'migration',
                                                'migrations')))

    def _engine(self):
        return sa.create_engine(self.conf.database.connection,
                                poolclass=sa.pool.NullPool)

    def _read(self, work):
        """``work(connection)``; a Result instead if the database cannot
        be read at head."""
        if self._schema_problem:
            return None, Result(Code.WARNING, 'Not checked: %s (see the '
                                'database schema check).'
                                % self._schema_problem)
        engine = self._engine()
        try:
            with engine.connect() as connection:
                return work(connection), None
        except sa.exc.DBAPIError as e:
            reason = str(e.orig).strip().splitlines()[0]
            return None, Result(Code.FAILURE, 'The database could not be '
                                'read: %s.' % reason)
        finally:
            engine.dispose()

    # -- the policy file ---------------------------------------------------

    def _check_policy_file(self):
        name = self.conf.oslo_policy.policy_file
        path = self.conf.find_file(name)
        if not path:
            return Result(Code.SUCCESS, 'No policy file (%s); the defaults '
                          'in code apply.' % name)
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            return Result(Code.FAILURE, 'The policy file %s cannot be read: '
                          '%s.' % (path, e.strerror))
        try:
            rules = oslo_policy.parse_file_contents(text)
        except ValueError as e:
            rules = e
        if not isinstance(rules, dict):
            return Result(Code.FAILURE, 'The policy file %s is not a mapping '
                          'of rule names to check strings, so oslo.policy '
                          'cannot load it and the API cannot authorise '
                          'requests; fix it or remove it.' % path)
        warnings = []
        if _is_json(text):
            warnings.append(
                'The policy file %s is JSON, which is deprecated: convert '
                'it to YAML with "oslopolicy-convert-json-to-yaml '
                '--namespace cyborg --policy-file %s --output-file '
                'policy.yaml" and set [oslo_policy] policy_file to the new '
                'file.' % (path, path))
        warnings.extend(self._policy_rule_problems(path, rules))
        if warnings:
            return Result(Code.WARNING, ' '.join(warnings))
        return Result(Code.SUCCESS, 'The policy file %s is YAML and '
                      'overrides only cyborg rules.' % path)

    def _policy_rule_problems(self, path, rules):
        defaults = policy.make_enforcer(self.conf).registered_rules
        # A name that another rule refers to ("rule:admin_api") is an
        # alias, not a typo; so is the rule oslo.policy falls back to.
        check_strings = list(rules.values()) + [
            d.check_str for d in defaults.values()]
        referenced = {m for check in check_strings if isinstance(check, str)
                      for m in re.findall(r'\brule:([^\s()]+)', check)}
        referenced.add(self.conf.oslo_policy.policy_default_rule)
        renamed = {d.deprecated_rule.name: d.name for d in defaults.values()
                   if d.deprecated_rule is not None
                   and d.deprecated_rule.name != d.name}
        unknown = sorted(n for n in rules if n not in defaults
                         and n not in referenced and n not in renamed)
        old_names = sorted(n for n in rules if n in renamed)
        pinned = sorted(
            n for n, check in rules.items() if n in defaults
            and defaults[n].deprecated_rule is not None
            and _same_check(check, defaults[n].deprecated_rule.check_str)
            and not _same_check(check, defaults[n].check_str))
        problems = []
        if unknown:
            problems.append(
                'The policy file %s sets %s that cyborg does not have (%s); '
                '%s no effect: check the %s for typos against '
                '"oslopolicy-sample-generator --namespace cyborg".'
                % (path, _plural(len(unknown), 'rule', 'rules'),
                   ', '.join(unknown),
                   'it has' if len(unknown) == 1 else 'they have',
                   'name' if len(unknown) == 1 else 'names'))
        if old_names:
            problems.append(
                'The policy file %s uses the deprecated %s %s; rename %s.'
                % (path, 'name' if len(old_names) == 1 else 'names',
                   ', '.join(old_names),
                   ', '.join('%s to %s' % (n, renamed[n])
                             for n in old_names)))
        if pinned:
            problems.append(
                'The policy file %s sets %s to the deprecated default (%s), '
                'which keeps the old behaviour after the deprecated '
                'defaults are removed; remove %s from the file to get the '
                'new defaults, unless that is what you want.'
                % (path, _plural(len(pinned), 'rule', 'rules'),
                   ', '.join(pinned), 'it' if len(pinned) == 1 else 'them'))
        return problems

    # -- Placement --------------------------------------------------------

    def _check_placement(self):
        group = self.conf.placement
        if not group.auth_type:
            return Result(Code.FAILURE, 'The [placement] section sets no '
                          'auth_type, so the conductor cannot call '
                          'Placement; configure it as Nova\'s [placement] '
                          'section is (auth_type = password, auth_url, '
                          'username, password, ...).')
        adapter = endpoint = None
        timeout = self.conf.placement.timeout or PLACEMENT_TIMEOUT
        try:
            adapter = _placement_adapter(self.conf)
            endpoint = adapter.get_endpoint()
            root = adapter.get('/', raise_exc=False, authenticated=False,
                               headers={'Accept': 'application/json'})
        except ks_exc.ClientException as e:
            return Result(Code.FAILURE, 'Placement cannot be reached with '
                          'the [placement] options: %s.'
                          % _unreachable(e, endpoint, timeout))
        url = root.url
        if root.status_code != 200:
            return Result(Code.FAILURE, 'Placement at %s answered GET / with '
                          'HTTP %d instead of its versions.'
                          % (url, root.status_code))
        try:
            versions = root.json()['versions']
            newest = max(_microversion(v['max_version']) for v in versions)
            oldest = min(_microversion(v['min_version']) for v in versions)
        except (ValueError, KeyError, TypeError, AttributeError):
            return Result(Code.FAILURE, 'The answer of %s to GET / does not '
                          'list Placement microversions; is [placement] '
                          'pointing at Placement?' % url)
        needed = _microversion(placement_client.MICROVERSION)
        if newest < needed:
            return Result(Code.FAILURE, 'Placement at %s offers microversions '
                          'up to %d.%d, but cyborg needs %s: upgrade '
                          'Placement to %s or newer.'
                          % (url, newest[0], newest[1],
                             placement_client.MICROVERSION,
                             PLACEMENT_RELEASE))
        if oldest > needed:
            return Result(Code.FAILURE, 'Placement at %s no longer offers '
                          'microversion %s (its oldest is %d.%d), which '
                          'cyborg uses.' % (url,
                                            placement_client.MICROVERSION,
                                            oldest[0], oldest[1]))
        try:
            answer = adapter.get(
                # Any query would do; this one answers an empty list.
                '/resource_providers?uuid=%s' % _NO_PROVIDER,
                raise_exc=False,
                microversion=placement_client.MICROVERSION,
                microversion_service_type=placement_client.SERVICE_TYPE,
                headers={'Accept': 'application/json'})
        except ks_exc.ClientException as e:
            return Result(Code.FAILURE, 'Placement at %s could not be asked '
                          'for its resource providers: %s.'
                          % (url, _sentence(e)))
        if answer.status_code in (401, 403):
            return Result(Code.FAILURE, 'Placement at %s refuses the '
                          '[placement] credentials (HTTP %d); the conductor '
                          'needs an admin (or service) user there.'
                          % (url, answer.status_code))
        if answer.status_code != 200:
            return Result(Code.FAILURE, 'Placement at %s answered GET '
                          '/resource_providers with HTTP %d.'
                          % (url, answer.status_code))
        return Result(Code.SUCCESS, 'Placement at %s offers microversions up '
                      'to %d.%d (cyborg needs %s) and accepts the '
                      '[placement] credentials.'
                      % (url, newest[0], newest[1],
                         placement_client.MICROVERSION))

    # -- accelerator requests ----------------------------------------------

    def _check_stale_arqs(self):
        timeout = self.conf.conductor.bind_timeout
        cutoff = models.utcnow() - datetime.timedelta(seconds=timeout)

        def count(connection, where):
            return connection.scalar(sa.select(sa.func.count())
                                     .select_from(ARQ).where(where))

        def stale(connection):
            binding = count(connection, sa.and_(
                ARQ.state == states.BIND_STARTED,
                ARQ.bind_started_at < cutoff))
            deleting = count(connection, sa.and_(
                ARQ.state == states.DELETING,
                sa.func.coalesce(ARQ.updated_at, ARQ.created_at) < cutoff))
            return binding, deleting

        counts, problem = self._read(stale)
        if problem:
            return problem
        binding, deleting = counts
        every = self.conf.conductor.recovery_interval
        found = []
        if binding:
            found.append(
                '%s BindStarted for more than [conductor] bind_timeout '
                '(%d s): the recovery pass of a running cyborg-conductor '
                '(every %d s) fails them, frees their attach handles and '
                'tells Nova they failed, so that Nova can reschedule '
                'their instances.'
                % (_plural(binding, 'accelerator request has been',
                           'accelerator requests have been'),
                   timeout, every))
        if deleting:
            found.append(
                '%s Deleting for more than %d s: the recovery pass of a '
                'running cyborg-conductor asks the agents of their hosts '
                'to release their devices and then removes them; if they '
                'stay, an agent cannot release a device (see its log).'
                % (_plural(deleting, 'accelerator request has been',
                           'accelerator requests have been'), timeout))
        if found:
            found.append('If no conductor is running, start one before '
                         'the upgrade.')
            return Result(Code.WARNING, ' '.join(found))
        return Result(Code.SUCCESS, 'No accelerator request has been '
                      'BindStarted or Deleting for more than %d s.' % timeout)

    def _check_online_migrations(self):
        left, problem = self._read(online_migrations.pending)
        if problem:
            return problem
        if left:
            why = ''
            if 'fill_bind_started_at' in left:
                why = (' Until then a BindStarted accelerator request made '
                       'before revision e8f1a2b3c4d5 has no bind start time, '
                       'so the conductor never times it out.')
            return Result(Code.WARNING, 'Online data migrations have rows '
                          'left (%s); run "cyborg-dbsync '
                          'online_data_migrations" until it exits 0.%s'
                          % (', '.join('%s: %d' % item
                                       for item in sorted(left.items())),
                             why))
        return Result(Code.SUCCESS, 'No online data migration has rows '
                      'left.')

    def _check_profile_names(self):
        missing, problem = self._read(profile_renames.unpublished)
        if problem:
            return problem
        if missing:
            shown = '; '.join(
                'device profile %s names %s' % (profile, ', '.join(
                    '%s %s' % ('resource class' if kind == 'resources'
                               else 'trait', name)
                    for kind, name in names))
                for profile, names in sorted(missing.items()))
            return Result(Code.WARNING, 'No device publishes what some '
                          'device profiles ask for (%s): their accelerator '
                          'requests find no host. Fix the profiles (PATCH, '
                          'microversion 2.7) or the devices, or run '
                          '"cyborg-dbsync online_data_migrations" where a '
                          'custom name became a standard one.' % shown)
        return Result(Code.SUCCESS, 'Every resource class and required '
                      'trait that a device profile names is published by '
                      'a device.')

    # -- conductors and agents ---------------------------------------------

    def _check_services(self):
        table = models.Service.__table__
        rows, problem = self._read(lambda connection: connection.execute(
            sa.select(table.c.host, table.c.binary, table.c.rpc_version,
                      table.c.last_seen_at)).all())
        if problem:
            return problem
        down_after = self.conf.service_down_time
        now = models.utcnow()
        live, dead, rpc_versions = {}, {}, {}
        for row in rows:
            alive = services_db.is_alive(row, down_after, now)
            (live if alive else dead).setdefault(row.binary, []).append(
                row.host)
            if alive:
                rpc_versions.setdefault(row.binary, set()).add(
                    row.rpc_version or 'unknown')
        conductors = live.get(services_db.CONDUCTOR, [])
        if not conductors and dead.get(services_db.CONDUCTOR):
            return Result(Code.FAILURE, 'No cyborg-conductor is alive: none '
                          'has sent a heartbeat within [DEFAULT] '
                          'service_down_time (%d s); the last ones were %s. '
                          'Reports, binds and recovery wait for a conductor: '
                          'start one.' % (down_after, _names(
                              dead[services_db.CONDUCTOR])))
        warnings = []
        for binary in (services_db.CONDUCTOR, services_db.AGENT):
            if dead.get(binary):
                warnings.append(
                    '%s sent no heartbeat within %d s: %s.'
                    % (_plural(len(dead[binary]), binary, binary + 's'),
                       down_after, _names(dead[binary])))
            if len(rpc_versions.get(binary, ())) > 1:
                warnings.append(
                    'The live %ss speak different RPC versions (%s): finish '
                    'upgrading them.' % (binary, ', '.join(
                        sorted(rpc_versions[binary]))))
        if warnings:
            return Result(Code.WARNING, ' '.join(warnings))
        if not rows:
            return Result(Code.SUCCESS, 'No conductor or agent has '
                          'registered yet; each one does when it starts.')
        return Result(Code.SUCCESS, '%s and %s alive.' % (
            _plural(len(conductors), 'conductor', 'conductors'),
            _plural(len(live.get(services_db.AGENT, [])), 'agent',
                    'agents')))

    _upgrade_checks = (
        ('Database schema', _check_schema),
        ('Policy file', _check_policy_file),
        ('Placement API', _check_placement),
        ('Stale accelerator requests', _check_stale_arqs),
        ('Online data migrations', _check_online_migrations),
        ('Device profile names', _check_profile_names),
        ('Services', _check_services),
    )


def _names(hosts, shown=10):
    hosts = sorted(hosts)
    text = ', '.join(hosts[:shown])
    if len(hosts) > shown:
        text += ' and %d more' % (len(hosts) - shown)
    return text


def _is_json(text):
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _same_check(a, b):
    return isinstance(a, str) and ' '.join(a.split()) == ' '.join(b.split())


def _sentence(error):
    """An exception's message without its trailing full stop."""
    return (str(error).strip() or type(error).__name__).rstrip('.')


def _unreachable(error, endpoint, timeout):
    """Why keystoneauth could not reach Placement, in a few words."""
    if isinstance(error, ks_exc.ConnectTimeout):
        return 'nothing answered%s within %s s' % (
            ' at %s' % endpoint if endpoint else '', timeout)
    if isinstance(error, ks_exc.ConnectFailure):
        # requests buries the reason ("[Errno 111] Connection refused")
        # in the repr of a chain of exceptions.
        found = re.search(r'\[Errno -?\d+\] ([^"\')]+)', str(error))
        reason = (found.group(1).strip().lower() if found
                  else _sentence(error))
        return 'cannot connect%s (%s)' % (
            ' to %s' % endpoint if endpoint else '', reason)
    return _sentence(error)


def _placement_adapter(conf):
    group = placement_conf.GROUP
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    session = ks_loading.load_session_from_conf_options(conf, group,
                                                        auth=auth)
    if session.timeout is None:
        session.timeout = PLACEMENT_TIMEOUT
    return ks_loading.load_adapter_from_conf_options(conf, group,
                                                     session=session,
                                                     auth=auth)


def main(argv=None):
    conf = cfg.ConfigOpts()
    cyborg_conf.register_opts(conf)
    policy_opts.set_defaults(conf)
    return upgradecheck.main(
        conf, project='cyborg', upgrade_command=UpgradeChecks(conf),
        argv=sys.argv[1:] if argv is None else argv)
