"""[gpu_devices] and [vgpu_<type>] options: which GPUs are cut into vGPUs.

Each type listed in ``[gpu_devices] enabled_vgpu_types`` gets a group
``[vgpu_<type>]`` with ``device_addresses``: the GPUs (or, for SR-IOV
GPUs such as the A100, the virtual functions) that offer that type. A GPU
not listed anywhere is offered whole, as a PGPU.
"""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'gpu_devices'
TITLE = 'GPU options'

opts = [
    cfg.ListOpt('enabled_vgpu_types',
                default=[],
                help='mdev types (for example nvidia-222) that nvidia_gpu_'
                     'driver offers as VGPU. Say which GPUs offer each type '
                     'in [vgpu_<type>] device_addresses; when only one type '
                     'is enabled and it names no address, every GPU that '
                     'supports it offers it.'),
    cfg.ListOpt('mig_on_demand_addresses',
                default=[],
                help='PCI addresses of MIG-capable GPUs (in MIG mode) that '
                     'offer MIG instances made on demand, at bind, instead '
                     'of a fixed layout: each is published as one provider '
                     'of its compute slices (CUSTOM_MIG_COMPUTE_SLICE), '
                     'memory slices (CUSTOM_MIG_MEMORY_SLICE) and media '
                     'engine (CUSTOM_MIG_MEDIA_ENGINE), with a trait '
                     'CUSTOM_MIG_PROFILE_<profile> for each profile it can '
                     'still create.'),
]

vgpu_opts = [
    cfg.ListOpt('device_addresses',
                default=[],
                help='PCI addresses of the GPUs, or of their SR-IOV virtual '
                     'functions, that offer this vGPU type.'),
]


def vgpu_group_name(type_id):
    return 'vgpu_%s' % type_id


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def register_dynamic_opts(conf):
    """Register [vgpu_<type>] for every enabled type; returns the types."""
    types = list(conf.gpu_devices.enabled_vgpu_types)
    for type_id in types:
        conf.register_opts(vgpu_opts, group=vgpu_group_name(type_id))
    return types


def list_opts():
    return {**groups.listing(GROUP, TITLE, opts), 'vgpu_$TYPE': vgpu_opts}
