"""tools/nvml_mig_readout.py on the MIG stand-in through the real NVML
bindings: what it reads, that it agrees with the service's table, that it
reports a difference, and that it changes nothing on the card."""

import ctypes
import json
import pathlib
import sys

import pynvml
import pytest

from cyborg.device_config import mig
from tests import script_module

REPO = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = REPO / 'tools' / 'nvml_mig_readout.py'
H100 = '0000:00:06.0'


@pytest.fixture(scope='module')
def readout():
    return script_module.load(SCRIPT)


def run(readout, monkeypatch, capsys):
    monkeypatch.setattr(sys, 'argv', ['nvml_mig_readout.py', '--compare'])
    readout.main()
    return json.loads(capsys.readouterr().out)['gpus']


def test_an_h100_in_mig_mode_reads_as_the_table_says(
        readout, mig_nvml, monkeypatch, capsys):
    library = mig_nvml()
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(H100)
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, 9, ctypes.byref(pynvml.c_nvmlGpuInstancePlacement_t(4, 4)))
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    finally:
        pynvml.nvmlShutdown()
    library.calls.clear()

    [gpu] = run(readout, monkeypatch, capsys)

    assert (gpu['vendor_id'], gpu['product_id']) == ('10de', '2330')
    assert gpu['pci_address'].lower() == '00000000:00:06.0'
    assert gpu['mig_mode'] == {'current': 1, 'pending': 1}
    by_name = {p['name']: p for p in gpu['profiles'].values()}
    assert by_name['MIG 3g.40gb']['placements'] == [[0, 4], [4, 4]]
    assert by_name['MIG 3g.40gb']['remaining'] == 1
    assert by_name['MIG 3g.40gb']['instances'] == [
        {'gi_id': 1, 'start': 4, 'size': 4}]
    assert by_name['MIG 1g.10gb']['placements'] == [[s, 1] for s in range(7)]
    assert gpu['differences_from_table'] == []
    # Read-only: nothing was created, destroyed or switched.
    assert not [c for c in library.calls
                if 'Create' in c or 'Destroy' in c or 'Set' in c]


def test_a_table_that_differs_is_reported(readout, mig_nvml, monkeypatch,
                                          capsys):
    mig_nvml()
    wrong = mig.Card('NVIDIA H100 80GB', 8, 7, tuple(
        mig.Profile('3g.40gb', 9, 2, 4, 3, (0, 2)) if p.name == '3g.40gb'
        else p for p in mig.H100_80GB.profiles))
    monkeypatch.setitem(mig.CARDS, ('10de', '2330'), wrong)

    [gpu] = run(readout, monkeypatch, capsys)

    assert gpu['differences_from_table'] == [
        '3g.40gb: NVML starts [0, 4], the table [0, 2]']


def test_mig_disabled_reads_the_profiles_and_no_placements(
        readout, mig_nvml, monkeypatch, capsys):
    mig_nvml(mig_enabled=False)

    [gpu] = run(readout, monkeypatch, capsys)

    assert gpu['mig_mode'] == {'current': 0, 'pending': 0}
    assert len(gpu['profiles']) == 7
    assert all(isinstance(p['placements'], str)
               for p in gpu['profiles'].values())
