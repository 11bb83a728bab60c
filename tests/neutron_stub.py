"""An empty Neutron on 127.0.0.1, for a Nova whose servers have no ports.

Servers booted with ``"networks": "none"`` need no network, but Nova
still asks Neutron on delete (and on a few other paths) which ports the
server has. This answers every ``GET`` with an empty collection named
after the last path segment (``/v2.0/ports`` -> ``{"ports": []}``), and
every other method with 404, and keeps the paths it was asked.
"""

import http.server
import json
import threading
import urllib.parse


class _Handler(http.server.BaseHTTPRequestHandler):

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path.rstrip('/')
        self.server.stub.asked.append(('GET', path))
        collection = path.rsplit('/', 1)[-1].replace('-', '_')
        if collection in ('', 'v2.0'):
            self._answer(200, {'versions': [{
                'id': 'v2.0', 'status': 'CURRENT',
                'links': [{'rel': 'self', 'href': self.server.stub.url +
                           '/v2.0/'}]}]})
        else:
            self._answer(200, {collection: []})

    def _refuse(self):
        self.server.stub.asked.append((self.command, self.path))
        self._answer(404, {'NeutronError': {'message': 'not here'}})

    do_POST = do_PUT = do_DELETE = _refuse

    def log_message(self, *args):
        pass  # the asked list is the log


class NeutronStub:

    def __init__(self):
        self.asked = []
        self._server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                       _Handler)
        self._server.daemon_threads = True
        self._server.stub = self
        self.url = 'http://127.0.0.1:%d' % self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={'poll_interval': 0.2},
                                        name='neutron-stub', daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
