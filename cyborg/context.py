"""The request context: who is calling, and the transaction they are in."""

from oslo_context import context
from oslo_db.sqlalchemy import enginefacade


@enginefacade.transaction_context_provider
class RequestContext(context.RequestContext):
    """oslo.context's request context, usable with ``Database`` transactions.

    ``db`` is the ``cyborg.db.session.Database`` the context works on.
    """

    def __init__(self, db=None, **kwargs):
        super().__init__(**kwargs)
        self.db = db

    def to_policy_values(self):
        values = super().to_policy_values()
        # Lets policy rules say "project_id:%(project_id)s" for the caller.
        values.setdefault('project_id', self.project_id)
        return values


def current():
    """The context oslo.log stamps on this thread's lines, or None."""
    return context.get_current()


def restore_current(previous):
    """Make ``previous`` (a ``current()`` taken earlier) this thread's
    context again.

    A request's context makes itself the thread's current one, and the
    thread then serves other requests and does other work: without this,
    their log lines would carry the finished request's id.
    """
    if previous is not None:
        previous.update_store()
    else:
        # oslo.context has no call that clears it (its fixture does this).
        context._request_store.__dict__.pop('context', None)


def admin_context(db, project_id=None):
    """A context for the services' own work (no caller behind it).

    It does not become the thread's current context: oslo.context makes
    a new context current on a thread that has none, and a periodic
    task's thread would then log every later run with the first run's
    request id.
    """
    previous = current()
    made = RequestContext(db=db, is_admin=True, roles=['admin'],
                          project_id=project_id, overwrite=False)
    restore_current(previous)
    return made
