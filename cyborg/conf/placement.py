"""[placement] options: how to reach Placement, and what to publish there."""

from oslo_config import cfg

from cyborg.conf import service_client

GROUP = 'placement'

_LAYOUT_OPTS = [
    cfg.StrOpt(
        'provider_layout', default='per_device',
        choices=[
            ('per_device', 'One resource provider per deployable, with a '
             'total of its accelerators.'),
            ('pooled', 'Identical deployables of a host (same resource '
             'class, device type, vendor, model, driver, traits, '
             'attributes and NUMA node) share one resource provider whose '
             'total is theirs together and which carries the trait '
             'CUSTOM_NUMA_NODE_<n>. One request group can then ask for '
             'several of them (resources:PGPU=4), and Placement offers one '
             'candidate per host instead of every permutation of the '
             'devices. FPGAs and nested deployables keep a provider each.'),
        ],
        help='How the conductor publishes deployables to Placement. A '
             'change applies to each host at the conductor\'s next '
             'reconciliation (one runs when it starts); allocations of '
             'running instances are moved to the new providers with '
             'Placement\'s reshaper, never deleted.'),
]

_GROUP = service_client.ServiceClientGroup(
    GROUP, 'Placement service client',
    'Where the Placement API is and the credentials used to call it. The '
    'conductor reports each deployable there as a resource provider under '
    'its compute node.',
    service_type='placement', extra_opts=_LAYOUT_OPTS)

register_opts = _GROUP.register_opts
list_opts = _GROUP.list_opts
