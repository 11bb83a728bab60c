"""[upgrade_levels] options: the RPC versions to send during an upgrade.

A service of a newer release pinned here sends only what a service of
the older release serves; once every service runs the newer release the
pins are removed (see the admin guide's rolling upgrades).
"""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'upgrade_levels'
TITLE = 'RPC API versions to send while services of two releases run'

# MAJOR.MINOR of an RPC API.
VERSION_PATTERN = r'^\d+\.\d+$'

opts = [
    cfg.StrOpt('conductor',
               regex=VERSION_PATTERN,
               help='The newest conductor RPC API version that this '
                    'service sends (for example 1.3). Set it to the '
                    'version of the oldest conductor still running while '
                    'conductors are being upgraded; unset, the newest '
                    'version this release knows is used. Read by the API, '
                    'the agents and the conductors.'),
    cfg.StrOpt('agent',
               regex=VERSION_PATTERN,
               help='The newest agent RPC API version that the conductor '
                    'sends (for example 1.1). Set it to the version of '
                    'the oldest agent still running while agents are '
                    'being upgraded; unset, the newest version this '
                    'release knows is used.'),
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
