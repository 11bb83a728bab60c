"""[pci] options: where drivers read the host; what pci_driver offers."""

from oslo_config import cfg

GROUP = 'pci'
TITLE = 'PCI discovery options'

opts = [
    cfg.StrOpt('sysfs_root',
               default='/',
               help='Root of the file system the accelerator drivers read: '
                    'sys/bus/pci, sys/class/mdev_bus, sys/class/fpga* and '
                    'usr/share/{misc,hwdata}/pci.ids below it. Only tests '
                    'and recorded hosts need anything but "/".'),
    cfg.MultiStrOpt('device_spec',
                    default=[],
                    deprecated_name='passthrough_whitelist',
                    help='PCI functions that pci_driver offers for '
                         'passthrough (resource class CUSTOM_PCI), one JSON '
                         'object per line as in Nova: "vendor_id" and '
                         '"product_id" (hex, or "*"), and "address", either '
                         'a glob string such as "0000:3b:00.*" or an object '
                         'of regular expressions with the keys "domain", '
                         '"bus", "slot", "function". An item may be a list '
                         'of such objects. Bridges, audio, USB and BMC '
                         'display functions are never offered.'),
]


def _group():
    # A new OptGroup per configuration: oslo.config keeps the registered
    # options, overrides included, on the group object itself.
    return cfg.OptGroup(GROUP, title=TITLE)


def register_opts(conf):
    conf.register_group(_group())
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {_group(): opts}
