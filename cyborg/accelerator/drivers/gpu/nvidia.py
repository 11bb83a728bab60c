"""nvidia_gpu_driver: NVIDIA GPUs, whole (PGPU) or cut into vGPUs (VGPU).

A GPU is a physical function of vendor 10de with a VGA or 3D controller
class; its audio, USB and serial functions, NVSwitch bridges and its SR-IOV
virtual functions are not GPUs.

- Not configured for vGPU: one deployable ``pgpu_<address>``, resource
  class ``PGPU``, one PCI attach handle (the GPU).
- Its address, or the address of some of its VFs (A100 and later create
  vGPUs on VFs), listed in ``[vgpu_<type>] device_addresses``: one
  deployable ``vgpu_<address>_<type>`` per type, resource class ``VGPU``,
  with one ``MDEV`` attach handle per instance the type offers. The handle
  names the function the mdev is created on, ``asked_type`` and a
  ``vgpu_mark`` ``<type>_<n>``, n counting the handles of its function.
  Instances are counted as available plus already created, so that
  creating an mdev for a VM changes nothing in the inventory.
- Configured for vGPU but offering none of the type (host driver not
  loaded, VFs not enabled): no deployable rather than a surprise PGPU.

- In MIG mode (NVML says so; a device configuration policy of kind
  ``mig_layout`` sets it): the GPU is published sliced, never whole. One
  deployable ``mig_<address>_<profile>`` per MIG profile it holds
  instances of, resource class ``CUSTOM_MIG_<profile>``
  (``CUSTOM_MIG_1G_10GB``), with one ``MIG`` attach handle per instance:
  the GPU's address, the GPU and compute instance ids, the start slot and
  the MIG device's UUID, which is what a workload is given. A GPU in MIG
  mode that holds no instance has no deployable. Where NVML cannot say
  (no driver, no bindings, a GPU it does not see), the GPU is whole.

- Listed in ``[gpu_devices] mig_on_demand_addresses``, in MIG mode and
  with a MIG table Cyborg knows (``cyborg.device_config.mig``): MIG
  instances made on demand. One deployable ``migs_<address>`` whose
  provider offers the card's compute slices (``CUSTOM_MIG_COMPUTE_SLICE``)
  and, as extra inventories, its memory slices
  (``CUSTOM_MIG_MEMORY_SLICE``) and media engine
  (``CUSTOM_MIG_MEDIA_ENGINE``), with the trait
  ``CUSTOM_MIG_PROFILE_<profile>`` for every profile NVML says it can
  still create (its remaining capacity knows the placements), and one
  ``MIG`` attach handle per instance it can hold at once (a slot each).
  A device profile asks for a profile by its slices and requires its
  trait. The instance is made at bind, by the agent's privileged helper
  (``cyborg.privsep.mig``), at the start the bind's placement rule
  chooses (``mig_fit``), and destroyed at unbind.

Traits: ``CUSTOM_GPU_NVIDIA``, ``CUSTOM_GPU_PRODUCT_ID_<id>`` and, on VGPU
deployables, ``CUSTOM_VGPU_TYPE_<type>``.

Observed (``observe()``), a GPU gets the PCI-level checks, its link judged
on width only (GPUs lower the link speed themselves when idle), and what
NVML says (``nvml.NVMLObserver``). A GPU bound to a driver other than
``nvidia`` (``vfio-pci`` to be given whole to a VM) is invisible to NVML
on the host: the PCI level is all there is to judge.
"""

import collections
import logging
import re

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import health
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import scrub
from cyborg.accelerator.drivers import traits
from cyborg.accelerator.drivers.gpu import mig_fit
from cyborg.accelerator.drivers.gpu import mig_nvml
from cyborg.accelerator.drivers.gpu import nvml
from cyborg.conf import gpu_devices
from cyborg.device_config import mig
from cyborg.objects import inventory
from cyborg.privsep import mdev
from cyborg.privsep import mig as privsep_mig

LOG = logging.getLogger(__name__)

