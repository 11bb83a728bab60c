"""List bodies rendered once for the inputs they came from.

A list is read from the database on every request (another worker may
have changed it since), but its rows change rarely. A ``RenderedLists``
holds, per URL, the JSON last rendered and every input it was rendered
from; a request whose inputs are all equal gets that JSON again instead
of building the views and encoding them anew. Nothing is invalidated by
time or by writes: the rows are read anew each time and are part of the
comparison, so a body can never outlive what it shows.
"""

import collections
import json
import threading

from cyborg.api import expose


class RenderedLists:
    """The last body rendered for each of the ``size`` URLs last asked."""

    def __init__(self, render, size=32):
        """``render(rows, *inputs)``: a list's body, built from its
        arguments alone (no request, no clock, no configuration that can
        change while the process runs)."""
        self._render = render
        self._size = size
        self._bodies = collections.OrderedDict()
        self._lock = threading.Lock()

    def body(self, rows, *inputs):
        """The JSON of ``render(rows, *inputs)``: the one rendered before
        when ``rows`` and ``inputs`` equal what it came from. The first
        of ``inputs`` names the URL (a body is kept per URL)."""
        url = inputs[0]
        with self._lock:
            found = self._bodies.get(url)
            if found is not None and found[0] == (rows, inputs):
                self._bodies.move_to_end(url)
                return found[1]
        body = expose.Encoded(json.dumps(self._render(rows, *inputs)))
        with self._lock:
            self._bodies[url] = ((rows, inputs), body)
            self._bodies.move_to_end(url)
            while len(self._bodies) > self._size:
                self._bodies.popitem(last=False)
        return body

    def __len__(self):
        return len(self._bodies)
