"""A virtual environment installed once per machine, under a lock.

The services and clients the tests run that cannot share the test venv
(their pins differ: Glance, Keystone, python-openstackclient 10.5) each
live in a venv of their own, installed from the package index on first use
and reused after. ``ensure`` does that for all of them:

- an exclusive lock on ``<venv>.lock`` keeps parallel test workers from
  installing the same venv twice;
- a marker file in the venv (``ready_name``) holds ``ready_text`` (the
  requirements, by default) once an install finished; a venv whose marker
  is missing or says something else is installed again (``fresh=True``
  removes what is there first, else only ``pip install`` runs again);
- ``prepare(venv)``, if given, runs after ``pip install`` and before the
  marker is written (a template database, say);
- the seconds it took are logged and kept in ``<venv>/install-seconds``.

Use::

    from tests import cached_venv

    took = cached_venv.ensure(VENV, ('glance==33.0.0',), '.glance-ready',
                              'Glance', prepare=_build_template)
    took.install, took.prepare          # 0.0, 0.0 when it was ready
"""

import contextlib
import dataclasses
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import time

LOG = logging.getLogger(__name__)

INSTALL_TIMEOUT = 900
CREATE_TIMEOUT = 120


@dataclasses.dataclass
class Took:
    """Seconds an ``ensure`` spent: venv and ``pip install``, ``prepare``."""
    install: float = 0.0
    prepare: float = 0.0

    @property
    def total(self):
        return self.install + self.prepare


def clean_env(**extra):
    """This process's environment without the test venv's Python settings
    nor any ``OS_*`` cloud setting, plus ``extra``."""
    env = {key: value for key, value in os.environ.items()
           if key not in ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV')
           and not key.startswith('OS_')}
    env.update(extra)
    return env


def run(argv, what, timeout, env=None):
    """Runs ``argv``; its output, or RuntimeError naming ``what`` with the
    tail of the output when it fails."""
    result = subprocess.run(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            timeout=timeout, env=env, check=False)
    if result.returncode:
        raise RuntimeError('%s failed (exit %d): %s\n%s' % (
            what, result.returncode, ' '.join(argv), result.stdout[-4000:]))
    return result.stdout


@contextlib.contextmanager
def locked(path):
    """An exclusive ``flock`` on ``path`` (made if missing)."""
    with open(path, 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def python(venv):
    return os.path.join(venv, 'bin', 'python')


def install_seconds(venv):
    """How long the last install of ``venv`` took, or None if unknown."""
    try:
        with open(os.path.join(venv, 'install-seconds')) as kept:
            return float(kept.read())
    except (OSError, ValueError):
        return None


def ensure(venv, requirements, ready_name, what, ready_text=None,
           env=None, fresh=False, prepare=None,
           install_timeout=INSTALL_TIMEOUT):
    """Install ``requirements`` into ``venv`` unless an earlier install
    finished (its marker ``ready_name`` holds ``ready_text``).

    ``what`` names the software in logs and errors; ``env`` is the
    environment of the installing processes (``clean_env()`` by default).
    Returns a ``Took``, zeros when the venv was ready.
    """
    if ready_text is None:
        ready_text = '\n'.join(requirements)
    if env is None:
        env = clean_env()
    marker = os.path.join(venv, ready_name)
    os.makedirs(os.path.dirname(os.path.abspath(venv)), exist_ok=True)
    with locked(venv + '.lock'):
        try:
            with open(marker) as existing:
                if existing.read() == ready_text:
                    return Took()
        except FileNotFoundError:
            pass
        started = time.monotonic()
        LOG.warning('Installing %s into %s (once per machine)',
                    ', '.join(requirements), venv)
        if fresh:
            # Whatever is there is a half-made or outdated venv.
            shutil.rmtree(venv, ignore_errors=True)
        if not os.path.exists(python(venv)):
            run([sys.executable, '-m', 'venv', venv],
                'Creating the %s venv' % what, CREATE_TIMEOUT, env=env)
        run([python(venv), '-m', 'pip', 'install', '--quiet',
             *requirements], 'Installing %s' % what, install_timeout,
            env=env)
        took = Took(install=time.monotonic() - started)
        if prepare is not None:
            prepare(venv)
            took.prepare = time.monotonic() - started - took.install
        with open(os.path.join(venv, 'install-seconds'), 'w') as out:
            out.write('%.1f\n' % took.total)
        with open(marker, 'w') as out:
            out.write(ready_text)
        LOG.warning('%s ready in %s: install %.1f s, prepare %.1f s',
                    what, venv, took.install, took.prepare)
        return took
