"""Creating and destroying the MIG instances of binds, through NVML.

A GPU listed in ``[gpu_devices] mig_on_demand_addresses`` gets a MIG
instance when an ARQ is bound to it and loses it at unbind. NVML lets
only root create and destroy instances, so the agent asks this daemon.

The daemon chooses the start itself (``mig_fit.choose_start`` on the
card's MIG table, never NVML's implicit placement) and holds the card's
lock from reading its instances to creating the new one: two binds on one
card never choose the same start. Destroying takes the same lock, as does
putting a card back after its host restarted (``restore_mig_instances``:
the instances of binds made again at their starts, the others destroyed).

Every argument is checked first: the GPU's address, which must be listed
in the daemon's own ``[gpu_devices] mig_on_demand_addresses`` and have a
MIG table Cyborg knows (its PCI ids read from the daemon's ``[pci]
sysfs_root``); a profile of that table, for the bind and for each of the
binds waiting for the card; a placement rule of ``mig_fit.RULES``; and
every field of an instance's identity.
"""

import logging
import os
import re
import threading

from cyborg.accelerator.drivers.gpu import mig_fit
from cyborg.accelerator.drivers.gpu import mig_nvml
from cyborg.device_config import mig
from cyborg.objects import inventory
from cyborg.privsep import agent_pctxt
from cyborg.privsep import checks

LOG = logging.getLogger(__name__)

# What NVML names a MIG device: the current form, and the one of drivers
# before R470.
_MIG_UUID = re.compile(
    r'MIG-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
    r'|GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
    r'/[0-9]{1,3}/[0-9]{1,3})', re.ASCII)
# The fields of an instance's identity, as create_mig_instance answers.
IDENTITY = ('mig_profile', 'start', 'gi_id', 'ci_id', 'mig_uuid')
# The most binds waiting for one card that a choice weighs: more than any
# card holds instances (seven on an H100).
MAX_WAITING = 16

_cards_lock = threading.Lock()
_cards = {}  # address -> (MIGCard, its lock)


def _card(address):
    with _cards_lock:
        found = _cards.get(address)
        if found is None:
            found = _cards[address] = (mig_nvml.MIGCard(address),
                                       threading.Lock())
        return found


def _table(address):
    """The MIG table of the on-demand GPU at ``address``."""
    listed = {str(inventory.PCIAddress.parse(text)) for text in
              checks.daemon_conf().gpu_devices.mig_on_demand_addresses}
    if address not in listed:
        raise checks.InvalidArgument(
            'the GPU at %s is not listed in [gpu_devices] '
            'mig_on_demand_addresses' % address)
    root = checks.sysfs_root()
    what = 'the GPU at %s' % address
    device = checks.resolve(
        root, os.path.join(root, 'sys/bus/pci/devices', address), what)
    ids = []
    for name in ('vendor', 'device'):
        try:
            with open(os.path.join(device, name)) as f:
                ids.append(f.read().strip().lower().removeprefix('0x'))
        except OSError as exc:
            raise checks.InvalidArgument('%s: no PCI %s id (%s)'
                                         % (what, name, exc.strerror))
    table = mig.card_of(*ids)
    if table is None:
        raise checks.InvalidArgument('%s (%s:%s) has no MIG table'
                                     % (what, *ids))
    return table


def _profile(table, name):
    checks.mig_profile_name(name)
    profile = table.profile(name)
    if profile is None:
        raise checks.InvalidArgument(
            'the %s has no MIG profile %s (it has %s)' % (
                table.name, name, ', '.join(p.name for p in table.profiles)))
    return profile


def _waiting(table, names):
    """The profile names of the binds waiting for a card, each one the
    card's; no more than a card could ever hold."""
    if not isinstance(names, (list, tuple)) or len(names) > MAX_WAITING:
        raise checks.InvalidArgument(
            'the binds waiting for a GPU are a list of at most %d MIG '
            'profile names, not %r' % (MAX_WAITING, names))
    return tuple(_profile(table, name).name for name in names)


