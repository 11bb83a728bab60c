"""Start the project's local Keystone for the tempest runner and leave it
running.

The Keystone is the one the test suite uses (``tests/keystone_service.py``):
Keystone 30 on SQLite in a venv of its own (installed on first use), served
single-threaded on a free port of 127.0.0.1, with the admin of its
bootstrap and the test users. Prints one JSON line on standard output,
``{"url", "pid", "admin_password"}``; progress goes to standard error.
``run.sh`` stops the process by its pid when it tears down.

    python tools/tempest/keystone_local.py --dir DIR --venv VENV
"""

import argparse
import json
import logging
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from tests import keystone_service  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dir', required=True,
                        help='state directory of this Keystone (empty)')
    parser.add_argument('--venv', default=keystone_service.VENV,
                        help='where Keystone is (or gets) installed')
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format='%(message)s')
    os.makedirs(args.dir, exist_ok=True)
    service = keystone_service.KeystoneService(args.dir, venv=args.venv)
    service.start()
    print(json.dumps({'url': service.url, 'pid': service.pid,
                      'admin_password': service.admin_password}),
          flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
