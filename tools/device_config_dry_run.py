#!/usr/bin/env python3
"""What a device configuration policy would do on this host, changing
nothing: ``cyborg-playbooks plan`` run from this checkout (the package
installed in development mode, ``pip install -e .``, for its drivers'
entry points).

    sudo tools/device_config_dry_run.py                  # discovery only
    sudo tools/device_config_dry_run.py policy.json      # the API's form
    sudo tools/device_config_dry_run.py --json \\
        '{"kind": "sriov_vfs", "devices": {"product_id": "1572"},
          "settings": {"num_vfs": 8}}'

See ``cyborg-playbooks plan --help`` for every option.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir))

from cyborg.cmd import playbooks


def main(argv=None):
    return playbooks.main(['plan', *(sys.argv[1:] if argv is None
                                     else argv)])


if __name__ == '__main__':
    sys.exit(main())
