#!/usr/bin/env python3
"""Read a host's MIG tables through NVML, changing nothing, and compare
them with the table the service knows (``cyborg.device_config.mig``).

For each NVIDIA GPU: its name, PCI ids and MIG mode; for each GPU-instance
profile index the card answers, NVML's profile info (id, slices, instance
count, memory, SMs); where MIG is enabled, the possible placements and the
remaining capacity of each profile, and the instances that exist. Only
read-only NVML calls are made: no MIG mode change, no instance created or
destroyed, no reset.

Prints one JSON document; with ``--compare``, also the differences from
the service's table for cards it knows. Needs the ``pynvml`` bindings
(nvidia-ml-py) and an NVIDIA driver.

    python3 tools/nvml_mig_readout.py --compare
"""

import argparse
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from cyborg.device_config import mig


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _attempt(function, *args):
    """(value, None) or (None, NVML's error text)."""
    import pynvml
    try:
        return function(*args), None
    except pynvml.NVMLError as e:
        return None, str(e)


def _profiles(pynvml, handle):
    found = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info, error = _attempt(pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                               handle, index)
        if error is not None:
            continue
        found[index] = {
            'id': info.id, 'name': _text(info.name),
            'slice_count': info.sliceCount,
            'instance_count': info.instanceCount,
            'memory_mib': info.memorySizeMB,
            'multiprocessors': info.multiprocessorCount,
            'copy_engines': info.copyEngineCount,
            'decoders': info.decoderCount, 'encoders': info.encoderCount,
            'jpeg': info.jpegCount, 'ofa': info.ofaCount}
    return found


def _placements(pynvml, handle, profile_id):
    placements = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
    count = ctypes.c_uint(16)
    _, error = _attempt(pynvml.nvmlDeviceGetGpuInstancePossiblePlacements,
                        handle, profile_id, placements, ctypes.byref(count))
    if error is not None:
        return error
    return [[placements[i].start, placements[i].size]
            for i in range(count.value)]


def _instances(pynvml, handle, profile_id):
    instances = (pynvml.c_nvmlGpuInstance_t * 8)()
    count = ctypes.c_uint(0)
    _, error = _attempt(pynvml.nvmlDeviceGetGpuInstances, handle, profile_id,
                        instances, ctypes.byref(count))
    if error is not None:
        return error
    found = []
    for i in range(count.value):
        info, error = _attempt(pynvml.nvmlGpuInstanceGetInfo, instances[i])
        found.append(error if error else {
            'gi_id': info.id, 'start': info.placement.start,
            'size': info.placement.size})
    return found


def read_gpu(pynvml, index):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    device_id = '%08x' % pci.pciDeviceId
    gpu = {'index': index, 'name': _text(pynvml.nvmlDeviceGetName(handle)),
           'pci_address': _text(pci.busId),
           'vendor_id': device_id[4:], 'product_id': device_id[:4]}
    mode, error = _attempt(pynvml.nvmlDeviceGetMigMode, handle)
    gpu['mig_mode'] = error or {'current': mode[0], 'pending': mode[1]}
    gpu['profiles'] = profiles = _profiles(pynvml, handle)
    for info in profiles.values():
        info['placements'] = _placements(pynvml, handle, info['id'])
        info['remaining'] = _attempt(
            pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, handle,
            info['id'])[0]
        info['instances'] = _instances(pynvml, handle, info['id'])
    return gpu


def compare(gpu):
    """Sentences on how NVML's answer differs from the service's table of
    this card, or None where the service has no table for it."""
    card = mig.card_of(gpu['vendor_id'], gpu['product_id'])
    if card is None:
        return None
    differences = []
    by_id = {p['id']: p for p in gpu['profiles'].values()}
    for profile in card.profiles:
        seen = by_id.get(profile.gi_profile_id)
        if seen is None:
            differences.append('%s (GI profile %d): not offered by NVML'
                               % (profile.name, profile.gi_profile_id))
            continue
        if seen['instance_count'] != profile.max_instances:
            differences.append('%s: NVML offers %d instances, the table %d'
                               % (profile.name, seen['instance_count'],
                                  profile.max_instances))
        if isinstance(seen['placements'], list):
            starts = sorted(s for s, _ in seen['placements'])
            sizes = {size for _, size in seen['placements']}
            if starts != sorted(profile.starts):
                differences.append('%s: NVML starts %s, the table %s' % (
                    profile.name, starts, list(profile.starts)))
            if sizes - {profile.memory_slices}:
                differences.append('%s: NVML sizes %s, the table %d' % (
                    profile.name, sorted(sizes), profile.memory_slices))
    return differences


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--compare', action='store_true',
                        help="also compare with the service's MIG tables")
    args = parser.parse_args()
    import pynvml
    pynvml.nvmlInit()
    try:
        gpus = [read_gpu(pynvml, i)
                for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()
    if args.compare:
        for gpu in gpus:
            gpu['differences_from_table'] = compare(gpu)
    json.dump({'gpus': gpus}, sys.stdout, indent=1, default=str)
    print()


if __name__ == '__main__':
    main()
