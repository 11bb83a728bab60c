"""The forms of a uuid that the API takes, and the one spelling it stores.

A uuid in a path, a filter or a body may be written with or without its
hyphens (8-4-4-4-12 or 32 hex digits), in either case, in braces or as a
``urn:uuid:`` name: the forms Python's ``uuid`` module reads and writes.
Each is turned into the lower-case hyphenated form, the one stored, before
it reaches a query. Other spellings that module lets through (hyphens
anywhere, digits of other scripts) are refused.
"""

import re
import uuid

from wsme import types as wtypes

_HYPHENATED = '-'.join('[0-9a-f]{%d}' % n for n in (8, 4, 4, 4, 12))
_BODY = '(?:%s|[0-9a-f]{32})' % _HYPHENATED
_FORM = re.compile(r'\A(?:%s|\{%s\}|urn:uuid:%s)\Z' % ((_BODY,) * 3),
                   re.IGNORECASE | re.ASCII)


def canonical(value):
    """``value`` as a lower-case hyphenated uuid, or None if it is not a
    string in one of the accepted forms."""
    if isinstance(value, str) and _FORM.match(value):
        # The uuid module reads braces and a lower-case urn: prefix.
        return str(uuid.UUID(value.lower()))
    return None


class UuidType(wtypes.UserType):
    """A WSME field holding a uuid, read with ``canonical``."""

    basetype = str
    name = 'uuid'

    @staticmethod
    def validate(value):
        checked = canonical(value)
        if checked is None:
            raise ValueError('Value should be UUID format')
        return checked
