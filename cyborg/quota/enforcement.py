"""Whether a creation of ARQs fits in a project's limits, and what the
project is told when it does not."""

from oslo_limit import exception as limit_exc

from cyborg import exception
from cyborg.quota import resources


class QuotaExceeded(exception.Forbidden):
    code = 'cyborg.quota.exceeded'

    def __init__(self, project_id, over):
        self.over = over  # oslo.limit's OverLimitInfo, one per limit
        super().__init__(
            'Project %s is over its limits, so no accelerator request was '
            'created: %s. Delete accelerator requests it no longer needs, '
            'or ask an administrator to raise the limits.' % (
                project_id, '; '.join(
                    '%s limit %d, in use %d, requested %d' % (
                        o.resource_name, o.limit, o.current_usage, o.delta)
                    for o in over)))


def over_limits(limits, usage, asked):
    """oslo.limit's ``OverLimitInfo`` of each limit that ``asked`` on top
    of ``usage`` (``project_usage.Usage``) would pass, by name; ``limits``
    is {resource name: limit}, -1 unlimited, a name missing unlimited."""
    used = resources.by_name(usage)
    over = []
    for name, delta in sorted(resources.by_name(asked).items()):
        limit = limits.get(name, -1)
        if limit >= 0 and used.get(name, 0) + delta > limit:
            over.append(limit_exc.OverLimitInfo(name, limit,
                                                used.get(name, 0), delta))
    return over


def checker(limits, project_id):
    """The ``within_limits`` of ``arqs.create_arqs`` for ``project_id``
    under ``limits``: raises QuotaExceeded naming each limit passed."""

    def within_limits(usage, asked, profile_name):
        over = over_limits(limits, usage, asked)
        if over:
            raise QuotaExceeded(project_id, over)

    return within_limits


def report(limits, usage):
    """[{resource_name, limit, usage}, ...] by name: every resource with a
    limit, every one in use, and ``accelerator_requests`` always; -1 for
    no limit."""
    used = resources.by_name(usage)
    return [{'resource_name': name, 'limit': limits.get(name, -1),
             'usage': used.get(name, 0)}
            for name in sorted(set(limits) | set(used))]
