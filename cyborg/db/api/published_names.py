"""The resource classes and traits this service's providers publish, as
the deployables in the database say: what a device profile's names are
checked against across upgrades."""

import json

import os_traits
import sqlalchemy as sa

from cyborg.db import models
from cyborg.objects import inventory

# Traits every provider gets at sync, and those made per NUMA node of a
# pool (their node numbers are not stored): a profile may always name
# them.
ALWAYS = frozenset({os_traits.OWNER_CYBORG})
NUMA_PREFIX = 'CUSTOM_NUMA_NODE_'


def published(connection):
    """(resource classes, traits) that some deployable publishes."""
    Deployable = models.Deployable
    classes, traits = set(), set(ALWAYS)
    for resource_class, names in connection.execute(sa.select(
            Deployable.resource_class,
            sa.type_coerce(Deployable.traits, sa.Text))):
        if resource_class:
            classes.add(resource_class)
        traits.update(json.loads(names) if names else ())
    classes.update(
        key[len(inventory.EXTRA_INVENTORY):] for key in connection.execute(
            sa.select(models.Attribute.key).where(models.Attribute.key.like(
                inventory.EXTRA_INVENTORY + '%')).distinct()).scalars())
    return classes, traits


def is_published(kind, name, classes, traits):
    """Whether a ``resources`` or ``trait`` key's ``name`` is one a
    provider publishes."""
    if kind == 'resources':
        return name in classes
    return name in traits or name.startswith(NUMA_PREFIX)
