"""Rules for /v2/device_profiles."""

from cyborg.policies import base

PATH = '/v2/device_profiles'
ITEM = PATH + '/{device_profile_uuid}'

rules = [
    base.rule('cyborg:device_profile:get_all', base.PROJECT_READER_OR_ADMIN,
              'List device profiles.', [('GET', PATH)], base.LEGACY_ANYONE),
    base.rule('cyborg:device_profile:get_one', base.PROJECT_READER_OR_ADMIN,
              'Show a device profile, by uuid or (from 2.2) by name, and '
              '(from 2.7) its revisions.',
              [('GET', ITEM), ('GET', ITEM + '/revisions')],
              base.LEGACY_ANYONE),
    base.rule('cyborg:device_profile:create', base.ADMIN,
              'Create device profiles.', [('POST', PATH)],
              base.LEGACY_ADMIN),
    base.rule('cyborg:device_profile:update', base.ADMIN,
              'Change a device profile\'s name, description or groups (a '
              'new revision each), enable or disable it, make it public or '
              'private (microversion 2.7).', [('PATCH', ITEM)],
              base.ADMIN),
    base.rule('cyborg:device_profile:all_profiles', base.ADMIN,
              'See disabled device profiles and private ones not shared '
              'with the caller\'s project, and make accelerator requests '
              'from a private one. Without it a caller sees and uses only '
              'enabled profiles that are public or shared with its '
              'project.',
              [('GET', PATH), ('GET', ITEM),
               ('POST', '/v2/accelerator_requests')],
              base.ADMIN),
    base.rule('cyborg:device_profile:get_projects', base.ADMIN,
              'List the projects a private device profile is shared with '
              '(microversion 2.7).', [('GET', ITEM + '/projects')],
              base.ADMIN),
    base.rule('cyborg:device_profile:add_project', base.ADMIN,
              'Share a private device profile with a project (microversion '
              '2.7).', [('POST', ITEM + '/projects')], base.ADMIN),
    base.rule('cyborg:device_profile:remove_project', base.ADMIN,
              'Stop sharing a private device profile with a project '
              '(microversion 2.7).',
              [('DELETE', ITEM + '/projects/{project_id}')], base.ADMIN),
    base.rule('cyborg:device_profile:delete', base.ADMIN,
              'Delete device profiles, by uuid or by name.',
              [('DELETE', ITEM), ('DELETE', PATH + '?value={names}')],
              base.LEGACY_ADMIN),
]