def _identity(address, table, identity):
    """The MIGInstance ``identity`` names, every field checked."""
    if not isinstance(identity, dict) or set(identity) != set(IDENTITY):
        raise checks.InvalidArgument(
            'a MIG instance is identified by exactly %s, not %r'
            % (', '.join(IDENTITY), identity))
    profile = _profile(table, identity['mig_profile'])
    start = checks.count(identity['start'], 'start')
    if start not in profile.starts:
        raise checks.InvalidArgument('%s cannot start at slice %d'
                                     % (profile.name, start))
    mig_uuid = identity['mig_uuid']
    if not isinstance(mig_uuid, str) or not _MIG_UUID.fullmatch(mig_uuid):
        raise checks.InvalidArgument('%r is not a MIG device UUID'
                                     % (mig_uuid,))
    return mig_nvml.MIGInstance(
        address, profile.name, checks.count(identity['gi_id'], 'gi_id'),
        checks.count(identity['ci_id'], 'ci_id'), start, mig_uuid)


def _creatable(card):
    """The profiles NVML can still create on ``card``."""
    return sorted(name for name, left in card.remaining().items() if left)


def _stranded(table, card):
    """[compute, memory] slices free on ``card`` that no placement can
    use now (``mig_fit.stranded``); None when its instances do not fit
    its table (made by hand against another)."""
    try:
        return list(mig_fit.stranded(table, card.placed()))
    except ValueError:
        return None


def _holding(occupied):
    if not occupied:
        return 'it holds no MIG instance'
    return 'it holds %s' % ', '.join('%s at %d' % held
                                     for held in sorted(occupied,
                                                        key=lambda h: h[1]))


def _no_start(address, table, occupied, profile):
    """The refusal of ``profile`` when no start of it is free."""
    compute, memory, media = mig_fit.counters(table, occupied)
    held = sum(1 for name, _ in occupied if name == profile.name)
    if (compute >= profile.compute_slices
            and memory >= profile.memory_slices
            and (media or not profile.media_engine)
            and held < profile.max_instances):
        return mig_nvml.MIGRefused(
            'The GPU at %s is too fragmented for %s now: %s; its %d free '
            'compute and %d free memory slices lie at no start %s can take '
            '(%s).' % (address, profile.name, _holding(occupied), compute,
                       memory, profile.name,
                       ', '.join(str(s) for s in profile.starts)))
    return mig_nvml.MIGRefused(
        'The GPU at %s has no room for %s now: %s, leaving %d compute and '
        '%d memory slices%s.' % (
            address, profile.name, _holding(occupied), compute, memory,
            '' if media else ' and no media engine'))


@agent_pctxt.entrypoint
def create_mig_instance(address, profile_name, rule, waiting=()):
    """Create a MIG instance of ``profile_name`` on the GPU at ``address``
    at the start ``rule`` chooses, weighing the profiles of the binds
    ``waiting`` for the card: ``{'mig_profile', 'start', 'gi_id',
    'ci_id', 'mig_uuid', 'creatable', 'stranded'}``, ``creatable`` the
    profiles NVML can still create after it, ``stranded`` the [compute,
    memory] slices left free that no placement can use. MIGRefused when
    no start is free."""
    checks.pci_address(address)
    checks.one_of(rule, mig_fit.RULES, 'MIG placement rule')
    table = _table(address)
    profile = _profile(table, profile_name)
    waiting = _waiting(table, waiting)
    card, lock = _card(address)
    with lock:
        occupied = card.placed()
        try:
            start = mig_fit.choose_start(table, occupied, profile.name, rule,
                                         waiting)
        except ValueError as exc:
            raise mig_nvml.MIGError(
                'The GPU at %s holds MIG instances its %s table cannot '
                'place (%s): nothing created.' % (address, table.name, exc))
        if start is None:
            raise _no_start(address, table, occupied, profile)
        try:
            made = card.create(profile.name, start)
        except mig_nvml.MIGRefused as exc:
            # NVML knows of instances made since they were read (by an
            # operator): what it holds is in its text.
            raise mig_nvml.MIGRefused('The GPU at %s is too fragmented for '
                                      '%s now: %s' % (address, profile.name,
                                                      exc.message)) from exc
        creatable = _creatable(card)
    # The instances read under the lock and the one made: no NVML read.
    stranded = mig_fit.stranded(table, occupied + [(made.profile,
                                                    made.start)])
    return {'mig_profile': made.profile, 'start': made.start,
            'gi_id': made.gi_id, 'ci_id': made.ci_id,
            'mig_uuid': made.mig_uuid, 'creatable': creatable,
            'stranded': list(stranded)}


