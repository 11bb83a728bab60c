"""python-openstackclient 10.5 in a virtual environment of its own.

From 10.4 on, python-openstackclient ships ``openstack accelerator ...``
commands itself (on openstacksdk's accelerator proxy); they clash with
python-cyborgclient's, which the test venv pairs with OSC 10.3. So OSC 10.5
lives apart, in ``$CYBORG_OSC_VENV`` (default ``/tmp/cyborg-osc-10.5-venv``),
installed from the package index on first use (``REQUIREMENTS`` only; the
time it took is logged and kept in ``<venv>/install-seconds``) and reused
after. An exclusive lock on ``<venv>.lock`` keeps parallel pytest workers
from installing it twice; a venv without the ready marker (an install that
died half way) is made again from scratch.

Use::

    from tests.functional.clients import osc_venv

    openstack = osc_venv.ensure()        # path of <venv>/bin/openstack

or bind the session fixture in a test module::

    osc_native = osc_venv.osc_native     # the same path, once per session
"""

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import time

import pytest

LOG = logging.getLogger(__name__)

REQUIREMENTS = ('python-openstackclient==10.5.0',)
VENV = os.environ.get('CYBORG_OSC_VENV') or '/tmp/cyborg-osc-10.5-venv'
READY = '.cyborg-osc-ready'
INSTALL_TIMEOUT = 900


def clean_env(**extra):
    """This process's environment without the test venv's Python
    settings nor any ``OS_*`` cloud setting."""
    env = {key: value for key, value in os.environ.items()
           if key not in ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV')
           and not key.startswith('OS_')}
    env.update(extra)
    return env


def _run(argv, what, timeout):
    done = subprocess.run(argv, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=clean_env(), check=False)
    if done.returncode:
        raise RuntimeError('%s failed (exit %d): %s\n%s' % (
            what, done.returncode, ' '.join(argv), done.stdout[-4000:]))
    return done.stdout


@contextlib.contextmanager
def _exclusive(path):
    with open(path, 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def executable(venv=VENV):
    return os.path.join(venv, 'bin', 'openstack')


def install_seconds(venv=VENV):
    """How long the install of ``venv`` took, or None if unknown."""
    try:
        with open(os.path.join(venv, 'install-seconds')) as kept:
            return float(kept.read())
    except (OSError, ValueError):
        return None


def ensure(venv=VENV):
    """The ``openstack`` executable of ``venv``, installing it first
    unless an earlier install of the same requirements finished."""
    wanted = '\n'.join(REQUIREMENTS)
    marker = os.path.join(venv, READY)
    os.makedirs(os.path.dirname(os.path.abspath(venv)), exist_ok=True)
    with _exclusive(venv + '.lock'):
        try:
            with open(marker) as ready:
                if ready.read() == wanted:
                    return executable(venv)
        except FileNotFoundError:
            pass
        started = time.monotonic()
        LOG.warning('Installing %s into %s (once per machine)',
                    ', '.join(REQUIREMENTS), venv)
        # Whatever is there is a half-made or outdated venv.
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, '-m', 'venv', venv],
             'Creating the python-openstackclient venv', 120)
        _run([os.path.join(venv, 'bin', 'python'), '-m', 'pip', 'install',
              '--quiet', *REQUIREMENTS],
             'Installing python-openstackclient', INSTALL_TIMEOUT)
        seconds = time.monotonic() - started
        with open(os.path.join(venv, 'install-seconds'), 'w') as out:
            out.write('%.1f\n' % seconds)
        with open(marker, 'w') as out:
            out.write(wanted)
        LOG.warning('Installed %s into %s in %.1f s',
                    ', '.join(REQUIREMENTS), venv, seconds)
        return executable(venv)


@pytest.fixture(scope='session')
def osc_native():
    """Path of python-openstackclient 10.5's ``openstack``."""
    started = time.monotonic()
    openstack = ensure()
    LOG.warning('%s from %s (waited %.1f s; the install took %s s)',
                ', '.join(REQUIREMENTS), openstack,
                time.monotonic() - started, install_seconds())
    return openstack
