"""cyborg-all-in-one: the whole service on one machine.

API, conductor and agent in one process, with embedded defaults: SQLite
under a state directory, no authentication, the API on 127.0.0.1, the
in-process message transport (``fake://``, one transport object shared
by all three, since that driver connects only users of the same object)
and an in-process Placement on its own SQLite file. The agent runs the
fake driver, plus ``pci_driver`` over this machine's PCI devices when
``[pci] device_spec`` lists some in a ``--config-file``.

There is no Nova here, so the compute node's resource provider is made
as Nova would make it, named after ``[DEFAULT] host``. Once the agent's
first report is in, the discovered devices and their resource providers
are printed.

Runs in the foreground until SIGTERM or SIGINT; a second start reuses the
state directory (both databases are migrated, not recreated).
"""

import argparse
import os
import sys
import uuid

from oslo_config import cfg
from oslo_log import log

from cyborg import cmd
from cyborg import conf as cyborg_conf
from cyborg import service  # first: keeps eventlet out (see service.py)
from cyborg.accelerator.drivers import fake
from cyborg.agent import manager as agent_manager
from cyborg.api import app as api_app
from cyborg.clients import placement as placement_client
from cyborg.cmd import api as api_cmd
from cyborg.cmd import console
from cyborg.cmd import demo
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import placement_sync
from cyborg.db import migration
from cyborg.db import session

LOG = log.getLogger(__name__)
DEFAULT_STATE_DIR = os.path.join(
    os.environ.get('XDG_STATE_HOME', os.path.expanduser('~/.local/state')),
    'cyborg')
# Placement's noauth2 makes the token the user and takes the roles from
# X-Roles: the conductor acts as a service user (the reshaper wants the
# service role), as Keystone's role implications would list them.
PLACEMENT_HEADERS = {'X-Auth-Token': 'admin',
                     'X-Roles': 'admin,member,reader,service'}
# How long to wait for the agent's first report before printing anyway.
FIRST_REPORT_TIMEOUT = 60


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog='cyborg-all-in-one',
        description='Run the accelerator service on this machine alone.')
    parser.add_argument('--state-dir', default=DEFAULT_STATE_DIR,
                        help='Where the databases and log live '
                             '(default: %(default)s).')
    parser.add_argument('--host', default='127.0.0.1',
                        help='Address the API listens on.')
    parser.add_argument('--port', type=int, default=6666,
                        help='Port the API listens on.')
    parser.add_argument('--config-file', action='append', default=[],
                        help='Extra configuration files, read last.')
    parser.add_argument('--demo', action='store_true',
                        help='Once started, play Nova against the API: '
                             'create a device profile and accelerator '
                             'requests, bind them to the fake device and '
                             'show them bound.')
    return parser.parse_args(argv)


def make_conf(args):
    """The embedded defaults, then whatever the extra files say."""
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    cyborg_conf.load(['--config-file=%s' % f for f in args.config_file],
                     conf=conf, default_config_files=[])
    conf.set_default('connection', 'sqlite:///%s' % os.path.join(
        args.state_dir, 'cyborg.sqlite'), group='database')
    conf.set_default('auth_strategy', 'noauth')
    conf.set_default('state_path', args.state_dir)
    conf.set_default('host_ip', args.host, group='api')
    conf.set_default('port', args.port, group='api')
    conf.set_default('log_file', os.path.join(args.state_dir,
                                              'cyborg.log'))
    drivers = ['fake_driver']
    if conf.pci.device_spec:
        drivers.append('pci_driver')
    conf.set_default('enabled_drivers', drivers, group='agent')
    return conf


def start_placement(state_dir):
    """Placement's WSGI app on ``<state_dir>/placement.sqlite``."""
    # Imported here: only this mode runs Placement in-process.
    from placement import conf as placement_conf
    from placement import db_api as placement_db
    from placement import deploy as placement_deploy

    pconf = cfg.ConfigOpts()
    placement_conf.register_opts(pconf)
    pconf.set_override('auth_strategy', 'noauth2', group='api')
    pconf.set_override('connection', 'sqlite:///%s' % os.path.join(
        state_dir, 'placement.sqlite'), group='placement_database')
    # Migrates the schema (a no-op once done) as the app loads.
    pconf.set_override('sync_on_startup', True, group='placement_database')
    pconf([], project='placement', default_config_files=[])
    placement_db.configure(pconf)
    return placement_deploy.loadapp(pconf)


def ensure_compute_node(client, hostname):
    """The compute node's RP, made as Nova would if it is not there."""
    provider = client.find_provider_by_name(hostname)
    if provider is None:
        provider = client.create_provider(hostname, str(uuid.uuid4()))
        LOG.info('Made the compute node resource provider %s (%s), as Nova '
                 'would', hostname, provider['uuid'])
    return provider


