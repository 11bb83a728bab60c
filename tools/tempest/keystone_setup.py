"""Register Cyborg in a Keystone: roles, service project and user, catalog.

Idempotent: every object is looked up by name before it is created, so the
script can run again on the same Keystone. Standard library only, so it runs
with any python3 before a venv exists.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request

DOMAIN = 'default'
REGION = 'RegionOne'
# Prior role -> implied role. Recent Keystone bootstrap creates these already;
# an older one may lack manager, and the policies rely on the chain.
IMPLIED = [('admin', 'manager'), ('manager', 'member'), ('member', 'reader')]
ROLES = ['reader', 'member', 'manager', 'admin', 'service']


class Keystone:
    def __init__(self, url, token=None):
        self.url = url.rstrip('/')
        self.token = token

    def call(self, method, path, body=None, ok_missing=False):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data,
                                     method=method)
        req.add_header('Content-Type', 'application/json')
        if self.token:
            req.add_header('X-Auth-Token', self.token)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw = resp.read()
                return resp, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            if ok_missing and exc.code == 404:
                return exc, None
            sys.exit('keystone: %s %s -> %s %s'
                     % (method, path, exc.code, exc.read().decode()[:500]))

    def login(self, user, password, project):
        resp, _ = self.call('POST', '/auth/tokens', {'auth': {
            'identity': {'methods': ['password'], 'password': {'user': {
                'name': user, 'domain': {'id': DOMAIN},
                'password': password}}},
            'scope': {'project': {'name': project,
                                  'domain': {'id': DOMAIN}}}}})
        self.token = resp.headers['X-Subject-Token']

    def find(self, collection, key, **filters):
        query = '&'.join('%s=%s' % kv for kv in filters.items())
        _, body = self.call('GET', '/%s?%s' % (collection, query))
        return body[key]

    def ensure(self, collection, key, match, create):
        """The first ``collection`` object matching ``match``, or a new one."""
        found = self.find(collection, collection, **match)
        if found:
            return found[0]
        _, body = self.call('POST', '/' + collection, {key: create})
        print('created %s %s' % (key, create.get('name', create.get('url'))))
        return body[key]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--auth-url', required=True, help='.../v3')
    parser.add_argument('--admin-password', required=True)
    parser.add_argument('--service-password', required=True)
    parser.add_argument('--endpoint', required=True,
                        help='catalog URL of the accelerator API')
    args = parser.parse_args()

    ks = Keystone(args.auth_url)
    ks.login('admin', args.admin_password, 'admin')

    roles = {name: ks.ensure('roles', 'role', {'name': name}, {'name': name})
             for name in ROLES}
    for prior, implied in IMPLIED:
        path = '/roles/%s/implies/%s' % (roles[prior]['id'],
                                         roles[implied]['id'])
        resp, _ = ks.call('GET', path, ok_missing=True)
        if resp.status == 404:
            ks.call('PUT', path)
            print('created implied role %s > %s' % (prior, implied))

    project = ks.ensure('projects', 'project',
                        {'name': 'service', 'domain_id': DOMAIN},
                        {'name': 'service', 'domain_id': DOMAIN,
                         'description': 'Service users'})
    user = ks.ensure('users', 'user', {'name': 'cyborg', 'domain_id': DOMAIN},
                     {'name': 'cyborg', 'domain_id': DOMAIN,
                      'default_project_id': project['id'],
                      'password': args.service_password})
    # A user left by an earlier run may carry another password.
    ks.call('PATCH', '/users/' + user['id'],
            {'user': {'password': args.service_password}})
    for role in ('admin', 'service'):
        ks.call('PUT', '/projects/%s/users/%s/roles/%s'
                % (project['id'], user['id'], roles[role]['id']))

    service = ks.ensure('services', 'service', {'type': 'accelerator'},
                        {'type': 'accelerator', 'name': 'cyborg',
                         'description': 'Accelerator management'})
    for interface in ('public', 'internal'):
        endpoint = ks.ensure(
            'endpoints', 'endpoint',
            {'service_id': service['id'], 'interface': interface},
            {'service_id': service['id'], 'interface': interface,
             'region_id': REGION, 'url': args.endpoint})
        if endpoint['url'] != args.endpoint:
            ks.call('PATCH', '/endpoints/' + endpoint['id'],
                    {'endpoint': {'url': args.endpoint}})
    print('accelerator endpoint %s (user cyborg in project service)'
          % args.endpoint)


if __name__ == '__main__':
    main()
