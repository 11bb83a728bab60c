"""List bodies rendered once for the inputs they came from."""

import json

from cyborg.api import expose
from cyborg.api import rendered


class Render:
    """A list's body of its arguments alone, counting its calls."""

    def __init__(self):
        self.count = 0

    def __call__(self, rows, url, page=None):
        self.count += 1
        return {'items': [list(r) for r in rows], 'url': url, 'page': page}


def test_the_same_inputs_render_once():
    render = Render()
    lists = rendered.RenderedLists(render)
    rows = [('a', 1), ('b', 2)]

    first = lists.body(rows, 'k', {'limit': 2})
    again = lists.body(list(rows), 'k', {'limit': 2})

    assert render.count == 1
    assert again is first
    assert isinstance(first, expose.Encoded)
    assert json.loads(first) == {'items': [['a', 1], ['b', 2]], 'url': 'k',
                                 'page': {'limit': 2}}


def test_changed_rows_are_rendered_anew():
    render = Render()
    lists = rendered.RenderedLists(render)
    lists.body([('a', 1)], 'k')

    changed = lists.body([('a', 2)], 'k')

    assert render.count == 2
    assert json.loads(changed)['items'] == [['a', 2]]


def test_any_changed_input_is_rendered_anew():
    render = Render()
    lists = rendered.RenderedLists(render)
    rows = [('a', 1)]
    lists.body(rows, 'k', {'limit': 1})

    changed = lists.body(rows, 'k', {'limit': 5})

    assert render.count == 2
    assert json.loads(changed)['page'] == {'limit': 5}


def test_another_url_is_another_body():
    render = Render()
    lists = rendered.RenderedLists(render)
    rows = [('a', 1)]
    lists.body(rows, 'k1')
    lists.body(rows, 'k2')
    lists.body(rows, 'k1')

    assert render.count == 2


def test_only_the_last_urls_are_kept():
    render = Render()
    lists = rendered.RenderedLists(render, size=2)
    rows = [('a', 1)]
    for url in ('k1', 'k2', 'k1', 'k3'):
        lists.body(rows, url)
    assert len(lists) == 2
    # k2 was the least recently used: rendered again; k1 was kept.
    lists.body(rows, 'k1')
    assert render.count == 3
    lists.body(rows, 'k2')
    assert render.count == 4


def test_the_renderer_sends_an_encoded_body_as_it_is():
    body = expose.Encoded('{"a": 1}')
    renderer = expose.JSONRenderer(None, None)

    assert renderer.render(None, body) is body
    assert renderer.render(None, {'a': 1}) == '{"a": 1}'
