"""[keystone_authtoken]: keystonemiddleware's options, registered early.

Registering them with the rest lets configuration files and tests set
them before the API is assembled. The sample lists them under the
keystonemiddleware.auth_token namespace.
"""

from keystonemiddleware import auth_token


def register_opts(conf):
    for group, opts in auth_token.list_opts():
        conf.register_opts(opts, group=group)
