"""Whether a virtual environment holds this checkout, installed as it is now.

    python3 tools/install_stamp.py check VENV EXTRAS  # exit 0: up to date
    python3 tools/install_stamp.py write VENV EXTRAS  # after pip install

``tools/quickstart.sh`` installs the checkout editable (``pip install -e``),
so a change of the code needs no new install. What does: a change of what
pip reads (``setup.cfg``: dependencies, extras, entry points;
``requirements.txt``; ``setup.py``), of the extras asked for, of the
venv's Python (``pyvenv.cfg``), or a venv that lost the package or has it
from another checkout. ``write`` records a digest of the first ones in the
venv; ``check`` compares it and looks at the installed distribution's
``direct_url.json``. Standard library only: it runs before the venv exists.
"""

import hashlib
import json
import pathlib
import sys
import urllib.parse
import urllib.request

CHECKOUT = pathlib.Path(__file__).resolve().parent.parent
# What pip reads from the checkout to install it.
INSTALL_INPUTS = ('setup.cfg', 'setup.py', 'requirements.txt',
                  'pyproject.toml')
STAMP = '.cyborg-install-stamp'
CONSOLE_SCRIPT = 'cyborg-all-in-one'


def digest(checkout, venv, extras):
    """The digest of everything an install depends on but the code."""
    found = hashlib.sha256(('extras=%s\n' % extras).encode())
    for path in [checkout / name for name in INSTALL_INPUTS] + [
            venv / 'pyvenv.cfg']:
        content = path.read_bytes() if path.exists() else b'(none)'
        found.update(b'%s %d\n' % (path.name.encode(), len(content)))
        found.update(content)
    return found.hexdigest()


def editable_from(venv):
    """The directories ``cyborg`` is installed editable from in ``venv``."""
    found = set()
    for record in venv.glob(
            'lib/python*/site-packages/cyborg-*.dist-info/direct_url.json'):
        try:
            origin = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        url = urllib.parse.urlsplit(origin.get('url', ''))
        if url.scheme == 'file' and origin.get('dir_info', {}).get(
                'editable'):
            found.add(pathlib.Path(
                urllib.request.url2pathname(url.path)).resolve())
    return found


def is_current(checkout, venv, extras):
    """True when ``venv`` needs no install of ``checkout``."""
    stamp = venv / STAMP
    return (stamp.exists()
            and stamp.read_text().strip() == digest(checkout, venv, extras)
            and (venv / 'bin' / CONSOLE_SCRIPT).exists()
            and checkout.resolve() in editable_from(venv))


def write(checkout, venv, extras):
    (venv / STAMP).write_text(digest(checkout, venv, extras) + '\n')


def main(argv):
    if len(argv) != 3 or argv[0] not in ('check', 'write'):
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    command, venv, extras = argv[0], pathlib.Path(argv[1]), argv[2]
    if command == 'write':
        write(CHECKOUT, venv, extras)
        return 0
    return 0 if is_current(CHECKOUT, venv, extras) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
