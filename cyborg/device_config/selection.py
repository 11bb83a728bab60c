"""Which devices a policy selects, and which policy wins a device.

A policy's host selector is a list of host names or fnmatch patterns
(``*`` for every host); its device selector holds any of ``driver`` (the
Cyborg driver that reports the device), ``vendor_id`` and ``product_id``
(PCI ids, four hex digits) and ``pci_addresses`` (``0000:3b:00.0``). A
device is selected when its host matches one entry of the host selector
and it matches every key of the device selector.
"""

import dataclasses
import fnmatch
import re

from cyborg import exception

SELECTOR_KEYS = ('driver', 'vendor_id', 'product_id', 'pci_addresses')
PCI_ID = re.compile(r'\A[0-9a-fA-F]{4}\Z')
PCI_ADDRESS = re.compile(r'\A[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}'
                         r'\.[0-7]\Z')
DRIVER = re.compile(r'\A[A-Za-z0-9_.-]{1,100}\Z')
HOST = re.compile(r'\A[A-Za-z0-9_.*?\[\]!-]{1,255}\Z')
MAX_HOSTS = 256
MAX_ADDRESSES = 256


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """What the database knows of a device that selection and the checks
    of settings read."""

    id: int
    uuid: str
    hostname: str
    vendor_id: str
    product_id: str | None
    drivers: frozenset  # the Cyborg drivers of its deployables
    pci_address: str | None
    sriov_totalvfs: int | None = None
    mdev_types: tuple | None = None  # None: not reported


def _invalid(message):
    return exception.Invalid(message, code='cyborg.device_config.invalid')


def check_hosts(hosts):
    """The host selector as stored: a list of names or patterns."""
    if (not isinstance(hosts, list) or not hosts
            or len(hosts) > MAX_HOSTS):
        raise _invalid('hosts must be an array of 1 to %d host names or '
                       'fnmatch patterns (["*"] for every host).'
                       % MAX_HOSTS)
    for host in hosts:
        if not isinstance(host, str) or not HOST.match(host):
            raise _invalid('%r is not a host name or fnmatch pattern: '
                           'letters, digits, ., _, - and the pattern '
                           'characters * ? [ ] !.' % (host,))
    return sorted(set(hosts))


def check_devices(selector):
    """The device selector as stored: at least one key, each well formed,
    ids and addresses in lower case."""
    if not isinstance(selector, dict):
        raise _invalid('devices must be a JSON object with any of %s.'
                       % ', '.join(SELECTOR_KEYS))
    unknown = sorted(set(selector) - set(SELECTOR_KEYS))
    if unknown:
        raise _invalid('devices has no field %s; it selects by %s.'
                       % (', '.join(unknown), ', '.join(SELECTOR_KEYS)))
    if not selector:
        raise _invalid('devices must select by at least one of %s: a '
                       'policy for every device of a host is surely a '
                       'mistake.' % ', '.join(SELECTOR_KEYS))
    checked = {}
    driver = selector.get('driver')
    if 'driver' in selector:
        if not isinstance(driver, str) or not DRIVER.match(driver):
            raise _invalid('devices.driver must name a Cyborg driver '
                           '(intel_nic_driver, say).')
        checked['driver'] = driver
    for key in ('vendor_id', 'product_id'):
        if key in selector:
            value = selector[key]
            if not isinstance(value, str) or not PCI_ID.match(value):
                raise _invalid('devices.%s must be a PCI id of four hex '
                               'digits (10de, say).' % key)
            checked[key] = value.lower()
    if 'pci_addresses' in selector:
        addresses = selector['pci_addresses']
        if (not isinstance(addresses, list) or not addresses
                or len(addresses) > MAX_ADDRESSES
                or not all(isinstance(a, str) and PCI_ADDRESS.match(a)
                           for a in addresses)):
            raise _invalid('devices.pci_addresses must be an array of 1 to '
                           '%d PCI addresses written 0000:3b:00.0.'
                           % MAX_ADDRESSES)
        checked['pci_addresses'] = sorted({a.lower() for a in addresses})
    return checked


def host_selected(hosts, hostname):
    return any(fnmatch.fnmatchcase(hostname, pattern) for pattern in hosts)


def selects(hosts, selector, device):
    """Whether a policy of ``hosts`` and ``selector`` selects ``device``
    (``DeviceFacts``)."""
    if not host_selected(hosts, device.hostname):
        return False
    if 'driver' in selector and selector['driver'] not in device.drivers:
        return False
    if ('vendor_id' in selector
            and selector['vendor_id'] != (device.vendor_id or '').lower()):
        return False
    if ('product_id' in selector
            and selector['product_id'] != (device.product_id or '').lower()):
        return False
    return ('pci_addresses' not in selector
            or device.pci_address in selector['pci_addresses'])


def exact_hosts(hosts):
    """The host names of ``hosts`` when none is a pattern, else None: what
    a query can narrow the devices to."""
    if any(set(host) & set('*?[') for host in hosts):
        return None
    return list(hosts)
