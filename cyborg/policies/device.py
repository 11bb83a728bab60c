"""Rules for /v2/devices."""

from cyborg.policies import base

PATH = '/v2/devices'
ITEM = PATH + '/{device_uuid}'

rules = [
    base.inventory_read('cyborg:device:get_all', 'List devices.',
                        [('GET', PATH)]),
    base.inventory_read('cyborg:device:get_one', 'Show a device.',
                        [('GET', ITEM)]),
    base.rule('cyborg:device:get_usage', base.ADMIN,
              'See the usage figures of devices (from microversion 2.5, '
              'in device and deployable views): they describe the '
              'workloads of the projects that use the devices, so other '
              'callers get usage null.',
              [('GET', PATH), ('GET', ITEM), ('GET', '/v2/deployables'),
               ('GET', '/v2/deployables/{deployable_uuid}')],
              base.LEGACY_ADMIN),
    base.rule('cyborg:device:disable', base.ADMIN,
              'Disable a device: its inventory is reserved in Placement.',
              [('POST', ITEM + '/disable')], base.LEGACY_ADMIN),
    base.rule('cyborg:device:enable', base.ADMIN,
              'Enable a device: its inventory is released in Placement.',
              [('POST', ITEM + '/enable')], base.LEGACY_ADMIN),
    base.rule('cyborg:device:health_override', base.ADMIN,
              'Override the quarantine of a device that its health decides '
              '(ignore or quarantine), or clear the override.',
              [('PUT', ITEM + '/health_override'),
               ('DELETE', ITEM + '/health_override')], base.LEGACY_ADMIN),
]
