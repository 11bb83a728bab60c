"""Device profile queries.

A profile's name, description and groups change by revisions: each
change adds one to ``device_profile_revisions`` and the profile row holds
the current one, so that an ARQ binds by the revision it was made from.
Every write of a profile (revision, enabled, access) bumps its
``generation``, which ARQ creation checks in its INSERT.

Non-admin callers see a profile only if it is enabled and public, or
private with their project among its projects (``visible_to``).
"""

import functools
import json

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db import prepared
from cyborg.db.api import arqs
from cyborg.db.api import pagination
from cyborg.objects import inventory

DeviceProfile = models.DeviceProfile
Revision = models.DeviceProfileRevision
ProfileProject = models.DeviceProfileProject
ARQ = models.ExtendedAcceleratorRequest

# Why a revision was made.
CREATED = 'created'
UPDATED = 'updated'
MIGRATED = 'migrated'


def visible_to(project_id):
    """The clause of the profiles a caller of ``project_id`` (not an
    admin) sees: enabled, and public or shared with the project."""
    shared = sa.select(ProfileProject.device_profile_id).where(
        ProfileProject.project_id == project_id)
    return sa.and_(DeviceProfile.enabled == sa.true(),
                   sa.or_(DeviceProfile.is_public == sa.true(),
                          DeviceProfile.id.in_(shared)))


def list_profiles(context, names=None, **page):
    """Profiles as rows with the model's attribute names (read-only)."""
    with context.db.read_connection(context) as connection:
        stmt = sa.select(DeviceProfile.__table__)
        if names:
            stmt = stmt.where(DeviceProfile.name.in_(names))
        stmt = pagination.paginate(connection, stmt, DeviceProfile, **page)
        return connection.execute(stmt).all()


def listed_profiles(context, names=None, project_id=None, **page):
    """``list_profiles`` for the API's list: rows of ``LISTED``,
    ``profile_json`` as its JSON text, which ``groups_of`` reads,
    ``enabled`` and ``is_public`` as the driver gives them. With
    ``project_id``, only what that project sees (``visible_to``); None
    for an admin's list of every profile."""
    if not names and page.get('marker') is None:
        shape = (page.get('limit'), page.get('sort_key', 'id'),
                 page.get('sort_dir', 'asc'))
        if project_id is None:
            return context.db.read_prepared(context,
                                            _unfiltered_listing(*shape))
        return context.db.read_prepared(context, _visible_listing(*shape),
                                        {'visible_to': project_id})
    visible = None if project_id is None else visible_to(project_id)
    with context.db.read_connection(context) as connection:
        stmt = _listing()
        if visible is not None:
            stmt = stmt.where(visible)
        if names:
            stmt = stmt.where(DeviceProfile.name.in_(names))
        stmt = pagination.paginate(connection, stmt, DeviceProfile,
                                   visible=visible, **page)
        return connection.execute(stmt).all()


# The columns of a listed profile, in this order.
LISTED = ('uuid', 'name', 'description', 'profile_json', 'created_at',
          'updated_at', 'revision', 'enabled', 'is_public')


# Read as the driver gives them (so that the list stays on the fast path
# of ``prepared``): the JSON as its text, booleans as the driver's 0/1 or
# bool, which the API's view makes a bool.
_AS_DRIVER_GIVES = {'profile_json': sa.Text, 'enabled': sa.Integer,
                    'is_public': sa.Integer}


def _listing():
    columns = DeviceProfile.__table__.c
    return sa.select(*[
        sa.type_coerce(columns[name], _AS_DRIVER_GIVES[name]).label(name)
        if name in _AS_DRIVER_GIVES else columns[name] for name in LISTED])


@functools.lru_cache(maxsize=32)
def _visible_listing(limit, sort_key, sort_dir):
    # A project's list, its project bound at each call.
    return prepared.Prepared(pagination.paginate(
        None, _listing().where(visible_to(sa.bindparam('visible_to'))),
        DeviceProfile, limit=limit, sort_key=sort_key, sort_dir=sort_dir))


@functools.lru_cache(maxsize=32)
def _unfiltered_listing(limit, sort_key, sort_dir):
    # The common list call, built once per page shape.
    return prepared.Prepared(pagination.paginate(
        None, _listing(), DeviceProfile, limit=limit, sort_key=sort_key,
        sort_dir=sort_dir))


