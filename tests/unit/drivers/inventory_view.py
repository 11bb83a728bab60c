"""Read discovered inventory by PCI address, as the tests compare it."""


def address_of(info):
    return '{domain}:{bus}:{device}.{function}'.format(**info)


def by_controlpath(devices):
    """Devices keyed by the address of their control path."""
    return {address_of(d.controlpath_info): d for d in devices}


def handle_addresses(deployable):
    return [address_of(h.attach_info) for h in deployable.attach_handles]


def claimed_functions(device):
    """Every PCI function a device stands for: control path and handles."""
    claimed = {address_of(device.controlpath_info)}
    for deployable in device.deployables:
        claimed.update(handle_addresses(deployable))
    return claimed
