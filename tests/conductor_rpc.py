"""The real conductor serving RPC on oslo.messaging's in-process transport.

The API finds it through ``transport_url = fake://`` in its configuration
(or the returned transport); its Placement sync goes to ``placement_client``.
"""

import contextlib

from oslo_messaging import opts as messaging_opts

from cyborg import rpc
from cyborg.conductor import host_sync
from cyborg.conductor import manager


def use_fake_transport(conf, timeout=10):
    for group, options in messaging_opts.list_opts():
        conf.register_opts(options, group=group)
    conf.set_override('transport_url', 'fake://')
    conf.set_override('rpc_response_timeout', timeout)


@contextlib.contextmanager
def serving(transport, db, endpoints, server='conductor-1'):
    rpc_server = rpc.get_server(transport, rpc.CONDUCTOR_TOPIC, server,
                                endpoints, db=db)
    rpc_server.start()
    try:
        yield
    finally:
        rpc_server.stop()
        rpc_server.wait()


@contextlib.contextmanager
def conductor(conf, db, placement_client):
    """Yields the transport the conductor listens on."""
    use_fake_transport(conf)
    transport = rpc.get_transport(conf)
    endpoint = manager.ConductorManager(host_sync.HostSync(placement_client))
    try:
        with serving(transport, db, [endpoint]):
            yield transport
    finally:
        transport.cleanup()