VENDOR_ID = '10de'
HOST_DRIVER = 'nvidia'
GPU_CLASSES = (pci.CLASS_VGA, pci.CLASS_3D)
# What a GPU of MIG instances on demand offers, in one provider.
MIG_COMPUTE_SLICE = inventory.MIG_COMPUTE_SLICE
MIG_MEMORY_SLICE = inventory.MIG_MEMORY_SLICE
MIG_MEDIA_ENGINE = inventory.MIG_MEDIA_ENGINE


def _is_gpu(function):
    return (function.vendor_id == VENDOR_ID
            and function.pci_class in GPU_CLASSES
            and not function.is_vf)


# The fields of a MIG instance's identity that are numbers; a conductor
# may keep them as decimal text, as attach handle info is.
_MIG_NUMBERS = ('start', 'gi_id', 'ci_id')
_DECIMAL = re.compile(r'0|[1-9][0-9]{0,8}', re.ASCII)


def _whole(value):
    """``value`` as an int where it is the decimal text of one; anything
    else as it is, for the privileged helper to refuse."""
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    return value


def _mig_identity(details):
    """The identity of a MIG instance as the privileged helper takes it,
    from what a bind kept (decimal text) or a prepare answered."""
    return {name: _whole(details.get(name)) if name in _MIG_NUMBERS
            else details.get(name) for name in privsep_mig.IDENTITY}


def _handle_address(handle):
    """The PCI function an MDEV or MIG attach handle is on."""
    info = handle.attach_info
    return inventory.PCIAddress(info['domain'], info['bus'], info['device'],
                                info['function'])


