"""Rules for /v2/accelerator_requests."""

from cyborg.policies import base

PATH = '/v2/accelerator_requests'
ITEM = PATH + '/{accelerator_request_uuid}'

rules = [
    base.rule('cyborg:arq:get_all', base.PROJECT_READER_OR_ADMIN,
              'List accelerator requests.', [('GET', PATH)],
              base.LEGACY_ANYONE),
    base.rule('cyborg:arq:get_one', base.PROJECT_READER_OR_ADMIN,
              'Show an accelerator request.', [('GET', ITEM)],
              base.LEGACY_ANYONE),
    base.rule('cyborg:arq:create', base.PROJECT_MEMBER_OR_SERVICE,
              'Create accelerator requests from a device profile.',
              [('POST', PATH)], base.LEGACY_ANYONE),
    base.rule('cyborg:arq:update', base.PROJECT_MEMBER_OR_SERVICE,
              'Bind or unbind accelerator requests.',
              [('PATCH', PATH), ('PATCH', ITEM)], base.LEGACY_ANYONE),
    base.rule('cyborg:arq:delete', base.PROJECT_MEMBER_OR_SERVICE,
              'Delete accelerator requests.',
              [('DELETE', PATH), ('DELETE', ITEM)], base.LEGACY_ANYONE),
    base.rule('cyborg:arq:all_projects', base.ADMIN,
              'See and act on the accelerator requests of every project, '
              'and give an accelerator request to another project '
              '(/project_id in a bind, microversion 2.1). Without it a '
              'caller sees only its own project\'s requests.',
              [('GET', PATH), ('PATCH', PATH), ('DELETE', PATH)],
              base.LEGACY_ADMIN),
]
