"""Query parameters shared by collections (limit, marker and sorting)
and the link to a list's next page."""

from urllib import parse

from cyborg import exception
from cyborg.api import uuids
from cyborg.api import views

SORT_DIRS = ('asc', 'desc')


def single(params, name):
    """Query parameter ``name``, or None when absent; 400 when given more
    than once (pecan then hands over a list)."""
    value = params.get(name)
    if isinstance(value, list):
        raise exception.Invalid('Give %s= at most once.' % name,
                                code='cyborg.repeated_parameter')
    return value


def page_params(request, params, sort_keys):
    """``limit``, ``marker``, ``sort_key`` and ``sort_dir`` of a list call.

    Other query parameters are the collection's own filters; unknown
    ones are ignored, as clients send some that only they understand.
    """
    max_limit = request.app_state.conf.api.max_limit
    limit = single(params, 'limit')
    if limit is None:
        limit = max_limit
    else:
        try:
            limit = int(limit)
        except ValueError:
            limit = 0
        if limit < 1:
            raise exception.Invalid(
                'limit must be a positive whole number, not %r.'
                % params['limit'], code='cyborg.invalid_limit')
        limit = min(limit, max_limit)
    marker = single(params, 'marker')
    if marker is not None:
        checked = uuids.canonical(marker)
        if checked is None:
            raise exception.Invalid(
                'marker must be the uuid of an item, not %r.' % marker,
                code='cyborg.invalid_marker')
        marker = checked
    sort_key = single(params, 'sort_key')
    if sort_key is None:
        sort_key = 'id'
    if sort_key != 'id' and sort_key not in sort_keys:
        raise exception.Invalid(
            'sort_key must be one of %s, not %r.'
            % (', '.join(sorted(sort_keys)), sort_key),
            code='cyborg.invalid_sort_key')
    sort_dir = single(params, 'sort_dir')
    if sort_dir is None:
        sort_dir = 'asc'
    if sort_dir not in SORT_DIRS:
        raise exception.Invalid(
            'sort_dir must be asc or desc, not %r.' % sort_dir,
            code='cyborg.invalid_sort_dir')
    return {'limit': limit, 'marker': marker, 'sort_key': sort_key,
            'sort_dir': sort_dir}


def listing(request, name, items, page):
    """The body of a list: ``{name: items}``, and ``next``, the URL of the
    following page, whenever this page is full (it reached ``limit`` or
    ``[api] max_limit``): a full page may be followed by more. ``page``
    is what ``page_params`` returned, or nothing for an uncut list."""
    return listing_at(views.base_url(request), request.path_info,
                      request.query_string, name, items, page)


def listing_at(base_url, path, query_string, name, items, page):
    """``listing`` for a request to ``base_url``, ``path`` and
    ``query_string``: of these arguments alone."""
    body = {name: items}
    limit = page.get('limit') if page else None
    if items and limit is not None and len(items) >= limit:
        query = [(key, value) for key, value
                 in parse.parse_qsl(query_string, keep_blank_values=True)
                 if key != 'marker']
        query.append(('marker', items[-1]['uuid']))
        body['next'] = '%s%s?%s' % (base_url, path, parse.urlencode(query))
    return body
