"""The notifications reference (doc/source/notifications.rst) names every
event type and every payload field, and its samples are notifications
Cyborg could send: each valid by its payload's schema."""

import dataclasses
import json
import pathlib
import re

from cyborg.notifications import emit
from cyborg.notifications import payloads
from tests import notification_sink

DOC = pathlib.Path(__file__).resolve().parents[3] / 'doc' / 'source'
PAGE = DOC / 'notifications.rst'
SAMPLES = DOC / 'notification-samples'


def test_every_sample_is_a_valid_notification_of_its_event():
    samples = {p.name: json.loads(p.read_text())
               for p in SAMPLES.glob('*.json')}
    assert set(samples) == {'%s.json' % e for e in emit.EVENTS}
    page = PAGE.read_text()
    for name, message in samples.items():
        assert message['event_type'] + '.json' == name
        notification_sink.check(message)
        assert 'notification-samples/%s' % name in page


def section(page, kind):
    """The text under the heading ``<NAME> <VERSION>``."""
    heading = '%s %s' % (kind.NAME, kind.VERSION)
    found = re.search(r'^%s\n-+\n(.*?)(?=^\S[^\n]*\n[-=]+\n|\Z)'
                      % re.escape(heading), page, re.M | re.S)
    assert found, 'no section %r in %s' % (heading, PAGE)
    return found.group(1)


def test_the_page_names_every_event_and_field():
    page = PAGE.read_text()
    for event_type in emit.EVENTS:
        assert '``%s``' % event_type in page, event_type
    for kind in payloads.KINDS:
        text = section(page, kind)
        inherited = {f.name for base in kind.__mro__[1:]
                     if dataclasses.is_dataclass(base)
                     for f in dataclasses.fields(base)}
        for field in dataclasses.fields(kind):
            if field.name not in inherited:
                assert '``%s``' % field.name in text, (kind.NAME,
                                                        field.name)
