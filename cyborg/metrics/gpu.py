"""GPU series named and labelled as NVIDIA's dcgm-exporter does, so that
its dashboards (Grafana 12239 and the like) work unchanged.

The values come from the NVML usage of an observation
(``cyborg.accelerator.drivers.gpu.nvml``), in dcgm-exporter's units:
percent, MiB, °C, W. The labels are dcgm-exporter's: ``gpu`` (NVML's
index), ``UUID``, ``pci_bus_id`` (NVML's form, ``00000000:3B:00.0``),
``device`` (``nvidia<index>``), ``modelName`` and ``Hostname``. A GPU in
MIG mode has, for the frame-buffer fields, one sample more per MIG
instance, with ``GPU_I_ID`` and ``GPU_I_PROFILE`` as dcgm-exporter
labels them.

dcgm-exporter types ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`` a counter
but names it without ``_total``; prometheus_client would add the suffix
to a counter, so it is typed a gauge here and keeps its name. Queries
(``increase()`` included) read it the same.
"""

from prometheus_client import core

from cyborg.objects import inventory

MIB = 1024 * 1024


def _mib(key):
    def value(usage):
        return usage[key] // MIB
    return value


def _plain(key):
    def value(usage):
        return usage[key]
    return value


def _watts(usage):
    return usage['power_mw'] / 1000


# (name, help, usage keys needed, value from usage), as dcgm-exporter's
# default counters list them.
FIELDS = (
    ('DCGM_FI_DEV_GPU_TEMP', 'GPU temperature (in C).',
     ('temperature_c',), _plain('temperature_c')),
    ('DCGM_FI_DEV_POWER_USAGE', 'Power draw (in W).',
     ('power_mw',), _watts),
    ('DCGM_FI_DEV_GPU_UTIL', 'GPU utilization (in %).',
     ('gpu_util_percent',), _plain('gpu_util_percent')),
    ('DCGM_FI_DEV_MEM_COPY_UTIL', 'Memory utilization (in %).',
     ('memory_util_percent',), _plain('memory_util_percent')),
    ('DCGM_FI_DEV_XID_ERRORS',
     'Value of the last XID error encountered.',
     ('last_xid',), _plain('last_xid')),
    ('DCGM_FI_DEV_FB_FREE', 'Framebuffer memory free (in MiB).',
     ('fb_free_bytes',), _mib('fb_free_bytes')),
    ('DCGM_FI_DEV_FB_USED', 'Framebuffer memory used (in MiB).',
     ('fb_used_bytes',), _mib('fb_used_bytes')),
    ('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS',
     'Number of remapped rows for uncorrectable errors',
     ('remapped_rows_uncorrectable',),
     _plain('remapped_rows_uncorrectable')),
    ('DCGM_FI_DEV_ROW_REMAP_FAILURE',
     'Whether remapping of rows has failed',
     ('row_remap_failure',), _plain('row_remap_failure')),
)
NAMES = tuple(name for name, _, _, _ in FIELDS)
# The fields NVML gives for each MIG instance too: dcgm-exporter adds a
# sample per instance, labelled GPU_I_ID and GPU_I_PROFILE.
MIG_FIELDS = frozenset({'DCGM_FI_DEV_FB_FREE', 'DCGM_FI_DEV_FB_USED'})
IDENTITY = ('gpu_index', 'gpu_uuid', 'gpu_name')


def nvml_bus_id(address):
    """``0000:3b:00.0`` as NVML writes it: ``00000000:3B:00.0``."""
    pci = inventory.PCIAddress.parse(address)
    return '%08X:%02X:%02X.%X' % (int(pci.domain, 16), int(pci.bus, 16),
                                  int(pci.device, 16),
                                  int(pci.function, 16))


def labels(hostname, address, usage):
    """dcgm-exporter's labels of the GPU; None unless NVML identified it
    (a GPU given whole to a VM is invisible to NVML on the host)."""
    if not all(key in usage for key in IDENTITY):
        return None
    return {'gpu': str(usage['gpu_index']),
            'UUID': str(usage['gpu_uuid']),
            'pci_bus_id': nvml_bus_id(address),
            'device': 'nvidia%d' % usage['gpu_index'],
            'modelName': str(usage['gpu_name']),
            'Hostname': hostname}


def families(gpus):
    """One gauge family per field, from ``[(labels, usage)]``; a field a
    GPU did not give is left out for that GPU."""
    found = []
    for name, text, keys, value in FIELDS:
        family = core.GaugeMetricFamily(name, text)
        for gpu_labels, usage in gpus:
            if all(key in usage for key in keys):
                family.add_sample(name, gpu_labels, value(usage))
            if name not in MIG_FIELDS:
                continue
            for instance in usage.get('mig_instances') or ():
                if all(key in instance for key in keys):
                    family.add_sample(name, {
                        **gpu_labels,
                        'GPU_I_ID': str(instance.get('gi_id', '')),
                        'GPU_I_PROFILE': str(instance.get('profile', ''))},
                        value(instance))
        found.append(family)
    return found
