"""Rules for /v2/attributes."""

from cyborg.policies import base

PATH = '/v2/attributes'
ITEM = PATH + '/{attribute_uuid}'

rules = [
    base.rule('cyborg:attribute:get_all', base.PROJECT_MANAGER_OR_ADMIN,
              'List attributes.', [('GET', PATH)], base.LEGACY_ADMIN),
    base.rule('cyborg:attribute:get_one', base.PROJECT_MANAGER_OR_ADMIN,
              'Show an attribute.', [('GET', ITEM)], base.LEGACY_ADMIN),
    base.rule('cyborg:attribute:create', base.ADMIN,
              'Create an attribute of a deployable.', [('POST', PATH)],
              base.LEGACY_ADMIN),
    base.rule('cyborg:attribute:delete', base.ADMIN,
              'Delete an attribute.', [('DELETE', ITEM)], base.LEGACY_ADMIN),
]
