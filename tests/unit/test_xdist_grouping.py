"""The suite's distribution (``tools/run-tests.sh``: ``--dist loadgroup``)
keeps an xdist group on one worker with the pytest and pytest-xdist
installed: otherwise each worker running a Nova test starts a Nova of its
own (see ``tests/functional/nova/conftest.py``)."""

import subprocess
import sys

MODULE = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group('together')


@pytest.mark.parametrize('n', range(4))
def test_{name}(n):
    print('worker', os.environ['PYTEST_XDIST_WORKER'])
'''


def test_one_group_runs_on_one_worker(tmp_path):
    for name in ('first', 'second'):
        (tmp_path / ('test_%s.py' % name)).write_text(MODULE.format(
            name=name))
    (tmp_path / 'test_alone.py').write_text(
        'import pytest\n\n\n@pytest.mark.parametrize("n", range(8))\n'
        'def test_alone(n):\n    pass\n')

    done = subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', '-n', '2',
         '--dist', 'loadgroup', '-v', '-s', str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    # Lines such as "[gw1] [ 10%] PASSED test_first.py::test_first[0]@together"
    grouped = [line for line in done.stdout.splitlines()
               if '@together' in line and 'PASSED' in line]
    assert len(grouped) == 8, done.stdout
    assert len({line.split()[0] for line in grouped}) == 1, grouped
