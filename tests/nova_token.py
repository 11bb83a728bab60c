"""A paste filter that stands in for Keystone in Nova's API pipeline.

Nova 34 has no ``noauth2`` any more, and the compute API must see the
headers that keystonemiddleware's ``auth_token`` sets. This filter trusts
any ``X-Auth-Token`` and makes it a project-scoped user with the
``admin`` and ``service`` roles (and the ones they imply), so that the
same token serves a person, Nova's own service calls and this service's
``os-server-external-events``. The ids are 32 hex digits, as Keystone's
are, derived from the token so that one token is always one user.

It is named in the rig's ``api-paste.ini`` as::

    [filter:authtoken]
    paste.filter_factory = tests.nova_token:filter_factory
"""

import hashlib

ROLES = 'admin,member,reader,service'


def keystone_id(kind, token):
    """A stable 32-hex id of ``kind`` ('user', 'project') for ``token``."""
    return hashlib.sha256(('%s:%s' % (kind, token)).encode()).hexdigest()[:32]


def identity_headers(token):
    """The WSGI environ keys auth_token would set for ``token``."""
    return {
        'HTTP_X_IDENTITY_STATUS': 'Confirmed',
        'HTTP_X_USER_ID': keystone_id('user', token),
        'HTTP_X_USER_NAME': 'user-%s' % token,
        'HTTP_X_USER_DOMAIN_ID': 'default',
        'HTTP_X_PROJECT_ID': keystone_id('project', token),
        'HTTP_X_PROJECT_NAME': 'project-%s' % token,
        'HTTP_X_PROJECT_DOMAIN_ID': 'default',
        'HTTP_X_ROLES': ROLES,
    }


def filter_factory(global_conf, **local_conf):
    def wrap(app):
        def trusted_token(environ, start_response):
            token = environ.get('HTTP_X_AUTH_TOKEN')
            if not token:
                start_response('401 Unauthorized',
                               [('Content-Type', 'text/plain')])
                return [b'X-Auth-Token is required']
            environ.update(identity_headers(token))
            return app(environ, start_response)
        return trusted_token
    return wrap
