"""The MIG stand-in for a process of its own: a playbook's module, which
loads the NVML that ``[device_config] nvml_library`` names.

``write(directory, stand_in)`` leaves in ``directory`` the state of the
GPUs of ``stand_in`` (``MIGCapableNVML.state()``) and ``nvml.py``, a
file to name as the NVML library: its ``install(pynvml)`` builds a
stand-in from the recording with that state, puts it under the bindings
and writes the state back after each call that changes a GPU, as a card
keeps its instances whoever made them. ``read(directory, stand_in)``
then gives the test's own stand-in what the other process left.
"""

import json
import os
import pathlib

from tests.unit.drivers.trees import recorded

STATE = 'mig-state.json'
LIBRARY = 'nvml.py'
# The entry points after which the GPUs hold something else.
CHANGING = ('nvmlDeviceCreateGpuInstanceWithPlacement',
            'nvmlDeviceCreateGpuInstance', 'nvmlGpuInstanceDestroy',
            'nvmlGpuInstanceCreateComputeInstance',
            'nvmlComputeInstanceDestroy', 'nvmlDeviceSetMigMode')

_REPOSITORY = pathlib.Path(__file__).resolve().parents[3]

_SHIM = '''\
import sys
sys.path.insert(0, {repository!r})
from tests.unit.drivers import nvml_mig_replay


def install(pynvml):
    nvml_mig_replay.install(pynvml, {state!r})
'''


def write(directory, stand_in):
    """The path of the library file to give a playbook."""
    directory = pathlib.Path(directory)
    state = directory / STATE
    state.write_text(json.dumps(stand_in.state()))
    library = directory / LIBRARY
    library.write_text(_SHIM.format(repository=str(_REPOSITORY),
                                    state=str(state)))
    os.chmod(library, 0o644)
    return str(library)


def read(directory, stand_in):
    stand_in.restore(json.loads((pathlib.Path(directory) / STATE)
                                .read_text()))


def install(pynvml, state_path):
    from tests.unit.drivers import nvml_mig_standin

    with open(state_path) as f:
        state = json.load(f)
    library = nvml_mig_standin.MIGCapableNVML(
        recorded.recording('h100-vm', 'nvml-record.jsonl'))
    library.restore(state)

    def kept(name):
        entry = getattr(library, name)

        def call(*args):
            status = entry(*args)
            with open(state_path, 'w') as f:
                json.dump(library.state(), f)
            return status
        return call

    for name in CHANGING:
        setattr(library, name, kept(name))
    pynvml.nvmlLib = library
    pynvml._nvmlGetFunctionPointer_cache = {}
    return library
