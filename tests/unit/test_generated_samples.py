"""The committed sample files match what the generators make of the code.

An option or policy rule changed without regenerating its sample fails
here rather than misleading operators.
"""

import difflib
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ETC = ROOT / 'etc' / 'cyborg'

# sample, generator, its configuration, the tox env that regenerates it
SAMPLES = [
    ('cyborg.conf.sample', 'oslo-config-generator',
     'cyborg-config-generator.conf', 'genconfig'),
    ('policy.yaml.sample', 'oslopolicy-sample-generator',
     'cyborg-policy-generator.conf', 'genpolicy'),
]


def generator(name):
    """The console script installed beside this interpreter."""
    bindir = os.path.dirname(sys.executable)
    path = shutil.which(name, path=bindir) or shutil.which(name)
    assert path, '%s is not installed' % name
    return path


@pytest.mark.parametrize('sample,command,config,tox_env', SAMPLES,
                         ids=[s[0] for s in SAMPLES])
def test_sample_is_up_to_date(tmp_path, sample, command, config, tox_env):
    generated = tmp_path / sample
    result = subprocess.run(
        [generator(command), '--config-file', str(ETC / config),
         '--output-file', str(generated)],
        cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    committed = (ETC / sample).read_text()
    new = generated.read_text()
    if new != committed:
        diff = ''.join(difflib.unified_diff(
            committed.splitlines(True), new.splitlines(True),
            'etc/cyborg/' + sample + ' (committed)',
            sample + ' (generated)', n=1))
        pytest.fail('etc/cyborg/%s is out of date: run `tox -e %s` and '
                    'commit the result.\n%s' % (sample, tox_env, diff[:4000]),
                    pytrace=False)
