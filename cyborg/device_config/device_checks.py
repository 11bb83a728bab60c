"""Settings held against what the selected devices report.

Only what the inventory carries is checked: a PF's ``sriov_totalvfs``
and the mdev types a GPU offers (in the device's ``std_board_info``, as
the PCI drivers report them), and the MIG table of the card its PCI ids
name (``mig.CARDS``). A device that reports nothing of the kind is left
to the agent.
"""

from cyborg import exception
from cyborg.device_config import kinds
from cyborg.device_config import mig


def _invalid(message):
    return exception.Invalid(message, code='cyborg.device_config.unfit')


def _named(device):
    return 'device %s (%s on %s)' % (device.uuid, device.pci_address
                                      or 'no PCI address', device.hostname)


def check(kind, settings, selector, devices):
    """Raise Invalid with a sentence if ``settings`` of ``kind`` cannot
    apply to one of ``devices`` (``selection.DeviceFacts``) or, for a MIG
    layout, to the card that ``selector``'s PCI ids name."""
    if kind == kinds.SRIOV_VFS:
        for device in devices:
            total = device.sriov_totalvfs
            if total is not None and settings['num_vfs'] > total:
                raise _invalid('The %s offers at most %d VFs '
                               '(sriov_totalvfs), not %d.'
                               % (_named(device), total, settings['num_vfs']))
    elif kind == kinds.VGPU_TYPE:
        for device in devices:
            offered = device.mdev_types
            if offered is not None and settings['mdev_type'] not in offered:
                raise _invalid('The %s does not offer the vGPU type %s; '
                               'it offers %s.' % (
                                   _named(device),
                                   settings['mdev_type'],
                                   ', '.join(offered) or 'none'))
    elif kind == kinds.MIG_LAYOUT and settings['mig_enabled']:
        _check_mig(settings['mig_devices'], selector, devices)


def _check_mig(layout, selector, devices):
    cards = []
    # MIG is NVIDIA's: a selector of a product id alone means theirs.
    named = mig.card_of(selector.get('vendor_id', '10de'),
                        selector.get('product_id'))
    if named is not None:
        cards.append((named, 'the card the policy selects'))
    for device in devices:
        card = mig.card_of(device.vendor_id, device.product_id)
        if card is not None:
            cards.append((card, 'the ' + _named(device)))
    for card, where in cards:
        try:
            mig.place(card, layout)
        except mig.Unfit as e:
            raise _invalid('The MIG layout does not fit %s: %s'
                           % (where, e)) from None