@agent_pctxt.entrypoint
def destroy_mig_instance(address, identity):
    """Destroy the MIG instance ``identity`` (as create_mig_instance
    answered, without ``creatable``) on the GPU at ``address``:
    ``{'destroyed', 'creatable', 'stranded'}``; ``destroyed`` False when
    it was gone already. MIGInUse or MIGIdentityMismatch destroy
    nothing."""
    checks.pci_address(address)
    table = _table(address)
    instance = _identity(address, table, identity)
    card, lock = _card(address)
    with lock:
        destroyed = card.destroy(instance)
        creatable = _creatable(card)
        stranded = _stranded(table, card)
    return {'destroyed': destroyed, 'creatable': creatable,
            'stranded': stranded}


# Instances one restore may name: more than any card Cyborg knows holds.
MAX_RESTORED = 64


def _identities(address, table, identities, what):
    if not isinstance(identities, list) or len(identities) > MAX_RESTORED:
        raise checks.InvalidArgument(
            '%s MIG instances are a list of at most %d, not %r'
            % (what, MAX_RESTORED, identities))
    return [_identity(address, table, identity) for identity in identities]


def _named(instance):
    return {'mig_profile': instance.profile, 'start': instance.start,
            'gi_id': instance.gi_id, 'ci_id': instance.ci_id,
            'mig_uuid': instance.mig_uuid}


@agent_pctxt.entrypoint
def restore_mig_instances(address, wanted, spared):
    """Put the on-demand GPU at ``address`` back as its binds left it,
    once its host restarted: every instance of ``wanted`` (identities as
    create_mig_instance answered) exists, each one missing created again
    at its own profile and start; ``spared`` ones are left where they
    are but not made again; every other instance is destroyed.

    Answers ``{'kept', 'made', 'failed', 'destroyed', 'not_destroyed',
    'creatable'}``: ``kept`` the wanted identities found as they were,
    ``made`` ``{'was', 'now'}`` per instance created again (new GI and CI
    ids, new MIG UUID), ``failed`` ``{'identity', 'reason'}`` per wanted
    instance that could not be made again, ``destroyed`` the instances
    no bind owned, ``not_destroyed`` ``{'identity', 'reason'}`` of those
    NVML kept (in use)."""
    checks.pci_address(address)
    table = _table(address)
    wanted = _identities(address, table, wanted, 'wanted')
    spared = _identities(address, table, spared, 'spared')
    card, lock = _card(address)
    answer = {'kept': [], 'made': [], 'failed': [], 'destroyed': [],
              'not_destroyed': []}
    with lock:
        present = card.instances()
        owned = set(wanted) | set(spared)
        gpu_instances = {}
        for instance in present:
            gpu_instances.setdefault(instance.gi_id, []).append(instance)
        # First what no bind owns: its room may be what a bind needs.
        for members in gpu_instances.values():
            if any(m in owned for m in members):
                continue
            orphan = members[0]
            LOG.warning('Destroying MIG instance %s on the GPU at %s: no '
                        'bound accelerator request owns it', orphan, address)
            try:
                card.destroy(orphan)
                answer['destroyed'].append(_named(orphan))
            except mig_nvml.MIGError as exc:
                answer['not_destroyed'].append(
                    {'identity': _named(orphan), 'reason': exc.message})
        present = set(present)
        for instance in wanted:
            if instance in present:
                answer['kept'].append(_named(instance))
                continue
            try:
                made = card.create(instance.profile, instance.start)
            except mig_nvml.MIGError as exc:
                answer['failed'].append(
                    {'identity': _named(instance), 'reason': exc.message})
                continue
            answer['made'].append({'was': _named(instance),
                                   'now': _named(made)})
        answer['creatable'] = _creatable(card)
    return answer
