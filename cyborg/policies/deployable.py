"""Rules for /v2/deployables."""

from cyborg.policies import base

PATH = '/v2/deployables'
ITEM = PATH + '/{deployable_uuid}'

rules = [
    base.rule('cyborg:deployable:get_all', base.PROJECT_MANAGER_OR_ADMIN,
              'List deployables.', [('GET', PATH)], base.LEGACY_ADMIN),
    base.rule('cyborg:deployable:get_one', base.PROJECT_MANAGER_OR_ADMIN,
              'Show a deployable.', [('GET', ITEM)], base.LEGACY_ADMIN),
    base.rule('cyborg:deployable:program', base.ADMIN,
              'Program an FPGA deployable with a bitstream.',
              [('PATCH', ITEM + '/program')], base.LEGACY_ADMIN),
]
