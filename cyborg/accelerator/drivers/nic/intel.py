"""intel_nic_driver: VFs of Intel 700- and 800-series Ethernet ports.

A port is a physical function of vendor 8086, Ethernet class, with an id
in ``NIC_DEVICE_IDS``. The host keeps the port; its enabled VFs are the
attach handles of one deployable ``nic_<port address>``, resource class
``CUSTOM_NIC`` (the VFs of a port are interchangeable, so one provider
holds them all). A port without VFs is reported with nothing to offer.

``[intel_nic] physical_device_mappings`` puts ``physical_network`` in the
attach information of the VFs and the trait ``CUSTOM_PHYSNET_<name>`` on
the deployable; ``function_device_mappings`` adds
``CUSTOM_NIC_FUNCTION_<name>``. Ports are named by interface or address.
Traits also ``CUSTOM_NIC_INTEL`` and ``CUSTOM_NIC_PRODUCT_ID_<id>``.
"""

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits
from cyborg.objects import inventory

VENDOR_ID = '8086'
RESOURCE_CLASS = 'CUSTOM_NIC'
NIC_DEVICE_IDS = (
    '1572',  # X710 10GbE SFP+
    '1580', '1581', '1583', '1584', '1585', '1586', '1587', '1588',
    '1589',  # XL710 / X710 variants (40GbE, KX, 10GBASE-T)
    '158a', '158b',  # XXV710 25GbE
    '37ce', '37cf', '37d0', '37d1', '37d2', '37d3',  # X722
    '1592', '1593', '159b',  # E810
)


def parse_port_mappings(entries, option):
    """['physnet1:eth2|0000:3b:00.0'] -> {'eth2': 'physnet1', ...}."""
    mapping = {}
    for entry in entries:
        name, sep, ports = entry.partition(':')
        if not (sep and name.strip() and ports.strip()):
            raise base.DriverError('%s: %r is not <name>:<port>[|<port>]'
                                   % (option, entry))
        for port in ports.split('|'):
            port = port.strip()
            try:
                port = str(inventory.PCIAddress.parse(port))
            except ValueError:
                pass  # an interface name
            if mapping.setdefault(port, name.strip()) != name.strip():
                raise base.DriverError('%s: port %s is mapped twice'
                                       % (option, port))
    return mapping


def _is_port(function):
    return (function.vendor_id == VENDOR_ID
            and function.device_id in NIC_DEVICE_IDS
            and function.pci_class == pci.CLASS_ETHERNET
            and not function.is_vf)


class IntelNICDriver(base.AcceleratorDriver):
    name = 'intel_nic_driver'
    device_type = 'NIC'

    def __init__(self, conf, pci_reader):
        super().__init__(conf, pci_reader)
        self.physnets = parse_port_mappings(
            conf.intel_nic.physical_device_mappings,
            'physical_device_mappings')
        self.functions = parse_port_mappings(
            conf.intel_nic.function_device_mappings,
            'function_device_mappings')

    @staticmethod
    def _mapped(mapping, port):
        for key in (str(port.address),) + port.net_interfaces:
            if key in mapping:
                return mapping[key]
        return None

    def discover(self):
        return [self._device(port) for port in self.pci.functions()
                if _is_port(port)]

    def _device(self, port):
        if not port.virtfns:
            return base.pci_device('NIC', port, [])
        physnet = self._mapped(self.physnets, port)
        function = self._mapped(self.functions, port)
        port_traits = traits.device_traits('NIC', port)
        extra = {}
        if physnet:
            port_traits.append(traits.custom('PHYSNET', physnet))
            extra['physical_network'] = physnet
        if function:
            port_traits.append(traits.custom('NIC_FUNCTION', function))
        deployable = inventory.Deployable(
            name=traits.deployable_name('nic', port.address),
            num_accelerators=len(port.virtfns),
            resource_class=RESOURCE_CLASS,
            driver_name=self.name,
            traits=port_traits,
            attach_handles=[base.pci_attach_handle(vf, **extra)
                            for vf in port.virtfns],
            attributes={'function': function} if function else {})
        return base.pci_device('NIC', port, [deployable])
