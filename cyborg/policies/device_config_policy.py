"""Rules for /v2/device_config_policies (microversion 2.6): admins only,
as they change how hosts configure their hardware."""

from cyborg.policies import base

PATH = '/v2/device_config_policies'
ITEM = PATH + '/{device_config_policy_uuid}'

rules = [
    base.rule('cyborg:device_config_policy:get_all', base.ADMIN,
              'List device configuration policies.', [('GET', PATH)],
              base.LEGACY_ADMIN),
    base.rule('cyborg:device_config_policy:get_one', base.ADMIN,
              'Show a device configuration policy, and the configuration '
              'status of each device it selects.',
              [('GET', ITEM), ('GET', ITEM + '/status')], base.LEGACY_ADMIN),
    base.rule('cyborg:device_config_policy:create', base.ADMIN,
              'Create a device configuration policy.', [('POST', PATH)],
              base.LEGACY_ADMIN),
    base.rule('cyborg:device_config_policy:update', base.ADMIN,
              'Change the priority, selectors or settings of a device '
              'configuration policy.', [('PATCH', ITEM)], base.LEGACY_ADMIN),
    base.rule('cyborg:device_config_policy:delete', base.ADMIN,
              'Delete a device configuration policy.', [('DELETE', ITEM)],
              base.LEGACY_ADMIN),
]
