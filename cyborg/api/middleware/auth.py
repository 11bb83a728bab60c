"""Authentication: keystonemiddleware's auth_token, or noauth for tests.

``/`` and ``/v2`` (version discovery) are public in both.
"""

from keystonemiddleware import auth_token

PUBLIC_PATHS = frozenset(['/', '/v2'])


def _is_public(environ):
    path = environ.get('PATH_INFO', '') or '/'
    return (path.rstrip('/') or '/') in PUBLIC_PATHS


class KeystoneAuth:
    """auth_token for everything but the public version documents."""

    def __init__(self, app, conf):
        self._app = app
        self._auth = auth_token.AuthProtocol(app,
                                             {'oslo_config_config': conf})

    def __call__(self, environ, start_response):
        if _is_public(environ):
            return self._app(environ, start_response)
        return self._auth(environ, start_response)


class NoAuth:
    """Trusts the identity headers; without them the caller is an admin.

    For tests and the single-machine mode only: anyone who can reach the
    port can claim any identity.
    """

    DEFAULTS = {
        'HTTP_X_USER_ID': 'noauth-user',
        'HTTP_X_PROJECT_ID': 'noauth-project',
        'HTTP_X_ROLES': 'admin,manager,member,reader',
    }

    def __init__(self, app):
        self._app = app

    def __call__(self, environ, start_response):
        for name, value in self.DEFAULTS.items():
            environ.setdefault(name, value)
        environ.setdefault('HTTP_X_IDENTITY_STATUS', 'Confirmed')
        return self._app(environ, start_response)
