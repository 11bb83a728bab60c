"""The documentation and the release notes build with warnings as errors,
as ``tox -e docs`` and ``tox -e releasenotes`` build them.

Built here too so that a change that breaks a page (a renamed option, a
moved sample, a bad reference) fails the test suite, not just a docs job.
"""

import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize('source', ['doc/source', 'releasenotes/source'])
def test_builds_without_warnings(tmp_path, source):
    done = subprocess.run(
        [sys.executable, '-m', 'sphinx', '-E', '-W', '--keep-going', '-q',
         '-b', 'html', str(REPO / source), str(tmp_path / 'html')],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False)

    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / 'html' / 'index.html').is_file()
