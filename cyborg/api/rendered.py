"""List bodies rendered once for the rows they came from.

A list is read from the database on every request (another worker may
have changed it since), but its rows change rarely. Its body is a
function of those rows and of the request's URL alone, so when a request
reads the very rows an earlier one read for the same URL, the JSON that
request encoded is sent again instead of building the views and encoding
them anew.
"""

import collections
import json
import threading

from cyborg.api import expose


class RenderedLists:
    """The last body rendered for each of the ``size`` URLs last asked."""

    def __init__(self, size=32):
        self._size = size
        self._bodies = collections.OrderedDict()
        self._lock = threading.Lock()

    def body(self, key, rows, build):
        """The JSON of ``build()``, the body for ``rows`` at ``key``: the
        one rendered before when ``rows`` equal the rows it came from.
        ``build`` must depend on nothing but ``rows`` and ``key``."""
        with self._lock:
            found = self._bodies.get(key)
            if found is not None and found[0] == rows:
                self._bodies.move_to_end(key)
                return found[1]
        body = expose.Encoded(json.dumps(build()))
        with self._lock:
            self._bodies[key] = (rows, body)
            self._bodies.move_to_end(key)
            while len(self._bodies) > self._size:
                self._bodies.popitem(last=False)
        return body

    def __len__(self):
        return len(self._bodies)
