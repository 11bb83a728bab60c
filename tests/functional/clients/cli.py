"""Running ``openstack accelerator ...`` against the served API.

keystoneauth's ``none`` plugin points the CLI at the API directly, as an
operator without Keystone would run it. Each CLI start costs seconds, so
independent commands can run side by side.
"""

import json
import subprocess

from tests.functional.clients.conftest import VENV_BIN

TIMEOUT = 60


def argv(service, *args):
    return [str(VENV_BIN / 'openstack'), '--os-auth-type', 'none',
            '--os-endpoint', service.url + '/v2', 'accelerator', *args]


def run(service, env, *args):
    return subprocess.run(argv(service, *args), env=env, cwd=env['HOME'],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)


def run_json(service, env, *args):
    done = run(service, env, *args, '-f', 'json')
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_all(service, env, commands):
    """``(returncode, stdout, stderr)`` of each command, run side by side."""
    procs = [subprocess.Popen(argv(service, *args), env=env,
                              cwd=env['HOME'], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for args in commands]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT)
        results.append((proc.returncode, out, err))
    return results
