"""Device profile queries."""

import functools
import json

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db import prepared
from cyborg.db.api import arqs
from cyborg.db.api import pagination

DeviceProfile = models.DeviceProfile


def list_profiles(context, names=None, **page):
    """Profiles as rows with the model's attribute names (read-only)."""
    with context.db.read_connection(context) as connection:
        stmt = sa.select(DeviceProfile.__table__)
        if names:
            stmt = stmt.where(DeviceProfile.name.in_(names))
        stmt = pagination.paginate(connection, stmt, DeviceProfile, **page)
        return connection.execute(stmt).all()


def listed_profiles(context, names=None, **page):
    """``list_profiles`` for the API's list: rows of ``LISTED``,
    ``profile_json`` as its JSON text, which ``groups_of`` reads."""
    if not names and page.get('marker') is None:
        return context.db.read_prepared(context, _unfiltered_listing(
            page.get('limit'), page.get('sort_key', 'id'),
            page.get('sort_dir', 'asc')))
    with context.db.read_connection(context) as connection:
        stmt = _listing()
        if names:
            stmt = stmt.where(DeviceProfile.name.in_(names))
        stmt = pagination.paginate(connection, stmt, DeviceProfile, **page)
        return connection.execute(stmt).all()


# The columns of a listed profile, in this order.
LISTED = ('uuid', 'name', 'description', 'profile_json', 'created_at',
          'updated_at')


def _listing():
    columns = DeviceProfile.__table__.c
    return sa.select(*[sa.type_coerce(columns[name], sa.Text).label(name)
                       if name == 'profile_json' else columns[name]
                       for name in LISTED])


@functools.lru_cache(maxsize=32)
def _unfiltered_listing(limit, sort_key, sort_dir):
    # The common list call, built once per page shape.
    return prepared.Prepared(pagination.paginate(
        None, _listing(), DeviceProfile, limit=limit, sort_key=sort_key,
        sort_dir=sort_dir))


def groups_of(profile_json_text):
    """The groups of a profile listed by ``listed_profiles``; shared
    between calls, so for reading only."""
    return _decoded(profile_json_text)['groups']


@functools.lru_cache(maxsize=1024)
def _decoded(text):
    # Profiles are few and rarely change: each text is decoded once.
    return json.loads(text)


def get_profile(context, uuid=None, name=None):
    """The profile with this uuid or name; NotFound if there is none."""
    column, value = ((DeviceProfile.uuid, uuid) if uuid is not None
                     else (DeviceProfile.name, name))
    with context.db.reader(context) as session:
        profile = session.scalars(
            sa.select(DeviceProfile).where(column == value)).one_or_none()
    if profile is None:
        raise exception.NotFound(
            'No device profile with %s %s exists.'
            % ('uuid' if uuid is not None else 'name', value),
            code='cyborg.device_profile.not_found')
    return profile


def create_profiles(context, profiles):
    """Create every profile of ``profiles`` or none of them.

    Each item is a dict with uuid, name, description and groups.
    """
    names = [p['name'] for p in profiles]
    uuids = [p['uuid'] for p in profiles]
    _refuse_repeats('name', names)
    _refuse_repeats('uuid', uuids)
    rows = [DeviceProfile(uuid=p['uuid'], name=p['name'],
                          description=p['description'],
                          profile_json={'groups': p['groups']})
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
    except db_exc.DBDuplicateEntry as e:
        # Lost a race with another request creating the same profile.
        field = 'uuid' if 'uuid' in (e.columns or []) else 'name'
        raise _duplicate(field, e.value) from e
    return rows


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
