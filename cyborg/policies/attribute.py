"""Rules for /v2/attributes."""

from cyborg.policies import base

PATH = '/v2/attributes'
ITEM = PATH + '/{attribute_uuid}'

rules = [
    base.inventory_read('cyborg:attribute:get_all', 'List attributes.',
                        [('GET', PATH)]),
    base.inventory_read('cyborg:attribute:get_one', 'Show an attribute.',
                        [('GET', ITEM)]),
    base.rule('cyborg:attribute:create', base.ADMIN,
              'Create an attribute of a deployable.', [('POST', PATH)],
              base.LEGACY_ADMIN),
    base.rule('cyborg:attribute:delete', base.ADMIN,
              'Delete an attribute.', [('DELETE', ITEM)], base.LEGACY_ADMIN),
]