def resource_classes_used(context):
    """The resource classes the profiles' current revisions ask for,
    sorted."""
    with context.db.read_connection(context) as connection:
        documents = connection.execute(
            sa.select(DeviceProfile.profile_json)).scalars()
        return sorted({rc for document in documents
                       for group in document['groups']
                       for rc in inventory.resources_asked(group)})


def groups_of(profile_json_text):
    """The groups of a profile listed by ``listed_profiles``; shared
    between calls, so for reading only."""
    return _decoded(profile_json_text)['groups']


@functools.lru_cache(maxsize=1024)
def _decoded(text):
    # Profiles are few and rarely change: each text is decoded once.
    return json.loads(text)


def get_profile(context, uuid=None, name=None, project_id=None):
    """The profile with this uuid or name; NotFound if there is none, or
    if it is not ``visible_to(project_id)`` (None: every profile is)."""
    with context.db.reader(context) as session:
        return find(session, uuid, name, project_id)


def find(session, uuid=None, name=None, project_id=None,
         for_update=False):
    """The profile with this uuid or name in ``session``'s transaction
    (locked ``for_update``); NotFound as ``get_profile``."""
    column, value = ((DeviceProfile.uuid, uuid) if uuid is not None
                     else (DeviceProfile.name, name))
    stmt = sa.select(DeviceProfile).where(column == value)
    if project_id is not None:
        stmt = stmt.where(visible_to(project_id))
    if for_update:
        stmt = stmt.with_for_update()
    profile = session.scalars(stmt).one_or_none()
    if profile is None:
        raise exception.NotFound(
            'No device profile with %s %s exists.'
            % ('uuid' if uuid is not None else 'name',
               uuid if uuid is not None else name),
            code='cyborg.device_profile.not_found')
    return profile


def revisions(context, uuid=None, name=None, project_id=None):
    """The profile (as ``get_profile`` finds it) and its revisions,
    oldest first, read together."""
    with context.db.reader(context) as session:
        profile = find(session, uuid, name, project_id)
        return profile, session.scalars(
            sa.select(Revision).where(
                Revision.device_profile_id == profile.id)
            .order_by(Revision.revision)).all()


def create_profiles(context, profiles):
    """Create every profile of ``profiles`` or none of them.

    Each item is a dict with uuid, name, description, groups and
    (optional, default True) is_public; each gets its first revision.
    """
    names = [p['name'] for p in profiles]
    uuids = [p['uuid'] for p in profiles]
    _refuse_repeats('name', names)
    _refuse_repeats('uuid', uuids)
    rows = [DeviceProfile(uuid=p['uuid'], name=p['name'],
                          description=p['description'],
                          profile_json={'groups': p['groups']},
                          revision=1, generation=1, enabled=True,
                          is_public=p.get('is_public', True))
            for p in profiles]
    try:
        with context.db.writer(context) as session:
            taken = session.execute(
                sa.select(DeviceProfile.name, DeviceProfile.uuid).where(
                    sa.or_(DeviceProfile.name.in_(names),
                           DeviceProfile.uuid.in_(uuids)))).all()
            for name, uuid in taken:
                field, value = (('name', name) if name in names
                                else ('uuid', uuid))
                raise _duplicate(field, value)
            session.add_all(rows)
            session.flush()
            session.add_all([_revision_of(row, CREATED) for row in rows])
    except db_exc.DBDuplicateEntry as e:
        # Lost a race with another request creating the same profile.
        field = 'uuid' if 'uuid' in (e.columns or []) else 'name'
        raise _duplicate(field, e.value) from e
    return rows


def _revision_of(profile, reason):
    return Revision(device_profile_id=profile.id, revision=profile.revision,
                    name=profile.name, description=profile.description,
                    profile_json=profile.profile_json, reason=reason)


# What an update may change, and the columns whose change makes a new
# revision.
UPDATABLE = ('name', 'description', 'groups', 'enabled', 'is_public')
_REVISED = ('name', 'description', 'profile_json')


