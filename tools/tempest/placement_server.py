"""Serve a throwaway Placement for run.sh: openstack-placement on SQLite.

    python placement_server.py --db FILE --port-file FILE

Creates the schema in a fresh SQLite file with Placement's own migrations,
serves the WSGI app on a free port of 127.0.0.1 and writes that port to
--port-file once it listens. No Keystone: ``[api] auth_strategy = noauth2``
takes the X-Auth-Token header as the user, and the user ``admin`` is an
admin. Runs until SIGTERM or SIGINT.
"""

import argparse
import logging
import os
import signal
import sys
import threading

from cheroot import wsgi
from oslo_config import cfg
from placement import conf as placement_conf
from placement import db_api
from placement import deploy


def build_app(db_path):
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf.set_override('auth_strategy', 'noauth2', group='api')
    conf.set_override('connection', 'sqlite:///%s' % db_path,
                      group='placement_database')
    # loadapp() migrates to head and fills the standard traits and
    # resource classes.
    conf.set_override('sync_on_startup', True, group='placement_database')
    conf([], project='placement', default_config_files=[])
    db_api.configure(conf)
    return deploy.loadapp(conf)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--db', required=True, help='SQLite file, created')
    parser.add_argument('--port-file', required=True)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout,
        format='%(asctime)s %(levelname)s %(name)s %(message)s')

    app = build_app(os.path.abspath(args.db))
    # One worker: SQLite serialises writers anyway, and a single thread
    # never answers "database is locked".
    server = wsgi.Server(('127.0.0.1', 0), app, numthreads=1,
                         server_name='placement')
    server.prepare()
    port = server.bind_addr[1]
    # Written whole, then renamed: a reader never sees a partial file.
    with open(args.port_file + '.tmp', 'w') as f:
        f.write('%d\n' % port)
    os.replace(args.port_file + '.tmp', args.port_file)
    logging.info('placement on http://127.0.0.1:%d (noauth2, %s)',
                 port, args.db)

    # cheroot's stop() cannot run inside serve()'s own thread: serve on
    # another one and stop from here once signalled.
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    threading.Thread(target=server.serve, daemon=True).start()
    while not stopping.wait(1):
        pass
    server.stop()


if __name__ == '__main__':
    main()
