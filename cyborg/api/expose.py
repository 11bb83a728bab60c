"""How controllers answer: JSON bodies rendered by the standard library.

Controllers return plain dicts and lists and set a status other than 200
on ``pecan.response``; a ``None`` result is an empty body, an ``Encoded``
one is sent as it is.
"""

import json as jsonlib

import pecan

RENDERER = 'cyborg_json'


class Encoded(str):
    """A body its controller rendered as JSON already."""


class JSONRenderer:
    """A pecan renderer with no template, just ``json.dumps``."""

    def __init__(self, path, extra_vars):
        pass

    def render(self, template_path, namespace):
        if namespace is None:
            return ''
        if isinstance(namespace, Encoded):
            return namespace
        return jsonlib.dumps(namespace)


def json(**kwargs):
    # "renderer:template"; this renderer needs no template.
    return pecan.expose(RENDERER + ':', content_type='application/json',
                        **kwargs)
