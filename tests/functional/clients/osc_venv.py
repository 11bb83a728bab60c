"""python-openstackclient 10.5 in a virtual environment of its own.

From 10.4 on, python-openstackclient ships ``openstack accelerator ...``
commands itself (on openstacksdk's accelerator proxy); they clash with
python-cyborgclient's, which the test venv pairs with OSC 10.3. So OSC 10.5
lives apart, in ``$CYBORG_OSC_VENV`` (default ``/tmp/cyborg-osc-10.5-venv``),
installed from the package index on first use (``REQUIREMENTS`` only; the
time it took is logged and kept in ``<venv>/install-seconds``) and reused
after (``tests.cached_venv``: an exclusive lock on ``<venv>.lock`` keeps
parallel pytest workers from installing it twice; a venv without the ready
marker, an install that died half way, is made again from scratch).

Use::

    from tests.functional.clients import osc_venv

    openstack = osc_venv.ensure()        # path of <venv>/bin/openstack

or bind the session fixture in a test module::

    osc_native = osc_venv.osc_native     # the same path, once per session
"""

import logging
import os
import time

import pytest

from tests import cached_venv

LOG = logging.getLogger(__name__)

REQUIREMENTS = ('python-openstackclient==10.5.0',)
VENV = os.environ.get('CYBORG_OSC_VENV') or '/tmp/cyborg-osc-10.5-venv'
READY = '.cyborg-osc-ready'

clean_env = cached_venv.clean_env


def executable(venv=VENV):
    return os.path.join(venv, 'bin', 'openstack')


def install_seconds(venv=VENV):
    """How long the install of ``venv`` took, or None if unknown."""
    return cached_venv.install_seconds(venv)


def ensure(venv=VENV):
    """The ``openstack`` executable of ``venv``, installing it first
    unless an earlier install of the same requirements finished."""
    cached_venv.ensure(venv, REQUIREMENTS, READY, 'python-openstackclient',
                       fresh=True)
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
