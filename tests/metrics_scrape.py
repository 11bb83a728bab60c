"""A metrics endpoint scraped as Prometheus scrapes it: an HTTP GET, the
text format read by prometheus_client's own parser; and an agent's
devices observed as its periodic observation does, for the agent's
endpoint to show."""

import urllib.request

from prometheus_client import parser


class Scrape:
    """One scrape's samples, by sample name."""

    def __init__(self, text):
        self.text = text
        self.families = {f.name: f for f in
                         parser.text_string_to_metric_families(text)}
        self.by_name = {}
        for family in self.families.values():
            for sample in family.samples:
                self.by_name.setdefault(sample.name, []).append(
                    (sample.labels, sample.value))

    def samples(self, name, **labels):
        """``[(labels, value)]`` of ``name`` whose labels include
        ``labels``."""
        return [(found, value) for found, value in self.by_name.get(name, [])
                if all(found.get(k) == v for k, v in labels.items())]

    def value(self, name, **labels):
        """The value of the one sample of ``name`` with ``labels``."""
        found = self.samples(name, **labels)
        assert len(found) == 1, (name, labels, found)
        return found[0][1]

    def type_of(self, name):
        return self.families[name].type


def scrape(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        assert response.headers['Content-Type'].startswith('text/plain')
        return Scrape(response.read().decode())


def observe(manager):
    """What the agent's periodic observation keeps: each driver's
    observations by address, and the discovery they were made of."""
    observations = {}
    for driver in manager.drivers:
        for observation in driver.observe(driver.discover()):
            observations[observation.address] = observation
    manager.discover()
    manager.last_observations = observations
