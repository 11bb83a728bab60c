"""Store the fake driver's inventory for this host in cyborg's database.

The device, deployable and attribute API tests of cyborg-tempest-plugin
read an inventory; run.sh calls this after ``cyborg-dbsync upgrade`` while
no agent reports one (SEED_INVENTORY=0 skips it).

    python tools/tempest/seed_inventory.py --config-file cyborg.conf
"""

import socket
import sys

from cyborg import conf as cyborg_conf
from cyborg.db import session
from tests import inventory_rows


def main(argv):
    conf = cyborg_conf.load(argv)
    db = session.Database(conf)
    try:
        stored = inventory_rows.add_host(db.engine, socket.gethostname(),
                                         inventory_rows.fake_devices())
    finally:
        db.dispose()
    for device in stored:
        print('device %s with deployables %s' % (
            device.uuid, ', '.join('%s (%s)' % (name, d.uuid)
                                   for name, d in device.deployables.items())))


if __name__ == '__main__':
    main(sys.argv[1:])
