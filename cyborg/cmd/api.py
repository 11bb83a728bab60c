"""cyborg-api: serve the REST API with the built-in threaded server.

    cyborg-api [--config-file F ...]

Runs until SIGTERM or SIGINT (exit 0); SIGHUP re-reads the configuration
files and serves a new app made from them. Production deployments may
serve ``cyborg.wsgi.api:application`` with uwsgi, gunicorn or mod_wsgi
instead.
"""

# First of all: eventlet stays out of the process.
from cyborg import no_eventlet  # noqa: F401, I001

import sys
import threading

from cheroot import wsgi
from oslo_config import cfg
from oslo_log import log

from cyborg import cmd
from cyborg import conf as cyborg_conf
from cyborg import service  # first: keeps eventlet out (see service.py)
from cyborg.api import app as api_app
from cyborg.cmd import console
from cyborg.db import session

LOG = log.getLogger(__name__)


class _Server(wsgi.Server):
    """cheroot's server, telling its errors to the log, not to stderr."""

    def error_log(self, msg='', level=20, traceback=False):
        LOG.log(level, '%s', msg, exc_info=traceback)


# Connections the kernel holds for the server before it accepts them.
# cheroot's default, 5, resets some of a burst of clients (Nova booting
# many servers at once) while its threads are busy.
LISTEN_BACKLOG = 128


def make_server(conf, app=None):
    """A cheroot server for the API on ``[api] host_ip:port``."""
    app = app if app is not None else api_app.build_app(conf)
    return _Server((conf.api.host_ip, conf.api.port), app,
                   numthreads=conf.api.threads, server_name='cyborg-api',
                   request_queue_size=LISTEN_BACKLOG)


def serve(svc, conf, app=None):
    """Serve the API from a thread as part of ``svc`` (stopped with it);
    returns its URL. A port in use fails here, in the start."""
    server = make_server(conf, app)
    server.prepare()
    host, port = server.bind_addr[:2]
    thread = threading.Thread(target=server.serve, daemon=True, name='api')
    thread.start()
    svc.on_stop(server.stop)
    return 'http://%s:%d' % (host, port)


class APIService(service.Service):

    def __init__(self, conf):
        super().__init__('cyborg-api')
        self.conf = conf

    def on_start(self):
        # One database pool per start: a SIGHUP restart closes the old one.
        db = session.Database(self.conf)
        self.on_stop(db.dispose)
        LOG.info('cyborg-api listening on %s', serve(
            self, self.conf, api_app.build_app(self.conf, db, warm=True)))


def main(argv=None):
    console.guard()
    conf = cfg.CONF
    log.register_options(conf)
    cyborg_conf.load(sys.argv[1:] if argv is None else argv, conf=conf)
    log.setup(conf, 'cyborg')
    sys.exit(cmd.launch(APIService(conf), conf))
