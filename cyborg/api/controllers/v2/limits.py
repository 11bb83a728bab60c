"""/v2/limits: a project's limits on accelerator requests and its usage.

From microversion 2.8. A project reader sees its own project; an admin
may name another with ``?project_id=``. Each entry is one resource of
``cyborg.quota.resources``: its limit (-1 when there is none, as when
``[quota] driver`` is ``noop``) and what the project's ARQs hold of it,
counted as ARQ creation counts it.
"""

import pecan

from cyborg import exception
from cyborg.api import expose
from cyborg.api.controllers import resource
from cyborg.db.api import project_usage
from cyborg.quota import enforcement

FROM_VERSION = (2, 8)
# The project_id column's width.
MAX_PROJECT_ID = 255


def _project(request, params):
    asked = params.get('project_id')
    if asked is None:
        project_id = request.context.project_id
        if not project_id:
            raise exception.Invalid(
                'Name the project with ?project_id= or use a project-scoped '
                'token.', code='cyborg.limits.no_project')
        return project_id
    if not isinstance(asked, str) or not asked or (
            len(asked) > MAX_PROJECT_ID) or not asked.isprintable():
        raise exception.Invalid(
            'project_id must be given once, as a project id of 1 to %d '
            'printable characters.' % MAX_PROJECT_ID,
            code='cyborg.limits.invalid_project')
    return asked


class LimitsController(resource.ResourceController):

    FROM_VERSION = FROM_VERSION

    @expose.json()
    def get_all(self, **params):
        request = pecan.request
        project_id = _project(request, params)
        request.authorize('cyborg:limits:get', {'project_id': project_id})
        limits = request.app_state.limits
        usage = project_usage.usage_of(request.context, project_id)
        return {'project_id': project_id, 'enforced': limits.enforced,
                'limits': enforcement.report(
                    limits.limits_of(project_id), usage)}
