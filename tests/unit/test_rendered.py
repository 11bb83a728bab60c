"""List bodies rendered once for the rows they came from."""

import json

from cyborg.api import expose
from cyborg.api import rendered


class Builds:
    def __init__(self):
        self.count = 0

    def __call__(self, rows):
        def build():
            self.count += 1
            return {'items': [list(r) for r in rows]}
        return build


def test_the_same_rows_at_the_same_key_render_once():
    lists, builds = rendered.RenderedLists(), Builds()
    rows = [('a', 1), ('b', 2)]

    first = lists.body('k', rows, builds(rows))
    again = lists.body('k', list(rows), builds(rows))

    assert builds.count == 1
    assert again is first
    assert isinstance(first, expose.Encoded)
    assert json.loads(first) == {'items': [['a', 1], ['b', 2]]}


def test_changed_rows_are_rendered_anew():
    lists, builds = rendered.RenderedLists(), Builds()
    lists.body('k', [('a', 1)], builds([('a', 1)]))

    changed = lists.body('k', [('a', 2)], builds([('a', 2)]))

    assert builds.count == 2
    assert json.loads(changed) == {'items': [['a', 2]]}


def test_another_key_is_another_body():
    lists, builds = rendered.RenderedLists(), Builds()
    rows = [('a', 1)]
    lists.body('k1', rows, builds(rows))
    lists.body('k2', rows, builds(rows))
    lists.body('k1', rows, builds(rows))

    assert builds.count == 2


def test_only_the_last_keys_are_kept():
    lists, builds = rendered.RenderedLists(size=2), Builds()
    rows = [('a', 1)]
    for key in ('k1', 'k2', 'k1', 'k3'):
        lists.body(key, rows, builds(rows))
    assert len(lists) == 2
    # k2 was the least recently used: rendered again; k1 was kept.
    lists.body('k1', rows, builds(rows))
    assert builds.count == 3
    lists.body('k2', rows, builds(rows))
    assert builds.count == 4


def test_the_renderer_sends_an_encoded_body_as_it_is():
    body = expose.Encoded('{"a": 1}')
    renderer = expose.JSONRenderer(None, None)

    assert renderer.render(None, body) is body
    assert renderer.render(None, {'a': 1}) == '{"a": 1}'
