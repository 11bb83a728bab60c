"""tools/accel-observe, run as an operator runs it, on the recorded H100
tree: with only PYTHONPATH pointing at the checkout."""

import json
import os
import pathlib
import subprocess
import sys

from cyborg.accelerator.drivers.gpu import nvml

REPO = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = REPO / 'tools' / 'accel-observe'


def run(*args, extra_path=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [*map(str, extra_path), str(REPO)]))
    result = subprocess.run([sys.executable, str(SCRIPT), *args],
                            capture_output=True, text=True, env=env,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_script_prints_the_recorded_h100_and_its_health(h100_tree):
    out = run('--sysfs-root', h100_tree, '--rounds', '2', '--interval', '0')
    lines = out.splitlines()
    assert lines[0] == 'Host tree: %s' % h100_tree
    assert 'nvidia_gpu_driver: 1 device(s)' in lines
    assert ('  GPU 0000:00:06.0 10de:2330 2330; pgpu_0000:00:06.0 '
            '(PGPU x1)') in lines
    observed = [line for line in lines
                if line.startswith('  0000:00:06.0 ')]
    # No NVIDIA driver here: NVML cannot tell, the PCI level can.
    assert len(observed) == 2
    assert all(line.startswith('  0000:00:06.0 unknown [nvidia_gpu_driver]:'
                               ' NVML cannot start: ')
               or line.startswith('  0000:00:06.0 unknown [nvidia_gpu_dri'
                                  'ver]: NVML does not see')
               for line in observed), observed
    assert '    pcie_link_gts=32.0 pcie_link_width=16' in lines


def test_script_json_without_the_nvml_bindings(h100_tree, tmp_path):
    hidden = tmp_path / 'hide'
    hidden.mkdir()
    (hidden / 'pynvml.py').write_text('raise ImportError("hidden")\n')
    document = json.loads(run('--sysfs-root', h100_tree, '--rounds', '1',
                              '--json', extra_path=[hidden]))
    [driver] = document['drivers']
    assert driver['name'] == 'nvidia_gpu_driver'
    [device] = driver['devices']
    assert device['controlpath_info'] == {
        'domain': '0000', 'bus': '00', 'device': '06', 'function': '0'}
    assert device['std_board_info']['subsystem_product_id'] == '16c1'
    [round_] = document['rounds']
    [observation] = round_['observations']
    assert observation['state'] == 'unknown'
    assert observation['reason'] == nvml.NOT_INSTALLED
    assert observation['usage'] == {'pcie_link_gts': 32.0,
                                    'pcie_link_width': 16}


def test_script_on_a_tree_with_nothing(tmp_path):
    out = run('--sysfs-root', str(tmp_path), '--rounds', '1')
    assert 'No accelerator found by: ' in out
