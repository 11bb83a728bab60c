"""Rules for /v2/services."""

from cyborg.policies import base

PATH = '/v2/services'

rules = [
    base.rule('cyborg:service:get_all', base.ADMIN,
              'List the conductors and agents, their versions and whether '
              'they are alive.', [('GET', PATH)], base.LEGACY_ADMIN),
]
