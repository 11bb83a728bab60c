"""tools/install_stamp.py: a warm quickstart installs nothing, and any
change that an install would pick up installs again."""

import json
import pathlib
import subprocess
import sys

import pytest

from tests import script_module

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'install_stamp.py'
EXTRAS = 'all-in-one'


def load():
    return script_module.load(SCRIPT)


install_stamp = load()


def installed(venv, checkout, editable=True, version='1.0.0.dev3'):
    """What ``pip install -e <checkout>`` leaves in ``venv``."""
    dist = venv / 'lib' / 'python3.11' / 'site-packages' / (
        'cyborg-%s.dist-info' % version)
    dist.mkdir(parents=True)
    (dist / 'direct_url.json').write_text(json.dumps(
        {'url': checkout.resolve().as_uri(),
         'dir_info': {'editable': editable}}))
    return dist


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / 'cyborg'
    root.mkdir()
    (root / 'setup.cfg').write_text('[metadata]\nname = cyborg\n')
    (root / 'setup.py').write_text('import setuptools\n')
    (root / 'requirements.txt').write_text('pecan>=1.5.0\n')
    return root


@pytest.fixture
def venv(tmp_path, checkout):
    root = tmp_path / 'venv'
    (root / 'bin').mkdir(parents=True)
    (root / 'bin' / 'cyborg-all-in-one').write_text('#!/bin/sh\n')
    (root / 'pyvenv.cfg').write_text('version = 3.11.7\n')
    installed(root, checkout)
    return root


def test_a_fresh_venv_installs_and_then_is_current(checkout, venv):
    assert not install_stamp.is_current(checkout, venv, EXTRAS)
    install_stamp.write(checkout, venv, EXTRAS)
    assert install_stamp.is_current(checkout, venv, EXTRAS)

    # The code is installed editable: changing it needs no install.
    (checkout / 'cyborg').mkdir()
    (checkout / 'cyborg' / 'api.py').write_text('changed = True\n')
    assert install_stamp.is_current(checkout, venv, EXTRAS)


@pytest.mark.parametrize('change', [
    'requirements.txt', 'setup.cfg', 'setup.py', 'pyproject.toml',
    'pyvenv.cfg', 'extras', 'console script', 'not editable',
    'other checkout', 'uninstalled'])
def test_what_an_install_picks_up_installs_again(checkout, venv, tmp_path,
                                                 change):
    install_stamp.write(checkout, venv, EXTRAS)
    extras = EXTRAS
    dist = next(venv.glob('lib/python*/site-packages/cyborg-*.dist-info'))
    if change in ('requirements.txt', 'setup.cfg', 'setup.py',
                  'pyproject.toml'):
        path = checkout / change
        path.write_text((path.read_text() if path.exists() else '')
                        + '# changed\n')
    elif change == 'pyvenv.cfg':
        (venv / 'pyvenv.cfg').write_text('version = 3.12.1\n')
    elif change == 'extras':
        extras = 'all-in-one,nvidia'
    elif change == 'console script':
        (venv / 'bin' / 'cyborg-all-in-one').unlink()
    elif change == 'not editable':
        (dist / 'direct_url.json').unlink()
        dist.rmdir()
        installed(venv, checkout, editable=False)
    elif change == 'other checkout':
        (dist / 'direct_url.json').unlink()
        dist.rmdir()
        other = tmp_path / 'other'
        other.mkdir()
        installed(venv, other)
    else:
        (dist / 'direct_url.json').unlink()
        dist.rmdir()

    assert not install_stamp.is_current(checkout, venv, extras)


def test_the_command_line(tmp_path):
    # The real checkout, as tools/quickstart.sh runs it.
    venv = tmp_path / 'venv'

    def run(*args):
        return subprocess.run([sys.executable, str(SCRIPT), *args],
                              capture_output=True, text=True, timeout=60)

    assert run('check', str(venv), EXTRAS).returncode == 1
    venv.mkdir()
    (venv / 'bin').mkdir()
    (venv / 'bin' / 'cyborg-all-in-one').write_text('#!/bin/sh\n')
    installed(venv, REPO)
    assert run('write', str(venv), EXTRAS).returncode == 0
    assert run('check', str(venv), EXTRAS).returncode == 0
    assert run('check', str(venv), 'nvidia').returncode == 1
    assert run('check').returncode == 2
