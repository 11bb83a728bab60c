"""Sorting, limits and markers for collection queries, applied in SQL.

Pages are cut by the position of the marker (keyset pagination): the
rows after ``(sort value, id)`` of the marker's row in the sort order.
The id breaks ties, so that pages neither repeat nor skip rows. A NULL
sorts before every value, on every engine: first in ascending order,
last in descending (PostgreSQL on its own would do the opposite, and a
comparison with NULL is never true, so a NULL in the marker's position
would end the walk early).
"""

import sqlalchemy as sa

from cyborg import exception


def paginate(connection, stmt, model, limit=None, marker=None,
             sort_key='id', sort_dir='asc', visible=None):
    """Return ``stmt`` ordered by ``sort_key`` (then id) and cut at a marker.

    ``marker`` is the uuid of the last item of the previous page;
    ``connection`` (a session or a Core connection) looks it up among
    the rows that meet ``visible`` (a condition, e.g. the caller's
    project): any other is answered as an unknown marker.
    """
    column = None if sort_key == 'id' else getattr(model, sort_key)
    ascending = sort_dir == 'asc'
    nullable = column is not None and model.__table__.c[sort_key].nullable
    if marker is not None:
        found = sa.select(model.id if column is None else column,
                          model.id).where(model.uuid == marker)
        if visible is not None:
            found = found.where(visible)
        row = connection.execute(found).one_or_none()
        if row is None:
            raise exception.NotFound(
                'The marker %s does not name an item of this collection.'
                % marker, code='cyborg.marker_not_found')
        stmt = stmt.where(_after(model.id, column, nullable, ascending,
                                 *row))
    direction = sa.asc if ascending else sa.desc
    keys = [] if column is None else [column]
    if nullable:
        # 0 for NULL: NULLs sort before every value.
        keys.insert(0, sa.case((column.is_(None), 0), else_=1))
    stmt = stmt.order_by(*[direction(key) for key in keys + [model.id]])
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt


def _after(id_column, column, nullable, ascending, value, row_id):
    """The condition of the rows that come after ``(value, row_id)`` in
    the order of ``column`` (None: the id alone), then the id."""
    later_id = id_column > row_id if ascending else id_column < row_id
    if column is None:
        return later_id
    if value is None:
        if ascending:
            # The rest of the NULLs, then every value.
            return sa.or_(sa.and_(column.is_(None), later_id),
                          column.is_not(None))
        return sa.and_(column.is_(None), later_id)
    beyond = column > value if ascending else column < value
    after = sa.or_(beyond, sa.and_(column == value, later_id))
    if nullable and not ascending:
        after = sa.or_(after, column.is_(None))
    return after
