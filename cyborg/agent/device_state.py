"""What a PCI device holds now, as the device configuration pairs read it,
without changing anything.

From sysfs: the kernel driver and ``driver_override`` (``driver_binding``),
``sriov_numvfs`` and ``sriov_totalvfs`` (``sriov_vfs``), the mdev types of
the device and its VFs, and the vGPU type each VF holds where VFs take one
themselves (``vgpu_type``). For NVIDIA GPUs, the MIG mode through NVML,
by read-only calls only (start, find the GPU, read the mode, shut down):
without the bindings or a driver it says why there is no NVML.
"""

import importlib
import os

from cyborg.accelerator.drivers.gpu import nvml as nvml_observer

NVIDIA = '10de'
NVML_MODULE = 'pynvml'


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _vf_vgpu_types(reader, function):
    """{VF: type number held, 0 for none} and the type numbers the free
    VFs can still take, where the VFs take a type themselves."""
    held, creatable = {}, set()
    for vf in function.virtfns:
        directory = os.path.join(reader.function_dir(vf), 'nvidia')
        current = _read(os.path.join(directory, 'current_vgpu_type'))
        if current is None or not current.isdigit():
            continue
        held[str(vf)] = int(current)
        if not int(current):
            listed = _read(os.path.join(directory, 'creatable_vgpu_types'))
            for line in (listed or '').splitlines():
                number = line.split(':', 1)[0].strip()
                if number.isdigit():
                    creatable.add(int(number))
    return held, creatable


def read(reader, address, mig_modes=None):
    """{name: value} of what the function at ``address`` holds now,
    through ``reader`` (a ``pci.PCIReader``); None if it is gone. Only
    what applies is there."""
    function = reader.function(address)
    if function is None:
        return None
    override = _read(os.path.join(reader.function_dir(address),
                                  'driver_override'))
    state = {'driver': function.kernel_driver,
             'driver_override': None if override in (None, '', '(null)')
             else override}
    if function.sriov_totalvfs is not None:
        state['sriov_numvfs'] = function.sriov_numvfs
        state['sriov_totalvfs'] = function.sriov_totalvfs
    held, creatable = _vf_vgpu_types(reader, function)
    if held:
        state['vf_vgpu_types'] = {vf: 'nvidia-%d' % n if n else None
                                  for vf, n in held.items()}
        state['creatable_vgpu_types'] = ['nvidia-%d' % n
                                         for n in sorted(creatable)]
    else:
        mdev_types = {t.type_id for f in [function] + [
            reader.function(vf) for vf in function.virtfns] if f
            for t in f.mdev_types}
        if mdev_types:
            state['mdev_types'] = sorted(mdev_types)
    if mig_modes is not None and function.vendor_id == NVIDIA:
        state['mig_mode'] = mig_modes.read(str(address))
    return state


class MIGModes:
    """The MIG mode of NVIDIA GPUs through NVML, started once on first
    use and shut down on leaving; read-only calls only."""

    def __init__(self, module_name=None):
        self._module_name = module_name or NVML_MODULE
        self._nvml = None
        self._unavailable = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None

    def _start(self):
        if self._nvml is not None or self._unavailable is not None:
            return
        try:
            nvml = importlib.import_module(self._module_name)
        except ImportError:
            self._unavailable = 'no NVML: %s' % nvml_observer.NOT_INSTALLED
            return
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            self._unavailable = 'no NVML: it cannot start: %s' % e
            return
        self._nvml = nvml

    def read(self, address):
        """'on', 'off' (with ', on after a reset' or ', off after a
        reset' where a change is pending), or why it cannot be read."""
        self._start()
        if self._unavailable is not None:
            return self._unavailable
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(address)
            current, pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_NOT_SUPPORTED:
                return 'not supported'
            return 'unknown: NVML: %s' % e
        on = nvml.NVML_DEVICE_MIG_ENABLE
        text = 'on' if current == on else 'off'
        if pending != current:
            text += ', %s after a reset' % ('on' if pending == on else 'off')
        return text
