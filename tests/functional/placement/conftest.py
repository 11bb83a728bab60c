"""A real Placement (openstack-placement on SQLite) for each test."""

import pytest

from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.placement_service import placement_url  # noqa: F401

COMPUTE_HOST = 'compute1.example.com'


@pytest.fixture
def client(placement):  # noqa: F811
    """The client under test; its call counter starts at zero."""
    return placement.client()


@pytest.fixture
def observer(placement):  # noqa: F811
    """A second client to look at Placement without touching the
    counters of the one under test."""
    return placement.client()


@pytest.fixture
def compute_node(placement):  # noqa: F811
    """The compute-node RP that Nova would have made for this host."""
    return create_compute_node(placement.adapter(), COMPUTE_HOST)
