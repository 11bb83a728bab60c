"""The compute host of a run.sh deployment, seen from Placement and the API.

    python compute_host.py create-node --placement URL --host NAME
    python compute_host.py wait-for-device --placement URL --host NAME \\
        --auth-url KS/v3 --admin-password P --cyborg URL/v2 \\
        [--timeout S] [--pid PID ...]

``create-node`` makes the compute node's resource provider as Nova does:
named after the host, a UUID of its own, VCPU and MEMORY_MB inventory.
``wait-for-device`` waits until GET /v2/devices (with an admin token) lists
a device on the host and Placement holds a provider under the compute
node for each of its deployables, i.e. until the agent's report went
through the conductor to the database and to Placement. It gives up early
if one of the --pid processes exits. Standard library only.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

# Placement's noauth2 takes the token as the user; 'admin' is an admin.
PLACEMENT_HEADERS = {'X-Auth-Token': 'admin',
                     'OpenStack-API-Version': 'placement 1.39'}


def call(method, url, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header('Content-Type', 'application/json')
    req.add_header('Accept', 'application/json')
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
        return resp.headers, json.loads(raw) if raw else None


def placement(method, base, path, body=None):
    return call(method, base.rstrip('/') + path, body, PLACEMENT_HEADERS)[1]


def create_node(args):
    rp = placement('POST', args.placement, '/resource_providers',
                   {'name': args.host, 'uuid': str(uuid.uuid4())})
    placement('PUT', args.placement,
              '/resource_providers/%s/inventories' % rp['uuid'],
              {'resource_provider_generation': rp['generation'],
               'inventories': {
                   'VCPU': {'total': 16, 'allocation_ratio': 4.0},
                   'MEMORY_MB': {'total': 65536}}})
    print('compute node %s (%s)' % (args.host, rp['uuid']))


def admin_token(auth_url, password):
    headers, _ = call('POST', auth_url.rstrip('/') + '/auth/tokens', {
        'auth': {'identity': {'methods': ['password'], 'password': {
            'user': {'name': 'admin', 'domain': {'id': 'default'},
                     'password': password}}},
            'scope': {'project': {'name': 'admin',
                                  'domain': {'id': 'default'}}}}})
    return headers['X-Subject-Token']


def child_providers(base, host):
    found = placement('GET', base, '/resource_providers?name='
                      + urllib.parse.quote(host))['resource_providers']
    if not found:
        sys.exit('no compute node provider named %s in Placement' % host)
    root = found[0]['uuid']
    tree = placement('GET', base, '/resource_providers?in_tree=' + root)
    return sorted(rp['name'] for rp in tree['resource_providers']
                  if rp['uuid'] != root)


def wait_for_device(args):
    token = admin_token(args.auth_url, args.admin_password)
    url = '%s/devices?hostname=%s' % (args.cyborg.rstrip('/'),
                                      urllib.parse.quote(args.host))
    deadline = time.monotonic() + args.timeout
    seen = None
    while True:
        for pid in args.pid:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                sys.exit('process %d exited' % pid)
        try:
            devices = call('GET', url, headers={'X-Auth-Token': token})[1]
            devices = devices['devices']
            providers = child_providers(args.placement, args.host)
        except (urllib.error.URLError, OSError) as exc:
            devices, providers = [], []
            seen = str(exc)
        if devices and providers:
            for device in devices:
                print('device %s: %s %s %s on %s' % (
                    device['uuid'], device['type'], device['vendor'],
                    device['model'], device['hostname']))
            print('providers under %s: %s' % (args.host,
                                              ', '.join(providers)))
            return
        if time.monotonic() > deadline:
            sys.exit('after %d s: devices %s, providers %s%s' % (
                args.timeout, devices, providers,
                '; last error: %s' % seen if seen else ''))
        time.sleep(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    node = sub.add_parser('create-node')
    wait = sub.add_parser('wait-for-device')
    for p in (node, wait):
        p.add_argument('--placement', required=True, help='Placement URL')
        p.add_argument('--host', required=True,
                       help="the compute node's name, the agent's host")
    wait.add_argument('--auth-url', required=True, help='.../v3')
    wait.add_argument('--admin-password', required=True)
    wait.add_argument('--cyborg', required=True, help='.../v2')
    wait.add_argument('--timeout', type=int, default=90)
    wait.add_argument('--pid', type=int, action='append', default=[],
                      help='give up if this process exits')
    args = parser.parse_args()
    {'create-node': create_node,
     'wait-for-device': wait_for_device}[args.command](args)


if __name__ == '__main__':
    main()
