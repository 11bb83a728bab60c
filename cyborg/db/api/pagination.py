"""Sorting, limits and markers for collection queries, applied in SQL."""

import sqlalchemy as sa

from cyborg import exception


def paginate(session, stmt, model, limit=None, marker=None,
             sort_key='id', sort_dir='asc'):
    """Return ``stmt`` ordered by ``sort_key`` (then id) and cut at a marker.

    ``marker`` is the uuid of the last item of the previous page.
    """
    column = getattr(model, sort_key)
    direction = sa.asc if sort_dir == 'asc' else sa.desc
    if marker is not None:
        row = session.execute(
            sa.select(column, model.id).where(model.uuid == marker)
        ).one_or_none()
        if row is None:
            raise exception.NotFound(
                'The marker %s does not name an item of this collection.'
                % marker, code='cyborg.marker_not_found')
        after = sa.tuple_(column, model.id) > tuple(row)
        before = sa.tuple_(column, model.id) < tuple(row)
        stmt = stmt.where(after if sort_dir == 'asc' else before)
    stmt = stmt.order_by(direction(column), direction(model.id))
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt
