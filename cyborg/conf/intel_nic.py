"""[intel_nic] options: what the VFs of Intel NICs are connected to."""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'intel_nic'
TITLE = 'Intel NIC options'

opts = [
    cfg.ListOpt('physical_device_mappings',
                default=[],
                help='Physical networks of the NIC ports, as '
                     '``<physnet>:<port>[|<port>...]``, where a port is a '
                     'network interface name (eth2) or the PCI address of '
                     'the physical function. The VFs of a mapped port carry '
                     'physical_network in their attach information and the '
                     'trait CUSTOM_PHYSNET_<PHYSNET>.'),
    cfg.ListOpt('function_device_mappings',
                default=[],
                help='Functions (for example a DDP profile such as GTPv1) '
                     'loaded on NIC ports, as '
                     '``<function>:<port>[|<port>...]``; reported as the '
                     'trait CUSTOM_NIC_FUNCTION_<FUNCTION>.'),
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