class NvidiaGPUDriver(base.AcceleratorDriver):
    name = 'nvidia_gpu_driver'
    device_type = 'GPU'
    link_speed_varies = True

    def __init__(self, conf, pci_reader):
        super().__init__(conf, pci_reader)
        self.nvml = nvml.NVMLObserver()
        self._mig_cards = {}  # address -> mig_nvml.MIGCard
        # {GPU address: MIG table} of the GPUs the last discovery
        # published for MIG instances on demand.
        self._mig_tables = {}
        # {GPU address: {MIG UUID: why}}: instances of binds that could
        # not be made again after the host restarted, until released.
        self._mig_unplaced = {}
        # {GPU address: {mdev UUID: why}}: mdevs of Bound ARQs that could
        # not be made again after the host restarted, until released.
        self._mdev_unplaced = {}
        self.mig_on_demand = frozenset(
            inventory.PCIAddress.parse(text)
            for text in conf.gpu_devices.mig_on_demand_addresses)
        types = gpu_devices.register_dynamic_opts(conf)
        self.vgpu_types_by_address = {}
        for type_id in types:
            group = conf[gpu_devices.vgpu_group_name(type_id)]
            for text in group.device_addresses:
                address = inventory.PCIAddress.parse(text)
                other = self.vgpu_types_by_address.setdefault(address,
                                                              type_id)
                if other != type_id:
                    raise base.DriverError(
                        '%s is configured for vGPU types %s and %s'
                        % (address, other, type_id))
        # Nova's rule: a single type without addresses is for every GPU.
        self.default_vgpu_type = (
            types[0] if len(types) == 1 and not self.vgpu_types_by_address
            else None)

    def _vgpu_type(self, function):
        configured = self.vgpu_types_by_address.get(function.address)
        if configured:
            return configured
        if self.default_vgpu_type and function.mdev_type(
                self.default_vgpu_type):
            return self.default_vgpu_type
        return None

    def discover(self):
        functions = self.pci.functions()
        by_address = base.functions_by_address(functions)
        self._mig_tables = {}
        return [self._device(gpu, by_address)
                for gpu in functions if _is_gpu(gpu)]

    def mig_free_slices(self):
        """{GPU address: (free compute slices, free memory slices, free
        media engines)} of the GPUs published for MIG instances on
        demand, as NVML holds them now. A GPU NVML cannot read, or whose
        instances its table cannot place, is left out."""
        free = {}
        for address, table in sorted(self._mig_tables.items()):
            try:
                free[address] = mig_fit.counters(
                    table, self._mig_card_at(address).placed())
            except (mig_nvml.MIGError, ValueError) as exc:
                LOG.debug('No free slices of %s: %s', address, exc)
        return free

    def _device(self, gpu, by_address):
        device = self._device_of(gpu, by_address)
        # The vGPU types a device configuration policy may ask of it:
        # those of the GPU and, with SR-IOV, of its VFs.
        offered = sorted({t.type_id
                          for member in self._members(gpu, by_address)
                          for t in member.mdev_types})
        if offered:
            device.std_board_info['mdev_types'] = offered
        return device

    @staticmethod
    def _members(gpu, by_address):
        return [gpu] + [by_address[vf] for vf in gpu.virtfns
                        if vf in by_address]

    def _device_of(self, gpu, by_address):
        members = self._members(gpu, by_address)
        slots_by_type = {}  # type -> one function per instance
        configured = False
        for member in members:
            type_id = self._vgpu_type(member)
            if type_id is None:
                continue
            configured = True
            mdev_type = member.mdev_type(type_id)
            if mdev_type is None:
                LOG.warning('%s is configured for vGPU type %s but does not '
                            'offer it', member.address, type_id)
                continue
            slots_by_type.setdefault(type_id, []).extend(
                [member] * mdev_type.total_instances)
        if not configured and gpu.address in self.mig_on_demand:
            on_demand = self._mig_on_demand_deployable(gpu)
            if on_demand is not None:
                return base.pci_device('GPU', gpu, [on_demand])
        if not configured:
            sliced = self._mig_deployables(gpu)
            if sliced is not None:
                return base.pci_device('GPU', gpu, sliced)
            return base.pci_device('GPU', gpu, [inventory.Deployable(
                name=traits.deployable_name('pgpu', gpu.address),
                num_accelerators=1,
                resource_class='PGPU',
                driver_name=self.name,
                traits=traits.device_traits('GPU', gpu),
                attach_handles=[base.pci_attach_handle(gpu.address)])])
        return base.pci_device('GPU', gpu, [
            self._vgpu_deployable(gpu, type_id, slots)
            for type_id, slots in sorted(slots_by_type.items())
            if slots])  # Placement refuses an inventory of 0

    def _mig_card(self, gpu):
        return self._mig_card_at(gpu.address)

    def _mig_card_at(self, address):
        card = self._mig_cards.get(address)
        if card is None:
            card = self._mig_cards[address] = mig_nvml.MIGCard(address)
        return card

    def _mig_on_demand_deployable(self, gpu):
        """The one deployable of a GPU whose MIG instances are made at
        bind; None (and a warning) when it cannot be one."""
        table = mig.card_of(gpu.vendor_id, gpu.device_id)
        if table is None:
            LOG.warning('%s is listed for MIG instances on demand, but no MIG '
                        'table is known for %s:%s', gpu.address,
                        gpu.vendor_id, gpu.device_id)
            return None
        try:
            remaining = self._mig_card(gpu).remaining()
        except mig_nvml.MIGError as exc:
            LOG.warning('%s is listed for MIG instances on demand, but NVML '
                        'cannot say what it can create: %s', gpu.address,
                        exc)
            return None
        creatable = sorted(name for name, count in remaining.items()
                           if count > 0)
        try:
            stranded = mig_fit.stranded(table, self._mig_card(gpu).placed())
        except (mig_nvml.MIGError, ValueError) as exc:
            LOG.warning('%s holds MIG instances its %s table cannot place, '
                        'no slices are held back from Placement: %s',
                        gpu.address, table.name, exc)
            stranded = (0, 0)
        self._mig_tables[str(gpu.address)] = table
        return inventory.Deployable(
            name=traits.deployable_name('migs', gpu.address),
            num_accelerators=table.compute_slices,
            resource_class=MIG_COMPUTE_SLICE,
            driver_name=self.name,
            traits=traits.device_traits('GPU', gpu)
            + [traits.custom('MIG_PROFILE', name) for name in creatable],
            # One slot per instance the card can hold at once: as many as
            # its compute slices.
            attach_handles=[inventory.AttachHandle('MIG', {
                **gpu.address.as_info(), 'slot': str(slot)})
                for slot in range(table.compute_slices)],
            attributes={
                inventory.EXTRA_INVENTORY + MIG_MEMORY_SLICE:
                    str(table.memory_slices),
                inventory.EXTRA_INVENTORY + MIG_MEDIA_ENGINE: '1',
                # Free slices no placement can use now: Placement must
                # not count them.
                inventory.RESERVED_INVENTORY + MIG_COMPUTE_SLICE:
                    str(stranded[0]),
                inventory.RESERVED_INVENTORY + MIG_MEMORY_SLICE:
                    str(stranded[1]),
                'mig_on_demand': table.name})

    def _mig_instances(self, gpu):
        """The MIG instances of ``gpu`` with a compute instance, or None
        when NVML cannot say it is in MIG mode."""
        try:
            return [i for i in self._mig_card(gpu).instances()
                    if i.ci_id is not None]
        except mig_nvml.MIGUnavailable:
            return None

    def _mig_deployables(self, gpu):
        instances = self._mig_instances(gpu)
        if instances is None:
            return None
        by_profile = {}
        for instance in instances:
            by_profile.setdefault(instance.profile, []).append(instance)
        return [inventory.Deployable(
            name='%s_%s' % (traits.deployable_name('mig', gpu.address),
                            profile),
            num_accelerators=len(held),
            resource_class=traits.custom('MIG', profile),
            driver_name=self.name,
            traits=traits.device_traits('GPU', gpu)
            + [traits.custom('MIG_PROFILE', profile)],
            attach_handles=[inventory.AttachHandle('MIG', {
                **gpu.address.as_info(), 'gi_id': str(i.gi_id),
                'ci_id': str(i.ci_id), 'start': str(i.start),
                'mig_uuid': i.mig_uuid}) for i in held],
            attributes={'mig_profile': profile})
            for profile, held in sorted(by_profile.items())]

    def _vgpu_deployable(self, gpu, type_id, slots):
        # Numbered per function: a function that stops offering the type
        # leaves the marks of the others, and so their handles, as they
        # were.
        numbered = collections.Counter()
        handles = []
        for member in slots:
            handles.append(inventory.AttachHandle('MDEV', {
                **member.address.as_info(),
                'asked_type': type_id,
                'vgpu_mark': '%s_%d' % (type_id, numbered[member.address])}))
            numbered[member.address] += 1
        attributes = {'vgpu_type': type_id}
        type_name = next((m.mdev_type(type_id).name for m in slots), None)
        if type_name:
            attributes['vgpu_type_name'] = type_name
        return inventory.Deployable(
            name='%s_%s' % (traits.deployable_name('vgpu', gpu.address),
                            type_id),
            num_accelerators=len(handles),
            resource_class='VGPU',
            driver_name=self.name,
            traits=traits.device_traits('GPU', gpu)
            + [traits.custom('VGPU_TYPE', type_id)],
            attach_handles=handles,
            attributes=attributes)

    def observe_vendor(self, device, address):
        findings, usage = self._observe_nvml(address)
        unplaced = {**self._mig_unplaced.get(address, {}),
                    **self._mdev_unplaced.get(address, {})}
        if unplaced:
            # Unhealthy: the conductor quarantines the GPU, so that no
            # bind lands on a card whose binds are not all there.
            findings = list(findings) + [health.Finding(
                health.UNHEALTHY, reason)
                for _, reason in sorted(unplaced.items())]
        return findings, usage

    def _observe_nvml(self, address):
        bound = self.pci_health.kernel_driver(address)
        if bound is not None and bound != HOST_DRIVER:
            return [health.Finding(
                health.HEALTHY, '%s is bound to %s: NVML cannot see it, '
                'only the PCI level is judged' % (address, bound))], {}
        return self.nvml.observe(address)

    def prepare_attach_handle(self, device, handle, uuid, request=None):
        if handle.attach_type == 'MIG':
            return self._create_mig_instance(handle, uuid, request)
        if handle.attach_type != 'MDEV':
            return None
        parent = _handle_address(handle)
        type_id = handle.attach_info['asked_type']
        with base.privileged('Cannot create mdev %s of type %s on %s'
                             % (uuid, type_id, parent)):
            mdev.create_mdev(str(parent), type_id, uuid)
        return None

    def release_attach_handle(self, device, handle, uuid, details=None):
        if handle.attach_type == 'MIG':
            return self._destroy_mig_instance(handle, uuid, details)
        if handle.attach_type != 'MDEV':
            return None
        parent = _handle_address(handle)
        type_id = handle.attach_info['asked_type']
        # Parent and type too: an mdev of this UUID made for another
        # handle is refused, not removed.
        with base.privileged('Cannot remove mdev %s of type %s on %s'
                             % (uuid, type_id, parent)):
            mdev.remove_mdev(uuid, str(parent), type_id)
        for unplaced in self._mdev_unplaced.values():
            unplaced.pop(uuid, None)
        return None

    def restore_mdev(self, attach_info, uuid):
        """Make mdev ``uuid`` of a Bound ARQ's handle (``attach_info``:
        its parent function and ``asked_type``) again after the host
        restarted: 'kept' if it is there, 'made' if made again. One that
        cannot be (its type no longer offered, the kernel refusing)
        raises DriverError, and its GPU is reported unhealthy until the
        ARQ is released: the conductor quarantines it."""
        parent = inventory.PCIAddress(attach_info['domain'],
                                      attach_info['bus'],
                                      attach_info['device'],
                                      attach_info['function'])
        type_id = attach_info['asked_type']
        function = self.pci.function(parent)
        offered = (function.mdev_type(type_id) if function is not None
                   else None)
        if offered is not None and uuid in offered.devices:
            return 'kept'
        gpu = (function.physfn or parent) if function is not None else parent
        try:
            if offered is None:
                raise base.DriverError(
                    '%s no longer offers vGPU type %s' % (parent, type_id))
            with base.privileged('Cannot make mdev %s of type %s on %s'
                                 % (uuid, type_id, parent)):
                mdev.create_mdev(str(parent), type_id, uuid)
        except base.DriverError as e:
            why = ('mdev %s of type %s on %s could not be made again after '
                   'the host restarted: %s' % (uuid, type_id, parent,
                                               e.message))
            self._mdev_unplaced.setdefault(gpu, {})[uuid] = why
            raise base.DriverError(why) from e
        return 'made'

    # Scrubs between tenants (``cyborg.accelerator.drivers.scrub``): a GPU
    # passed through whole is reset, a vGPU checked gone. MIG slots are
    # not scrubbed yet: their handles are free again once released.

    def scrub_method(self, deployable):
        kinds = {h.attach_type for h in deployable.attach_handles}
        if kinds == {'PCI'}:
            return scrub.FLR
        if kinds == {'MDEV'}:
            return scrub.MDEV_DESTROY
        return None

    def scrub_attach_handle(self, device, handle, uuid, method):
        if method == scrub.FLR and handle.attach_type == 'PCI':
            return scrub.reset_function(self.pci_health,
                                        _handle_address(handle), VENDOR_ID)
        if method == scrub.MDEV_DESTROY and handle.attach_type == 'MDEV':
            return scrub.destroy_mdev(self.pci, _handle_address(handle),
                                      handle.attach_info['asked_type'], uuid)
        return super().scrub_attach_handle(device, handle, uuid, method)

    # MIG instances on demand: made by the agent's privileged helper,
    # which chooses the start and serialises the binds of one card.

    def _create_mig_instance(self, handle, uuid, request):
        """The instance made for the bind ``request`` asks: {'mig_profile',
        'start', 'gi_id', 'ci_id', 'mig_uuid', 'creatable'}."""
        gpu = _handle_address(handle)
        if not isinstance(request, dict) or not request.get('mig_profile'):
            raise base.DriverError(
                'Cannot create a MIG instance on the GPU at %s for %s: the '
                'bind names no MIG profile (request %r)' % (gpu, uuid,
                                                            request))
        profile = request['mig_profile']
        rule = request.get('placement_rule') or mig_fit.RULES[0]
        waiting = request.get('waiting') or []
        with base.privileged('Cannot create a MIG instance of %s on the GPU '
                             'at %s for %s' % (profile, gpu, uuid)):
            made = privsep_mig.create_mig_instance(str(gpu), profile, rule,
                                                   waiting)
        LOG.info('MIG instance %s at start %s (GPU instance %s, compute '
                 'instance %s, %s) made on the GPU at %s for %s by rule %s',
                 made['mig_profile'], made['start'], made['gi_id'],
                 made['ci_id'], made['mig_uuid'], gpu, uuid, rule)
        return made

    def _destroy_mig_instance(self, handle, uuid, details):
        """Destroy the instance a prepare made (``details``, its answer):
        {'creatable'}."""
        gpu = _handle_address(handle)
        if not isinstance(details, dict):
            raise base.DriverError(
                'Cannot destroy the MIG instance of %s on the GPU at %s: the '
                'release names none (details %r)' % (uuid, gpu, details))
        return self.destroy_mig_instance(gpu, details, uuid)

    def destroy_mig_instance(self, gpu, details, owner):
        """Destroy the instance ``details`` names on the GPU at ``gpu``
        (a PCIAddress), made for ``owner`` (for the log): {'creatable'}."""
        identity = _mig_identity(details)
        unplaced = self._mig_unplaced.get(gpu, {})
        if identity['mig_uuid'] in unplaced:
            # Never made again after the restart: its GI id may name
            # another instance now. Released, the card no longer misses
            # it.
            self._mig_unplaced[gpu] = {
                u: why for u, why in unplaced.items()
                if u != identity['mig_uuid']}
            LOG.info('MIG instance %s of %s on the GPU at %s was not made '
                     'again after the host restarted: nothing to destroy',
                     identity['mig_uuid'], owner, gpu)
            return {'creatable': self._mig_creatable(gpu)}
        with base.privileged('Cannot destroy MIG instance %s of %s on the '
                             'GPU at %s' % (identity.get('mig_uuid'), owner,
                                            gpu)):
            done = privsep_mig.destroy_mig_instance(str(gpu), identity)
        if not done['destroyed']:
            LOG.info('MIG instance %s of %s on the GPU at %s was gone '
                     'already', identity['mig_uuid'], owner, gpu)
        return {'creatable': done['creatable'],
                'stranded': done.get('stranded')}

    def _mig_creatable(self, gpu):
        return sorted(name for name, count in
                      self._mig_card_at(gpu).remaining().items() if count > 0)

    def restore_mig_instances(self, gpu, wanted, spared):
        """Put the on-demand GPU at ``gpu`` (a PCIAddress) back as its
        binds left it, once its host restarted: the instances ``wanted``
        (the details kept by Bound ARQs) made again where they are gone,
        ``spared`` ones (binds and releases in progress) left alone,
        every other instance destroyed. The privileged helper's answer
        (``cyborg.privsep.mig.restore_mig_instances``). An instance that
        cannot be made again marks the GPU unhealthy until its bind is
        released."""
        with base.privileged('Cannot restore the MIG instances of the GPU '
                             'at %s' % gpu):
            done = privsep_mig.restore_mig_instances(
                str(gpu), [_mig_identity(d) for d in wanted],
                [_mig_identity(d) for d in spared])
        self._mig_unplaced[gpu] = {
            failed['identity']['mig_uuid']: (
                'MIG instance %s of a bound accelerator request could not '
                'be made again at start %s after the host restarted: %s'
                % (failed['identity']['mig_profile'],
                   failed['identity']['start'], failed['reason']))
            for failed in done['failed']}
        return done
