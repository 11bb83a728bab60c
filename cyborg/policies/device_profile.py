"""Rules for /v2/device_profiles."""

from cyborg.policies import base

PATH = '/v2/device_profiles'
ITEM = PATH + '/{device_profile_uuid}'

rules = [
    base.rule('cyborg:device_profile:get_all', base.PROJECT_READER_OR_ADMIN,
              'List device profiles.', [('GET', PATH)], base.LEGACY_ANYONE),
    base.rule('cyborg:device_profile:get_one', base.PROJECT_READER_OR_ADMIN,
              'Show a device profile, by uuid or (from 2.2) by name.',
              [('GET', ITEM)], base.LEGACY_ANYONE),
    base.rule('cyborg:device_profile:create', base.ADMIN,
              'Create device profiles.', [('POST', PATH)],
              base.LEGACY_ADMIN),
    base.rule('cyborg:device_profile:delete', base.ADMIN,
              'Delete device profiles, by uuid or by name.',
              [('DELETE', ITEM), ('DELETE', PATH + '?value={names}')],
              base.LEGACY_ADMIN),
]
