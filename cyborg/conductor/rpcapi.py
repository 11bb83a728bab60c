"""The conductor's RPC API: what the API service and agents may ask of it.

Version history (bump the minor for additions, keep old calls working):
  1.0 report_host_inventory, set_device_status
"""

from cyborg import rpc

VERSION = '1.0'


class ConductorAPI:

    def __init__(self, transport, timeout=None):
        self._client = rpc.get_client(transport, rpc.CONDUCTOR_TOPIC,
                                      VERSION, timeout=timeout)

    def report_host_inventory(self, context, inventory):
        """An agent's full snapshot of its host (``HostInventory.to_dict``).

        Returns a summary of what changed, as a dict.
        """
        cctxt = self._client.prepare(version='1.0')
        return cctxt.call(context, 'report_host_inventory',
                          inventory=inventory)

    def set_device_status(self, context, device_uuid, status):
        """``enabled`` or ``maintaining``: reserve or release the device's
        inventory in Placement. Returns the device's new status.
        """
        cctxt = self._client.prepare(version='1.0')
        return cctxt.call(context, 'set_device_status',
                          device_uuid=device_uuid, status=status)
