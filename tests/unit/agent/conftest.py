"""An agent serving RPC on oslo.messaging's in-process transport, with
stand-ins for its neighbours: the conductor it reports to and Glance."""

import contextlib
import queue

import pytest

from cyborg import conf as cyborg_conf
from cyborg import context as cyborg_context
from cyborg import rpc
from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conf import gpu_devices
from tests.conductor_rpc import use_fake_transport

HOST = 'compute1'


def agent_conf(options=None):
    """The agent's configuration; ``options`` as ``{(group, name): value}``,
    vGPU groups registered once ``enabled_vgpu_types`` is set."""
    overrides = dict(options or {})
    conf = cyborg_conf.load(default_config_files=[])
    conf.set_override('host', HOST)
    use_fake_transport(conf)
    types = overrides.pop(('gpu_devices', 'enabled_vgpu_types'), None)
    if types is not None:
        conf.set_override('enabled_vgpu_types', types, group='gpu_devices')
        gpu_devices.register_dynamic_opts(conf)
    for (group, name), value in overrides.items():
        conf.set_override(name, value, group=group)
    return conf


class ReportedInventories:
    """The conductor's side of the report: each snapshot, in a queue."""

    def __init__(self):
        self.snapshots = queue.Queue()

    def report_host_inventory(self, context, inventory, compute_node_names):
        self.snapshots.put(inventory)
        return {'changed': True}

    def next(self, timeout=10):
        return self.snapshots.get(timeout=timeout)


class StandInGlance:
    """Glance's download: known bytes per image id; anything else fails
    the way a missing image does."""

    def __init__(self, images):
        self.images = images
        self.downloads = []

    def download(self, image_id, dest_path):
        self.downloads.append((image_id, dest_path))
        if image_id not in self.images:
            raise LookupError('Glance has no image %s (404)' % image_id)
        with open(dest_path, 'wb') as f:
            f.write(self.images[image_id])
        return dest_path


class ServedAgent:
    def __init__(self, manager, api, conductor):
        self.manager = manager
        self.api = api
        self.conductor = conductor
        self.context = cyborg_context.admin_context(None)


@pytest.fixture
def serve_agent():
    """serve_agent(conf, drivers, **manager_kwargs) -> ServedAgent: the
    agent's endpoint on fake:// and an AgentAPI client of it."""
    with contextlib.ExitStack() as stack:
        def serve(conf, drivers, **kwargs):
            conductor = ReportedInventories()
            kwargs.setdefault('candidates', [(HOST, 'the configured host')])
            manager = agent_manager.AgentManager(conf, drivers, conductor,
                                                 **kwargs)
            transport = rpc.get_transport(conf)
            stack.callback(transport.cleanup)
            server = rpc.get_server(transport, rpc.AGENT_TOPIC, HOST,
                                    [manager])
            server.start()

            def stop():
                server.stop()
                server.wait()
            stack.callback(stop)
            return ServedAgent(manager,
                               agent_rpcapi.AgentAPI(transport, timeout=10),
                               conductor)
        yield serve
