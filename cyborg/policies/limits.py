"""Rules for /v2/limits."""

from cyborg.policies import base

PATH = '/v2/limits'

rules = [
    base.rule('cyborg:limits:get', base.PROJECT_READER_OR_ADMIN,
              'Show a project\'s limits on accelerator requests and its '
              'usage of each (microversion 2.8). A project reader sees its '
              'own project\'s; an admin may ask for any project with '
              '?project_id=.', [('GET', PATH)], base.PROJECT_READER_OR_ADMIN),
]
