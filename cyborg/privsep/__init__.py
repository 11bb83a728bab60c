"""What the agent does as root, and nothing else.

The agent runs as an unprivileged user. The few actions that need root
go through oslo.privsep: the agent sends each call over a socket to a
daemon that runs as root, and the daemon runs only the entry points of
this package, each of which checks its arguments before it touches
anything:

- ``mdev.create_mdev`` / ``mdev.remove_mdev``: write the sysfs control
  files of mediated devices (vGPUs);
- ``fpga_tool.run_fpga_tool``: run a vendor's FPGA programming tool from a
  fixed list, with argument shapes from a fixed list;
- ``playbook.run_playbook``: run the setup or teardown playbook of a
  device configuration pair from a root-owned directory, with the
  variables it declares, without any capability.
- ``pci_reset.reset_function``: reset a PCI function bound to
  ``vfio-pci`` (a function-level reset where it has one), to scrub a
  device a VM had before the next one gets it;
- ``mig.create_mig_instance`` / ``mig.destroy_mig_instance``: create
  the MIG instance of a bind through NVML at the start the daemon
  chooses, and destroy exactly that instance at unbind, on a GPU listed
  in the daemon's own ``[gpu_devices] mig_on_demand_addresses``;
  ``mig.restore_mig_instances``: once the host restarted, make the
  instances of binds again at their recorded starts and destroy those
  no bind owns, on such a GPU alone. NVML
  lets uid 0 manage MIG instances: the daemon's uid, with no further
  capability.
- ``nvme.identify_controller`` / ``nvme.sanitize_log`` /
  ``nvme.start_sanitize`` / ``nvme.format_namespace``: read what an NVMe
  controller of the Inspur driver can erase, start a sanitize, read its
  log, format a namespace, with nvme-cli in fixed argument shapes, on a
  controller found from its PCI address and bound to ``nvme``; an erase
  that would reach another tenant's VF or a namespace the host uses is
  refused.

Nothing else of the agent needs privileges: discovery and health read
world-readable sysfs files and NVML, bitstreams are downloaded into the
agent's own temporary directory.

The agent starts the daemon at its first privileged call with
``[privsep_agent] helper_command``: ``cyborg-privsep-launcher <link> sudo
privsep-helper --config-file <the agent's files>``, which runs
privsep-helper with ``--privsep_context cyborg.privsep.agent_pctxt
--privsep_sock_path <link>``, one fixed command line that a sudoers rule
without wildcards allows the agent's user (``launcher``). The daemon
reads its own configuration from those files: ``[pci] sysfs_root``, the
root every path is confined to, is the daemon's, never a value the agent
sends.

Capabilities. The daemon stays uid 0, the owner of the sysfs control files
(``create`` and ``remove``, mode 0200), so writing them needs no
capability. It keeps CAP_DAC_READ_SEARCH alone: it must look at the
bitstream that the agent downloaded into its private (0700) directory
before it hands the file to a tool. A program that uid 0 executes gets
back every capability of the bounding set, so the vendor tool runs under
``setpriv`` with a bounding set of ``TOOL_CAPABILITIES`` and no new
privileges: CAP_DAC_READ_SEARCH to read that bitstream, CAP_SYS_ADMIN
because the vendors' libraries read the card's whole PCI configuration
space, of which the kernel shows only the first 64 bytes without it.
nvme-cli runs the same way with CAP_SYS_ADMIN alone, which NVMe admin
commands need.
"""

from oslo_privsep import capabilities
from oslo_privsep import priv_context

CONFIG_SECTION = 'privsep_agent'
CAPABILITIES = (capabilities.CAP_DAC_READ_SEARCH,)
TOOL_CAPABILITIES = (capabilities.CAP_DAC_READ_SEARCH,
                     capabilities.CAP_SYS_ADMIN)
# Seconds the agent waits for a sysfs write by the daemon; well within
# [conductor] agent_timeout, the conductor's wait for a whole prepare.
CALL_TIMEOUT = 30

agent_pctxt = priv_context.PrivContext(
    __name__,
    cfg_section=CONFIG_SECTION,
    pypath=__name__ + '.agent_pctxt',
    capabilities=list(CAPABILITIES),
    timeout=CALL_TIMEOUT,
)


def capability_names(values):
    """``['CAP_DAC_READ_SEARCH', ...]`` for capability numbers."""
    return [capabilities.CAPS_BYVALUE[value] for value in values]
