"""The conductor's RPC API: what the API service and agents may ask of it.

Version history (bump the minor for additions, keep old calls working):
  1.0 report_host_inventory, set_device_status
  1.1 report_host_inventory takes compute_node_names
  1.2 bind_arqs (cast), unbind_arqs, finish_deleting_arqs
  1.3 program_deployable

Rolling upgrades: ``[upgrade_levels] conductor`` caps what this client
sends. A method names the version it needs in ``_prepare``, which
refuses it under a lower cap (``rpc.VersionCapped``); a method that has
an older form checks ``can_send_version`` and falls back to it, as
``report_host_inventory`` does. Adding a method: bump ``VERSION``, add
a line above, give the endpoint the same version's arguments (with
``rpc.ignores_unknown_args``) and call ``_prepare(name, VERSION)``.

Payloads carry their own versions (``cyborg.objects.payload``); the
summaries returned are ``SUMMARY`` payloads.
"""

from cyborg import rpc
from cyborg.objects import payload

VERSION = '1.3'

# What report_host_inventory and set_device_status answer: a dict of
# facts for logs, read by nobody field by field.
SUMMARY = payload.Kind('conductor summary', '1.0')


class ConductorAPI:

    def __init__(self, transport, timeout=None, version_cap=None):
        """``version_cap`` is ``[upgrade_levels] conductor``."""
        self._client = rpc.CappedClient(transport, rpc.CONDUCTOR_TOPIC,
                                        VERSION, 'conductor',
                                        version_cap=version_cap,
                                        timeout=timeout)

    def can_send_version(self, version):
        """Whether the cap lets this client send ``version``."""
        return self._client.can_send_version(version)

    def _prepare(self, method, version, **kwargs):
        return self._client.prepare(method, version, **kwargs)

    def report_host_inventory(self, context, inventory, compute_node_names):
        """An agent's full snapshot of its host (``HostInventory.to_dict``)
        and the names Nova may have given its compute node, best first.

        Returns a summary of what changed, as a dict. Capped at 1.0, the
        names are not sent: the conductor tries the inventory's host name.
        """
        if not self.can_send_version('1.1'):
            return self._prepare('report_host_inventory', '1.0').call(
                context, 'report_host_inventory', inventory=inventory)
        return self._prepare('report_host_inventory', '1.1').call(
            context, 'report_host_inventory', inventory=inventory,
            compute_node_names=list(compute_node_names))

    def set_device_status(self, context, device_uuid, status):
        """``enabled`` or ``maintaining``: release or reserve the device's
        inventory in Placement. Returns a summary of the change, as a dict.
        """
        return self._prepare('set_device_status', '1.0').call(
            context, 'set_device_status', device_uuid=device_uuid,
            status=status)

    def bind_arqs(self, context, arq_uuids):
        """Bind these BindStarted accelerator requests; returns at once.

        The outcome reaches Nova as external events and the ARQs' state.
        """
        self._prepare('bind_arqs', '1.2').cast(
            context, 'bind_arqs', arq_uuids=list(arq_uuids))

    def unbind_arqs(self, context, arq_uuids):
        """Release the devices of these ARQs on their hosts and unbind
        them; raises if a host could not release (they are UnbindFailed).
        """
        return self._prepare('unbind_arqs', '1.2').call(
            context, 'unbind_arqs', arq_uuids=list(arq_uuids))

    def finish_deleting_arqs(self, context, arq_uuids):
        """Release the devices of these Deleting ARQs and remove them."""
        return self._prepare('finish_deleting_arqs', '1.2').call(
            context, 'finish_deleting_arqs', arq_uuids=list(arq_uuids))

    def program_deployable(self, context, deployable_uuid, image_uuid,
                           timeout=None):
        """Load Glance image ``image_uuid`` into an FPGA deployable that
        has no accelerator in use; returns the agent's summary."""
        return self._prepare('program_deployable', '1.3',
                             timeout=timeout).call(
            context, 'program_deployable', deployable_uuid=deployable_uuid,
            image_uuid=image_uuid)