def describe_tree(client, compute_rp):
    """Lines that show each provider under the compute node."""
    lines = ['Compute node %s (%s)' % (compute_rp['name'],
                                       compute_rp['uuid'])]
    children = [rp for rp in client.providers_in_tree(compute_rp['uuid'])
                if rp['parent_provider_uuid'] == compute_rp['uuid']]
    if not children:
        lines.append('  no accelerator resource providers')
    for rp in sorted(children, key=lambda rp: rp['name']):
        _generation, inventories = client.get_inventories(rp['uuid'])
        _generation, traits = client.get_traits(rp['uuid'])
        amounts = ', '.join(
            '%s %d (reserved %d)' % (rc, inv['total'], inv['reserved'])
            for rc, inv in sorted(inventories.items())) or 'no inventory'
        lines.append('  %s (%s): %s; traits %s' % (
            rp['name'], rp['uuid'], amounts,
            ', '.join(sorted(traits - {placement_sync.OWNER_TRAIT}))))
    return lines


def describe_devices(snapshot):
    lines = []
    for device in snapshot.devices:
        address = ':'.join(device.controlpath_info.get(k, '') for k in (
            'domain', 'bus', 'device'))
        lines.append('  %s %s %s at %s.%s: %s' % (
            device.type, device.vendor, device.model, address,
            device.controlpath_info.get('function', ''),
            ', '.join('%s (%s x%d)' % (d.name, d.resource_class,
                                       d.num_accelerators)
                      for d in device.deployables)))
    return lines or ['  none']


class AllInOne(service.Service):
    """Conductor, agent and API on one transport, DB and Placement."""

    def __init__(self, conf, state_dir, demo=False):
        super().__init__('cyborg-all-in-one')
        self.conf = conf
        self.state_dir = state_dir
        self.demo = demo
        self.api_url = None

    def on_start(self):
        conf = self.conf
        _progress('migrating the database in %s' % self.state_dir)
        migration.upgrade(conf.database.connection)
        db = session.Database(conf)
        self.on_stop(db.dispose)
        _progress('starting Placement (in-process, SQLite)')
        placement = placement_client.PlacementClient(
            placement_client.wsgi_adapter(start_placement(self.state_dir),
                                          headers=PLACEMENT_HEADERS))
        compute_rp = ensure_compute_node(placement, conf.host)
        transport = service.get_transport(conf, url='fake://')
        self.on_stop(transport.cleanup)

        _progress('starting the conductor')
        conductor = conductor_manager.ConductorService(
            conf, transport=transport, db=db, placement=placement)
        conductor.start()
        self.on_stop(conductor.stop)
        _progress('starting the agent (drivers: %s)'
                  % ', '.join(conf.agent.enabled_drivers))
        agent = agent_manager.AgentService(conf, transport=transport,
                                           placement=placement)
        agent.start()
        self.on_stop(agent.stop)

        self.api_url = api_cmd.serve(self, conf, api_app.build_app(
            conf, db, transport=transport))
        _say('API on %s (state in %s)' % (self.api_url, self.state_dir))
        _progress('waiting for the agent\'s first report')
        if self._show_inventory(agent, placement, compute_rp) and self.demo:
            self._run_demo()
        _say('ready; the API is on %s. Ctrl-C stops everything.'
             % self.api_url)

    def _run_demo(self):
        if 'fake_driver' not in self.conf.agent.enabled_drivers:
            _say('no demo: fake_driver is not enabled')
            return
        rp_uuid = placement_sync.provider_uuid(placement_sync.provider_name(
            self.conf.host, fake.DEPLOYABLE_NAME))
        try:
            lines = demo.run(self.api_url, self.conf.host, rp_uuid)
        except (demo.DemoFailed, OSError) as exc:
            lines = ['Demo failed: %s' % exc]
        console.say('\n'.join(['Demo: Nova\'s part, played against the API:']
                               + ['  ' + line for line in lines]))

    def _show_inventory(self, agent, placement, compute_rp):
        deadline = FIRST_REPORT_TIMEOUT
        while agent.manager.last_report is None and deadline > 0:
            if self.sleep(0.2):
                return False
            deadline -= 0.2
        if agent.manager.last_report is None:
            _say('no inventory report yet; see the log')
            return False
        lines = ['Discovered devices (drivers: %s):' % ', '.join(
            self.conf.agent.enabled_drivers)]
        lines += describe_devices(agent.manager.discover())
        lines.append('Resource providers in Placement:')
        lines += ['  ' + line for line in describe_tree(placement,
                                                        compute_rp)]
        console.say('\n'.join(lines))
        return True


def _say(text):
    console.say('cyborg-all-in-one: %s' % text)


def _progress(step):
    _say('%s ...' % step)


def main(argv=None):
    console.guard()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.state_dir, exist_ok=True)
    conf = make_conf(args)
    log.setup(conf, 'cyborg')
    # SIGHUP restarts it, with the same configuration.
    status = cmd.launch(AllInOne(conf, args.state_dir, demo=args.demo),
                        conf, reload_conf=False)
    if status == 0:
        _say('stopped')
    sys.exit(status)
