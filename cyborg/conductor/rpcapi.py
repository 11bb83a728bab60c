"""The conductor's RPC API: what the API service and agents may ask of it.

Version history (bump the minor for additions, keep old calls working):
  1.0 report_host_inventory, set_device_status
  1.1 report_host_inventory takes compute_node_names
  1.2 bind_arqs (cast), unbind_arqs, finish_deleting_arqs
  1.3 program_deployable
  1.4 agent_heartbeat (cast); report_host_inventory takes forwarded and
      answers conductor and owner; casts and calls may name a conductor
"""

from cyborg import rpc

VERSION = '1.4'


class ConductorAPI:

    def __init__(self, transport, timeout=None):
        self._client = rpc.get_client(transport, rpc.CONDUCTOR_TOPIC,
                                      VERSION, timeout=timeout)

    def report_host_inventory(self, context, inventory, compute_node_names,
                              server=None, forwarded=False, timeout=None):
        """An agent's full snapshot of its host (``HostInventory.to_dict``)
        and the names Nova may have given its compute node, best first.

        ``server`` names the conductor to ask (the host's owner on the
        ring), else any conductor answers. ``forwarded`` marks a report
        one conductor passes to the owner: it is never passed on again.

        Returns a summary of what changed, as a dict, with ``conductor``
        (who handled it) and ``owner`` (the host's owner on the ring).
        """
        kwargs = {'inventory': inventory,
                  'compute_node_names': list(compute_node_names)}
        version = '1.1'
        if forwarded:
            kwargs['forwarded'] = True
            version = '1.4'
        cctxt = self._client.prepare(version=version, server=server,
                                     timeout=timeout)
        return cctxt.call(context, 'report_host_inventory', **kwargs)

    def agent_heartbeat(self, context, host, version, rpc_version,
                        server=None, **extra):
        """An agent on ``host`` is alive; returns at once.

        The message is a dict of keywords with the agent's package
        ``version`` and ``rpc_version``; a newer agent may add keys
        (health, usage) that an older conductor ignores.
        """
        cctxt = self._client.prepare(version='1.4', server=server)
        cctxt.cast(context, 'agent_heartbeat', host=host, version=version,
                   rpc_version=rpc_version, **extra)

    def set_device_status(self, context, device_uuid, status, timeout=None):
        """``enabled`` or ``maintaining``: release or reserve the device's
        inventory in Placement. Returns a summary of the change, as a dict
        (``placement_updated`` from conductors of this release on).
        """
        cctxt = self._client.prepare(version='1.0', timeout=timeout)
        return cctxt.call(context, 'set_device_status',
                          device_uuid=device_uuid, status=status)

    def bind_arqs(self, context, arq_uuids, server=None):
        """Bind these BindStarted accelerator requests; returns at once.

        ``server`` names the conductor that owns their host, else any
        conductor takes them. The outcome reaches Nova as external events
        and the ARQs' state.
        """
        cctxt = self._client.prepare(version='1.2', server=server)
        cctxt.cast(context, 'bind_arqs', arq_uuids=list(arq_uuids))

    def unbind_arqs(self, context, arq_uuids):
        """Release the devices of these ARQs on their hosts and unbind
        them; raises if a host could not release (they are UnbindFailed).
        """
        cctxt = self._client.prepare(version='1.2')
        return cctxt.call(context, 'unbind_arqs', arq_uuids=list(arq_uuids))

    def finish_deleting_arqs(self, context, arq_uuids):
        """Release the devices of these Deleting ARQs and remove them."""
        cctxt = self._client.prepare(version='1.2')
        return cctxt.call(context, 'finish_deleting_arqs',
                          arq_uuids=list(arq_uuids))

    def program_deployable(self, context, deployable_uuid, image_uuid,
                           timeout=None):
        """Load Glance image ``image_uuid`` into an FPGA deployable that
        has no accelerator in use; returns the agent's summary."""
        cctxt = self._client.prepare(version='1.3', timeout=timeout)
        return cctxt.call(context, 'program_deployable',
                          deployable_uuid=deployable_uuid,
                          image_uuid=image_uuid)
