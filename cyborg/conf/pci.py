"""[pci] options: where drivers read the host; what pci_driver offers."""

from oslo_config import cfg

from cyborg.conf import groups

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



def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
