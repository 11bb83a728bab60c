"""The agent: discovers this host's accelerators and reports them.

Every ``[agent] report_interval`` seconds the agent asks each enabled
driver what it finds, builds the host snapshot (``HostInventory``) and
sends it whole to the conductor, which writes only what changed. The
report names the compute node's resource provider: the agent looks it up
in Placement under the configured host name, the FQDN and the short host
name, in that order, and logs which one matched. An agent without
``[placement]`` credentials sends the names and lets the conductor look.

The agent also listens on the agent topic (its host name as the server)
for the conductor's calls; version 1.0 has only ``ping``.
"""

import socket

from keystoneauth1 import exceptions as ks_exceptions
from oslo_log import log
import oslo_messaging as messaging

from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg import service
from cyborg.accelerator.drivers import loader
from cyborg.accelerator.drivers import pci
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.clients import placement as placement_client
from cyborg.conductor import placement_sync
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.objects import inventory

LOG = log.getLogger(__name__)

def name_candidates(configured, fqdn=None, short_name=None):
    """``[(name, what it is)]`` in the order Nova's name is tried."""
    fqdn = fqdn if fqdn is not None else socket.getfqdn()
    if short_name is None:
        short_name = socket.gethostname().split('.')[0]
    labelled = {}
    for name, label in ((configured, 'the configured [DEFAULT] host'),
                        (fqdn, 'the FQDN'),
                        (short_name, 'the short host name')):
        if name and name not in labelled:
            labelled[name] = label
    return list(labelled.items())


class AgentManager:
    """The agent's work, and its RPC endpoint."""

    target = messaging.Target(version=agent_rpcapi.VERSION)

    def __init__(self, conf, drivers, conductor, placement=None,
                 candidates=None):
        self.conf = conf
        self.drivers = drivers
        self.conductor = conductor
        self.placement = placement
        self.candidates = (candidates if candidates is not None
                           else name_candidates(conf.host))
        self.compute_node = None  # placement_sync.ComputeNode once found
        self.last_report = None
        self._last_failed = False
        self._context = cyborg_context.admin_context(None)

    # -- RPC endpoint (version 1.0) -----------------------------------

    def ping(self, context):
        return {'host': self.conf.host,
                'drivers': [d.name for d in self.drivers],
                'version': agent_rpcapi.VERSION}

    # -- the periodic report ------------------------------------------

    def discover(self):
        """This host's snapshot; raises if any driver fails.

        A snapshot without the devices of a failed driver would tell the
        conductor that they are gone, so no partial snapshot is made.
        """
        devices = []
        for driver in self.drivers:
            try:
                devices.extend(driver.discover())
            except Exception as exc:
                raise DiscoveryFailed(driver.name, exc) from exc
        return inventory.HostInventory(hostname=self.conf.host,
                                       devices=devices)

    def find_compute_node(self):
        """The names to report: the matched one alone, once found."""
        if self.compute_node is not None:
            return [self.compute_node.matched_name]
        names = [name for name, _label in self.candidates]
        if self.placement is None:
            return names
        # Logged outside the except blocks: oslo.log would append the
        # exception to the line again.
        try:
            found = placement_sync.find_compute_node(self.placement, names)
            problem = None
        except placement_sync.ComputeNodeNotFound as exc:
            problem = '%s Retrying at the next report.' % exc
        except (ks_exceptions.ClientException,
                placement_client.PlacementError) as exc:
            problem = ('cyborg-agent: waiting for Placement to find the '
                       'compute node: %s' % service.describe_error(exc))
        if problem is not None:
            LOG.warning(problem)
            return names
        labels = dict(self.candidates)
        LOG.info('Compute node resource provider %s found under %r, %s '
                 '(names tried: %s)', found.uuid, found.matched_name,
                 labels[found.matched_name],
                 ', '.join(repr(n) for n in found.names_tried))
        self.compute_node = found
        return [found.matched_name]

    def report_inventory(self):
        """Discover and report once; errors are logged, never raised."""
        try:
            snapshot = self.discover()
        except DiscoveryFailed as exc:
            LOG.error('%s; not reporting this time', exc)
            return None
        names = self.find_compute_node()
        # A call while RabbitMQ is down would block in oslo.messaging's
        # reconnect loop; a connect first lets the agent say so and skip.
        try:
            service.check_message_bus(self.conf)
            problem = None
        except ConnectionError as exc:
            problem = str(exc)
        if problem is not None:
            self._failed('cyborg-agent: waiting for %s to report: %s'
                         % (service.describe_message_bus(self.conf), problem))
            return None
        try:
            result = self.conductor.report_host_inventory(
                self._context, snapshot.to_dict(), names)
            problem = None
        except messaging.MessagingTimeout:
            problem = ('the conductor did not answer within %d s'
                       % self.conf.agent.report_timeout)
        except Exception as exc:
            problem = service.describe_error(exc)
        if problem is not None:
            self._failed('cyborg-agent: the report failed: %s; trying again '
                         'in %d s' % (problem,
                                      self.conf.agent.report_interval))
            return None
        if self._last_failed or result != self.last_report:
            LOG.info('Reported %d devices to the conductor: %s',
                     len(snapshot.devices), result)
        else:
            LOG.debug('Reported %d devices, nothing changed',
                      len(snapshot.devices))
        self._last_failed = False
        self.last_report = result
        return result

    def _failed(self, message):
        self._last_failed = True
        LOG.warning(message)


class DiscoveryFailed(Exception):
    def __init__(self, driver_name, error):
        self.driver_name = driver_name
        super().__init__('Driver %s failed to discover devices: %s'
                         % (driver_name, service.describe_error(error)))


def placement_from_conf(conf):
    """A Placement client if ``[placement]`` says where it is, else None."""
    if not (conf.placement.auth_type or conf.placement.endpoint_override):
        return None
    return placement_client.PlacementClient.from_conf(conf)


class AgentService(service.Service):
    """The agent's RPC server and its periodic report.

    ``transport`` is shared when given (the single-machine mode runs
    everything on one in-process transport); otherwise the service makes
    its own from ``[DEFAULT] transport_url`` and cleans it up on stop.
    """

    def __init__(self, conf, transport=None, placement=None):
        super().__init__('cyborg-agent', conf.agent.retry_interval)
        self.conf = conf
        self._shared_transport = transport
        self._placement = placement
        self.manager = None
        self.report_task = None

    def on_start(self):
        conf = self.conf
        drivers = loader.load_drivers(conf, conf.agent.enabled_drivers,
                                      pci.PCIReader(conf.pci.sysfs_root))
        LOG.info('Accelerator drivers: %s',
                 ', '.join(d.name for d in drivers) or 'none')
        self.wait_for(service.describe_message_bus(conf),
                      lambda: service.check_message_bus(conf))
        if self.stopping:
            return
        transport = self._shared_transport
        if transport is None:
            transport = service.get_transport(conf)
            self.on_stop(transport.cleanup)
        placement = (self._placement if self._placement is not None
                     else placement_from_conf(conf))
        self.manager = AgentManager(
            conf, drivers,
            conductor_rpcapi.ConductorAPI(
                transport, timeout=conf.agent.report_timeout),
            placement)
        server = rpc.get_server(transport, rpc.AGENT_TOPIC, conf.host,
                                [self.manager])
        server.start()
        self.on_stop(service.stop_rpc_server, server)
        self.report_task = self.add_periodic(
            'inventory-report', conf.agent.report_interval,
            self.manager.report_inventory)

