"""Rules for /v2/deployables."""

from cyborg.policies import base

PATH = '/v2/deployables'
ITEM = PATH + '/{deployable_uuid}'

rules = [
    base.inventory_read('cyborg:deployable:get_all', 'List deployables.',
                        [('GET', PATH)]),
    base.inventory_read('cyborg:deployable:get_one', 'Show a deployable.',
                        [('GET', ITEM)]),
    base.rule('cyborg:deployable:program', base.ADMIN,
              'Program an FPGA deployable with a bitstream.',
              [('PATCH', ITEM + '/program')], base.LEGACY_ADMIN),
]
