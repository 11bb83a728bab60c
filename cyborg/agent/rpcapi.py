"""The agent's RPC API: what the conductor may ask of one host's agent.

Each agent listens on the agent topic with its host name as the server,
so a call reaches the agent of that host only.

Version history (bump the minor for additions, keep old calls working):
  1.0 ping
"""

from cyborg import rpc

VERSION = '1.0'


class AgentAPI:

    def __init__(self, transport, timeout=None):
        self._transport = transport
        self._timeout = timeout

    def _prepare(self, host, version):
        client = rpc.get_client(self._transport, rpc.AGENT_TOPIC, VERSION,
                                server=host, timeout=self._timeout)
        return client.prepare(version=version)

    def ping(self, context, host):
        """What the agent on ``host`` runs: ``{host, drivers, version}``."""
        return self._prepare(host, '1.0').call(context, 'ping')
