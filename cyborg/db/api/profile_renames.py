"""Device profiles whose custom names became standard ones.

A name an operator or a driver made up (``CUSTOM_X``) may later become a
standard one (``X``, in os-traits or os-resource-classes), and the
providers then publish ``X``. A profile that still asks for ``CUSTOM_X``
finds no provider: once a deployable publishes ``X`` and none publishes
``CUSTOM_X`` any more, its groups are rewritten to ``X`` as a new
revision (reason ``migrated``); its earlier revisions, and the ARQs made
from them, are kept. While both names are published, or neither, the
profile is left alone, and ``cyborg-status upgrade check`` names what no
provider publishes.
"""

import os_resource_classes
import os_traits
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import device_profiles
from cyborg.db.api import published_names

CUSTOM = 'CUSTOM_'
STANDARD = {'resources': frozenset(os_resource_classes.STANDARDS),
            'trait': frozenset(os_traits.get_traits())}
Profile = models.DeviceProfile


def names_of(groups):
    """(kind, name, value) of every ``resources:`` and ``trait:`` key of
    ``groups``, kind ``resources`` or ``trait``."""
    for group in groups:
        for key, value in group.items():
            kind, _, name = key.partition(':')
            if kind in STANDARD:
                yield kind, name, value


def renames(groups, classes, traits):
    """{(kind, CUSTOM_X): X} for the custom names of ``groups`` that
    became standard and that providers (``classes``, ``traits``) have
    moved to."""
    found = {}
    for kind, name, _ in names_of(groups):
        standard = name[len(CUSTOM):]
        if (name.startswith(CUSTOM) and standard in STANDARD[kind]
                and published_names.is_published(kind, standard, classes,
                                                 traits)
                and not published_names.is_published(kind, name, classes,
                                                     traits)):
            found[kind, name] = standard
    return found


def renamed(groups, found):
    """``groups`` with the names of ``found`` (``renames``) replaced,
    keys and group order kept."""
    return [{_renamed_key(key, found): value for key, value in group.items()}
            for group in groups]


def _renamed_key(key, found):
    kind, _, name = key.partition(':')
    return '%s:%s' % (kind, found[kind, name]) if (kind, name) in found \
        else key


def to_rename(connection):
    """[(uuid, revision, new groups)] of the profiles to rewrite."""
    classes, traits = published_names.published(connection)
    todo = []
    for uuid, revision, profile_json in connection.execute(sa.select(
            Profile.uuid, Profile.revision, Profile.profile_json)
            .order_by(Profile.id)):
        groups = profile_json['groups']
        found = renames(groups, classes, traits)
        if found:
            todo.append((uuid, revision, renamed(groups, found)))
    return todo


def rename(context, max_count):
    """The online data migration: rewrite at most ``max_count`` profiles,
    each only if still at the revision read; (found, done)."""
    with context.db.read_connection(context) as connection:
        todo = to_rename(connection)[:max_count]
    done = 0
    for uuid, revision, groups in todo:
        if device_profiles.update_profile(
                context, {'groups': groups}, uuid=uuid,
                expected_revision=revision,
                reason=device_profiles.MIGRATED) is not None:
            done += 1
    return len(todo), done


def pending(connection):
    """How many profiles ``rename`` has left."""
    return len(to_rename(connection))


def unpublished(connection):
    """{profile name: [(kind, name)]} of the resource classes and required
    traits that no provider publishes."""
    classes, traits = published_names.published(connection)
    found = {}
    for name, profile_json in connection.execute(sa.select(
            Profile.name, Profile.profile_json).order_by(Profile.name)):
        missing = sorted({
            (kind, key) for kind, key, value in names_of(
                profile_json['groups'])
            if (kind == 'resources' or value == 'required')
            and not published_names.is_published(kind, key, classes,
                                                 traits)})
        if missing:
            found[name] = missing
    return found
