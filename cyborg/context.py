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
        # The legacy admin rule checks it; oslo.context leaves it out.
        values['is_admin'] = self.is_admin
        return values


def admin_context(db, project_id=None):
    """A context for the services' own work (no caller behind it)."""
    return RequestContext(db=db, is_admin=True, roles=['admin'],
                          project_id=project_id, overwrite=False)