def update_profile(context, changes, uuid=None, name=None,
                   expected_revision=None, reason=UPDATED):
    """Apply ``changes`` ({field of ``UPDATABLE``: new value}, groups
    checked by the caller) to the profile with this uuid or name, in one
    transaction; returns the profile as it is now.

    A change of name, description or groups makes a new revision, kept;
    every change bumps the generation; a change to what a profile already
    holds changes nothing. With ``expected_revision``, a profile at another
    revision is left alone and None returned (a compare-and-set: an
    online data migration's). ``reason`` is the new revision's. A rename
    is refused (Conflict) while ARQs of the profile exist: a flavor naming
    the old name would otherwise find nothing, or another profile made
    later under that name. Making a profile public drops its project
    list.
    """
    try:
        with context.db.writer(context) as session:
            profile = find(session, uuid, name, for_update=True)
            if (expected_revision is not None
                    and profile.revision != expected_revision):
                return None
            old_name = profile.name
            wanted = dict(changes)
            if 'groups' in wanted:
                wanted['profile_json'] = {'groups': wanted.pop('groups')}
            changed = {field: new for field, new in wanted.items()
                       if getattr(profile, field) != new}
            if not changed:
                return profile
            if 'name' in changed:
                _check_rename(session, profile, changed['name'])
            for field, new in changed.items():
                setattr(profile, field, new)
            if any(field in changed for field in _REVISED):
                profile.revision += 1
                session.add(_revision_of(profile, reason))
            if changed.get('is_public') is True:
                session.execute(sa.delete(ProfileProject).where(
                    ProfileProject.device_profile_id == profile.id))
            profile.generation += 1
            session.flush()
    except db_exc.DBDuplicateEntry as e:
        raise _duplicate('name', changes.get('name')) from e
    arqs.forget_profile(old_name)
    arqs.forget_profile(profile.name)
    return profile


def _check_rename(session, profile, new_name):
    taken = session.execute(sa.select(DeviceProfile.id).where(
        DeviceProfile.name == new_name)).first()
    if taken is not None:
        raise _duplicate('name', new_name)
    used = session.execute(sa.select(sa.func.count()).where(
        ARQ.device_profile_id == profile.id)).scalar_one()
    if used:
        raise exception.Conflict(
            'Device profile %s cannot be renamed while %d accelerator '
            'requests made from it exist: flavors name profiles by name. '
            'Delete those requests first.' % (profile.name, used),
            code='cyborg.device_profile.in_use')


def delete_profiles(context, uuids=(), names=()):
    """Delete the named profiles, all or none (NotFound, Conflict if used)."""
    wanted = sa.or_(DeviceProfile.uuid.in_(uuids),
                    DeviceProfile.name.in_(names))
    try:
        with context.db.writer(context) as session:
            found = session.execute(
                sa.select(DeviceProfile.id, DeviceProfile.uuid,
                          DeviceProfile.name).where(wanted)).all()
            missing = (set(uuids) - {r.uuid for r in found}) | (
                set(names) - {r.name for r in found})
            if missing:
                raise exception.NotFound(
                    'No device profile named or with uuid %s exists.'
                    % ', '.join(sorted(missing)),
                    code='cyborg.device_profile.not_found')
            ids = [r.id for r in found]
            ARQ = models.ExtendedAcceleratorRequest
            used = session.execute(
                sa.select(DeviceProfile.name).join(
                    ARQ, ARQ.device_profile_id == DeviceProfile.id).where(
                    DeviceProfile.id.in_(ids)).distinct()).scalars().all()
            if used:
                raise _in_use(used)
            session.execute(
                sa.delete(DeviceProfile).where(DeviceProfile.id.in_(ids)))
    except db_exc.DBReferenceError as e:
        # An ARQ was made from the profile while we were deleting it.
        raise _in_use([r.name for r in found]) from e
    for row in found:
        arqs.forget_profile(row.name)


def _refuse_repeats(field, values):
    seen = set()
    for value in values:
        if value in seen:
            raise exception.Invalid(
                'The request names device profile %s %s twice.'
                % (field, value), code='cyborg.device_profile.duplicate')
        seen.add(value)


def _duplicate(field, value):
    return exception.Conflict(
        'A device profile with %s %s already exists.' % (field, value),
        code='cyborg.device_profile.duplicate')


def _in_use(names):
    return exception.Conflict(
        'Device profile %s is used by accelerator requests; delete those '
        'first.' % ', '.join(sorted(names)),
        code='cyborg.device_profile.in_use')
