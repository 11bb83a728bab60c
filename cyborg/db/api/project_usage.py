"""What a project's accelerator requests (ARQs) hold, as limits count it.

Every ARQ of the project counts until it is deleted, whatever its state:
each holds a device or may come to (an Unbound or BindFailed ARQ can be
bound again without being made anew). An ARQ counts one accelerator
request, one accelerator of its profile, and its share of its group's
resources: a group asking for ``resources:VGPU=2`` makes two ARQs of one
VGPU each; a MIG group makes one ARQ holding all its slices.

``locked_usage`` is read in the creating transaction after the
project's ``project_quota_locks`` row is locked, so that concurrent
creations of one project count each other's ARQs.
"""

import dataclasses
import math

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg.db import models
from cyborg.objects import inventory

ARQ = models.ExtendedAcceleratorRequest
Profile = models.DeviceProfile
Revision = models.DeviceProfileRevision
Lock = models.ProjectQuotaLock

# Revisions never change once written: the groups of (profile uuid,
# revision) may be kept for good (by uuid: an id may name another profile
# in another database, or after a restore).
_GROUPS = {}
_GROUPS_MAX = 4096


@dataclasses.dataclass
class Usage:
    arqs: int = 0
    by_class: dict = dataclasses.field(default_factory=dict)
    by_profile: dict = dataclasses.field(default_factory=dict)


def asked(groups):
    """The ``Usage`` one creation from a profile's ``groups`` adds,
    without its profile (``by_profile`` is the caller's)."""
    usage = Usage()
    for group in groups:
        usage.arqs += inventory.accelerators_asked(group)
        for rc, amount in inventory.resources_asked(group).items():
            usage.by_class[rc] = usage.by_class.get(rc, 0) + amount
    return usage


_COUNTS = sa.select(
    ARQ.device_profile_id, Profile.uuid, ARQ.device_profile_revision,
    ARQ.device_profile_group_id, Profile.name, sa.func.count()
).join(Profile, Profile.id == ARQ.device_profile_id).where(
    ARQ.project_id == sa.bindparam('project_id')
).group_by(ARQ.device_profile_id, Profile.uuid, ARQ.device_profile_revision,
           ARQ.device_profile_group_id, Profile.name)


def usage_of(context, project_id):
    """The ``Usage`` of ``project_id``'s ARQs, in a reader transaction."""
    with context.db.read_connection(context) as connection:
        return usage(connection, project_id)


def usage(connection, project_id):
    """The ``Usage`` of ``project_id``'s ARQs, read on ``connection``."""
    counts = connection.execute(_COUNTS, {'project_id': project_id}).all()
    groups = _groups_of(connection, {c[:3] for c in counts})
    found = Usage()
    for _, uuid, revision, group_id, name, count in counts:
        found.arqs += count
        found.by_profile[name] = found.by_profile.get(name, 0) + count
        try:
            group = groups[uuid, revision][group_id]
        except (KeyError, IndexError):
            continue  # a revision lost to a restore: counted as ARQs only
        units = inventory.accelerators_asked(group) or 1
        for rc, amount in inventory.resources_asked(group).items():
            # A group's ARQs are made together; one deleted alone still
            # counts its share rounded up.
            found.by_class[rc] = found.by_class.get(rc, 0) + math.ceil(
                count * amount / units)
    return found


def _groups_of(connection, keys):
    """{(profile uuid, revision): groups} of ``keys``, (profile id,
    profile uuid, revision) each."""
    missing = {(profile_id, revision): uuid
               for profile_id, uuid, revision in keys
               if (uuid, revision) not in _GROUPS}
    if missing:
        rows = connection.execute(
            sa.select(Revision.device_profile_id, Revision.revision,
                      Revision.profile_json).where(
                sa.tuple_(Revision.device_profile_id,
                          Revision.revision).in_(list(missing)))).all()
        if len(_GROUPS) + len(rows) > _GROUPS_MAX:
            _GROUPS.clear()
        for profile_id, revision, profile_json in rows:
            _GROUPS[missing[profile_id, revision], revision] = (
                profile_json['groups'])
    return {(uuid, revision): _GROUPS[uuid, revision]
            for _, uuid, revision in keys if (uuid, revision) in _GROUPS}


def lock(connection, project_id):
    """Lock ``project_id``'s row of ``project_quota_locks`` until the
    transaction ends, making it first if the project has none.

    Two transactions making the first row of a project together: one
    inserts, the other waits for it and then fails on the duplicate (or,
    on MariaDB, on a deadlock of their gap locks); the caller runs its
    transaction again (``retry_if_contended``).
    """
    held = connection.execute(
        sa.select(Lock.project_id).where(Lock.project_id == project_id)
        .with_for_update()).first()
    if held is None:
        connection.execute(sa.insert(Lock), {
            'project_id': project_id, 'created_at': models.utcnow()})


def contended(error):
    """Whether ``error`` is a race of two first ``lock``s: the losing
    transaction may run again."""
    return isinstance(error, (db_exc.DBDuplicateEntry, db_exc.DBDeadlock))
