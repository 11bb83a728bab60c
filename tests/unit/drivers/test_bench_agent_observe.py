"""tools/bench/agent_observe.py runs on the trees of the repository and
says what it measured (its numbers are not checked: no timing here)."""

import pathlib

from tests import script_module

REPO = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = REPO / 'tools' / 'bench' / 'agent_observe.py'


def load_bench():
    return script_module.load(SCRIPT)


def test_bench_observes_every_tree(capsys):
    assert load_bench().main(['--passes', '2', '--warmup', '1']) == 0
    rows = {line.split()[0]: line.split()
            for line in capsys.readouterr().out.splitlines()}
    # Devices, then six figures, then the states of the last pass: the
    # H100 answered by the NVML stand-in, the golden U50 at the PCI level.
    assert rows['h100-vm'][1] == '1' and rows['h100-vm'][8] == 'healthy:1'
    assert rows['u50-golden'][1] == '1'
    assert rows['u50-golden'][8] == 'healthy:1'
    assert rows['mixed'][1] == '20'
    assert rows['mixed'][8] == 'healthy:20'
    assert 'h100-vm:' in rows and rows['h100-vm:'][1] == 'nvidia_gpu_driver'
