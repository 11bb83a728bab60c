"""Sorting, limits and markers for collection queries, applied in SQL."""

import sqlalchemy as sa

from cyborg import exception


def paginate(connection, stmt, model, limit=None, marker=None,
             sort_key='id', sort_dir='asc'):
    """Return ``stmt`` ordered by ``sort_key`` (then id) and cut at a marker.

    ``marker`` is the uuid of the last item of the previous page;
    ``connection`` (a session or a Core connection) looks it up.
    """
    # The id breaks ties, so that pages neither repeat nor skip rows.
    keys = [getattr(model, sort_key)]
    if sort_key != 'id':
        keys.append(model.id)
    direction = sa.asc if sort_dir == 'asc' else sa.desc
    if marker is not None:
        row = connection.execute(
            sa.select(*keys).where(model.uuid == marker)).one_or_none()
        if row is None:
            raise exception.NotFound(
                'The marker %s does not name an item of this collection.'
                % marker, code='cyborg.marker_not_found')
        position = sa.tuple_(*keys)
        stmt = stmt.where(position > tuple(row) if sort_dir == 'asc'
                          else position < tuple(row))
    stmt = stmt.order_by(*[direction(key) for key in keys])
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt
