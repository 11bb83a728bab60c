"""The conductor's RPC API: what the API service and agents may ask of it.

Version history (bump the minor for additions, keep old calls working):
  1.0 report_host_inventory, set_device_status
  1.1 report_host_inventory takes compute_node_names
  1.2 bind_arqs (cast), unbind_arqs, finish_deleting_arqs
  1.3 program_deployable
  1.4 agent_heartbeat (cast); report_host_inventory takes forwarded and
      answers conductor and owner; casts and calls may name a conductor
      (a heartbeat one conductor passes to the host's owner carries
      forwarded=True, which a conductor of 1.4 ignores)
  1.5 mig_instances_of_host, record_mig_instance: an agent puts back
      the MIG instances of its binds after its host restarted
  1.6 mdevs_of_host: an agent puts back the mdevs of its Bound ARQs
      after its host restarted
  1.7 applied_configs_of_host: an agent applies again the device
      configuration its host lost in a restart

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

VERSION = '1.7'

# What report_host_inventory and set_device_status answer: a dict of
# facts for logs. 1.1: the report's answer has ``bindings``, {device
# address: [{instance_uuid, project_id}]}, which the agent labels its
# metrics with; the rest is read by nobody field by field.
SUMMARY = payload.Kind('conductor summary', '1.1')
# An ARQ that owns a MIG instance on a host: what its bind made
# (``attach_details``) and the handle it was made for.
MIG_HELD = payload.Kind('MIG instance held', '1.0',
                        required=('arq_uuid', 'state', 'driver_name',
                                  'attach_handle', 'attach_details'))
# An ARQ that holds an mdev on a host: the handle (its UUID the mdev's).
MDEV_HELD = payload.Kind('mdev held', '1.0',
                         required=('arq_uuid', 'state', 'driver_name',
                                   'attach_handle'))
# A device of a host whose configuration status is applied: its control
# path and what was applied.
CONFIG_APPLIED = payload.Kind('device configuration applied', '1.0',
                              required=('device_uuid', 'controlpath_info',
                                        'kind', 'applied_settings'))


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

    def report_host_inventory(self, context, inventory, compute_node_names,
                              server=None, forwarded=False, timeout=None):
        """An agent's full snapshot of its host (``HostInventory.to_dict``)
        and the names Nova may have given its compute node, best first.

        ``server`` names the conductor to ask (the host's owner on the
        ring), else any conductor answers. ``forwarded`` marks a report
        one conductor passes to the owner: it is never passed on again.
        Capped at 1.0, the names are not sent: the conductor tries the
        inventory's host name.

        Returns a summary of what changed, as a dict, with ``conductor``
        (who handled it) and ``owner`` (the host's owner on the ring).
        """
        options = _options(server=server, timeout=timeout)
        if forwarded:
            return self._prepare('report_host_inventory', '1.4',
                                 **options).call(
                context, 'report_host_inventory', inventory=inventory,
                compute_node_names=list(compute_node_names), forwarded=True)
        if not self.can_send_version('1.1'):
            return self._prepare('report_host_inventory', '1.0',
                                 **options).call(
                context, 'report_host_inventory', inventory=inventory)
        return self._prepare('report_host_inventory', '1.1', **options).call(
            context, 'report_host_inventory', inventory=inventory,
            compute_node_names=list(compute_node_names))

    def agent_heartbeat(self, context, host, version, rpc_version,
                        server=None, **extra):
        """An agent on ``host`` is alive; returns at once.

        The message is a dict of keywords with the agent's package
        ``version`` and ``rpc_version``; a newer agent may add keys
        (health, usage) that an older conductor ignores. Not sent while
        ``[upgrade_levels] conductor`` is below 1.4: an older conductor
        has no services table to write.
        """
        if not self.can_send_version('1.4'):
            return
        self._prepare('agent_heartbeat', '1.4',
                      **_options(server=server)).cast(
            context, 'agent_heartbeat', host=host, version=version,
            rpc_version=rpc_version, **extra)

    def set_device_status(self, context, device_uuid, status, timeout=None,
                          server=None):
        """``enabled`` or ``maintaining``: release or reserve the device's
        inventory in Placement. Returns a summary of the change, as a dict
        (``placement_updated`` from conductors of this release on).
        ``server`` names the conductor that owns the device's host.
        """
        return self._prepare('set_device_status', '1.0',
                             **_options(timeout=timeout,
                                        server=server)).call(
            context, 'set_device_status', device_uuid=device_uuid,
            status=status)

    def bind_arqs(self, context, arq_uuids, server=None):
        """Bind these BindStarted accelerator requests; returns at once.

        ``server`` names the conductor that owns their host, else any
        conductor takes them. The outcome reaches Nova as external events
        and the ARQs' state.
        """
        self._prepare('bind_arqs', '1.2', **_options(server=server)).cast(
            context, 'bind_arqs', arq_uuids=list(arq_uuids))

    def unbind_arqs(self, context, arq_uuids, timeout=None, server=None):
        """Release the devices of these ARQs on their hosts and unbind
        them; raises if a host could not release (they are UnbindFailed).
        ``server`` names the conductor that owns their host: any other
        refuses (``NotOwner``).
        """
        return self._prepare('unbind_arqs', '1.2',
                             **_options(timeout=timeout,
                                        server=server)).call(
            context, 'unbind_arqs', arq_uuids=list(arq_uuids))

    def finish_deleting_arqs(self, context, arq_uuids, timeout=None,
                             server=None):
        """Release the devices of these Deleting ARQs and remove them;
        ``server`` names the conductor that owns their host."""
        return self._prepare('finish_deleting_arqs', '1.2',
                             **_options(timeout=timeout,
                                        server=server)).call(
            context, 'finish_deleting_arqs', arq_uuids=list(arq_uuids))

    def program_deployable(self, context, deployable_uuid, image_uuid,
                           timeout=None, server=None):
        """Load Glance image ``image_uuid`` into an FPGA deployable that
        has no accelerator in use; returns the agent's summary.
        ``server`` names the conductor that owns the deployable's host."""
        return self._prepare('program_deployable', '1.3',
                             **_options(timeout=timeout,
                                        server=server)).call(
            context, 'program_deployable', deployable_uuid=deployable_uuid,
            image_uuid=image_uuid)

    def mig_instances_of_host(self, context, host, timeout=None,
                              server=None):
        """The ARQs that own a MIG instance on ``host`` (1.5): a list of
        ``MIG_HELD`` fields, ``{arq_uuid, state, driver_name,
        attach_handle: {uuid, attach_type, attach_info}, attach_details}``.
        Under a cap below 1.5 raises ``rpc.VersionCapped``."""
        answer = self._prepare('mig_instances_of_host', '1.5',
                               **_options(timeout=timeout,
                                          server=server)).call(
            context, 'mig_instances_of_host', host=host)
        return [MIG_HELD.load(held) for held in answer or ()]

    def mdevs_of_host(self, context, host, timeout=None, server=None):
        """The Bound ARQs that hold an mdev on ``host`` (1.6): a list of
        ``MDEV_HELD`` fields, ``{arq_uuid, state, driver_name,
        attach_handle: {uuid, attach_type, attach_info}}``. Under a cap
        below 1.6 raises ``rpc.VersionCapped``."""
        answer = self._prepare('mdevs_of_host', '1.6',
                               **_options(timeout=timeout,
                                          server=server)).call(
            context, 'mdevs_of_host', host=host)
        return [MDEV_HELD.load(held) for held in answer or ()]

    def applied_configs_of_host(self, context, host, timeout=None,
                                server=None):
        """The devices of ``host`` whose configuration is applied (1.7):
        a list of ``CONFIG_APPLIED`` fields, ``{device_uuid,
        controlpath_info, kind, applied_settings}``. Under a cap below
        1.7 raises ``rpc.VersionCapped``."""
        answer = self._prepare('applied_configs_of_host', '1.7',
                               **_options(timeout=timeout,
                                          server=server)).call(
            context, 'applied_configs_of_host', host=host)
        return [CONFIG_APPLIED.load(applied) for applied in answer or ()]

    def record_mig_instance(self, context, arq_uuid, handle_uuid,
                            old_details, new_details, timeout=None,
                            server=None):
        """The MIG instance of Bound ARQ ``arq_uuid`` was made again
        (1.5): keep ``new_details`` instead of ``old_details`` if the ARQ
        still holds handle ``handle_uuid`` and ``old_details``. True if
        kept; False if the ARQ was unbound or changed meanwhile (the
        caller destroys the instance again)."""
        return bool(self._prepare('record_mig_instance', '1.5',
                                  **_options(timeout=timeout,
                                             server=server)).call(
            context, 'record_mig_instance', arq_uuid=arq_uuid,
            handle_uuid=handle_uuid, old_details=old_details,
            new_details=new_details))


def _options(**options):
    """The call options given: an option left None keeps the client's."""
    return {k: v for k, v in options.items() if v is not None}
