"""Accelerator request (ARQ) queries.

Every change of an ARQ's state is a compare-and-set: ``UPDATE ... WHERE
state IN states.sources(event)``; the caller that updates no row lost a
race, and ``_refusal`` says why in a sentence. Functions that change an
ARQ together with its attach handle lock the ARQ rows first (``FOR
UPDATE``; SQLite serialises writers anyway), so that a bind, an unbind
and a delete of the same ARQ take turns and no handle is leaked.

ARQs are read as dicts with the keys of ``_VIEW_COLUMNS``: one statement
per list, whatever its length.
"""

import collections
import datetime
import functools
import random
import uuid as uuidlib

from oslo_db import api as oslo_db_api
from oslo_db import exception as db_exc
import sqlalchemy as sa
from sqlalchemy import orm

from cyborg import exception
from cyborg import states
from cyborg.db import models
from cyborg.db.api import host_sync_states
from cyborg.db.api import locking
from cyborg.db.api import pagination
from cyborg.db.api import project_usage
from cyborg.db.api import scrubs
from cyborg.objects import inventory

ARQ = models.ExtendedAcceleratorRequest
Handle = models.AttachHandle
Profile = models.DeviceProfile
Revision = models.DeviceProfileRevision
ProfileProject = models.DeviceProfileProject
Deployable = models.Deployable
Device = models.Device
Attribute = models.Attribute

# A profile may ask for more; one request making thousands of rows is a
# mistake, not a need.
MAX_ARQS_PER_REQUEST = 64
# Attach handles that the host's agent prepares (a vGPU's mediated
# device) and so must release before the handle is free again.
PREPARED_ON_HOST = frozenset({'MDEV', 'MIG'})
# How many free handles one allocation tries before giving up on a race.
_HANDLE_CANDIDATES = 32
_HANDLE_COLUMNS = (Handle.id, Handle.uuid, Handle.attach_type,
                   Handle.attach_info, Handle.deployable_id)

_VIEW_COLUMNS = (
    ARQ.id, ARQ.uuid, ARQ.state, ARQ.device_profile_group_id,
    ARQ.device_profile_revision,
    ARQ.hostname, ARQ.device_rp_uuid, ARQ.instance_uuid, ARQ.project_id,
    ARQ.created_at, ARQ.updated_at,
    Profile.name.label('device_profile_name'),
    Handle.uuid.label('attach_handle_uuid'),
    Handle.attach_type.label('attach_handle_type'),
    Handle.attach_info.label('attach_handle_info'),
    ARQ.attach_details,
)

# Retried on deadlock: two binds on MariaDB may lock index gaps in
# opposite orders, as may two conductors' claims of the ARQs of
# concurrent casts (UPDATE ... WHERE uuid IN (...)). Each function so
# wrapped is one transaction that can run again from its start.
_retry_on_deadlock = oslo_db_api.wrap_db_retry(
    max_retries=5, retry_on_deadlock=True, retry_interval=0.05,
    inc_retry_interval=True)


def _view_select():
    return (sa.select(*_VIEW_COLUMNS).select_from(ARQ)
            .join(Profile, Profile.id == ARQ.device_profile_id)
            .outerjoin(Handle, Handle.id == ARQ.attach_handle_id))


def _scoped(stmt, project_id):
    """Only ``project_id``'s ARQs; None means every project."""
    return stmt if project_id is None else stmt.where(
        ARQ.project_id == project_id)


def not_found(uuid):
    return exception.NotFound(
        'No accelerator request with uuid %s exists.' % uuid,
        code='cyborg.arq.not_found')


# -- reading -------------------------------------------------------------

def list_arqs(context, project_id=None, instance_uuid=None, uuids=None,
              **page):
    stmt = _scoped(_view_select(), project_id)
    if instance_uuid is not None:
        stmt = stmt.where(ARQ.instance_uuid == instance_uuid)
    if uuids is not None:
        stmt = stmt.where(ARQ.uuid.in_(list(uuids)))
    if not page:
        return [dict(row._mapping) for row in context.db.read_rows(
            context, stmt.order_by(ARQ.id))]
    with context.db.read_connection(context) as connection:
        # Another project's ARQ is no marker: as an unknown uuid.
        stmt = pagination.paginate(
            connection, stmt, ARQ, visible=None if project_id is None
            else ARQ.project_id == project_id, **page)
        return [dict(row._mapping)
                for row in connection.execute(stmt)]


def _views(session, rows, describe):
    """The views of ``rows`` (with ``id`` and ``uuid``), read in
    ``session``'s transaction: what is about to change, as it is. Unless
    ``describe``, only their uuids (``{'uuid': ...}``), read already."""
    if not describe:
        return [{'uuid': r.uuid} for r in rows]
    if not rows:
        return []
    return [dict(r._mapping) for r in session.execute(
        _view_select().where(ARQ.id.in_([r.id for r in rows]))
        .order_by(ARQ.id))]


def get_arq(context, uuid, project_id=None):
    with context.db.read_connection(context) as connection:
        row = connection.execute(
            _scoped(_view_select(), project_id).where(ARQ.uuid == uuid)
        ).one_or_none()
    if row is None:
        raise not_found(uuid)
    return dict(row._mapping)


def bound_on_host(context, hostname):
    """The Bound ARQs whose device is on ``hostname`` (as its agent names
    the host), in one SELECT: ``(cpid_type, cpid_info, instance_uuid,
    project_id)`` each, the control path being the device's."""
    with context.db.read_connection(context) as connection:
        return connection.execute(_bound_on_host(),
                                  {'hostname': hostname}).all()


@functools.cache
def _bound_on_host():
    # Built once: every agent's report asks, and building it costs more
    # than running it.
    return (sa.select(models.ControlPathID.cpid_type,
                      models.ControlPathID.cpid_info, ARQ.instance_uuid,
                      ARQ.project_id)
            .select_from(ARQ)
            .join(Handle, Handle.id == ARQ.attach_handle_id)
            .join(models.ControlPathID,
                  models.ControlPathID.id == Handle.cpid_id)
            .join(Device, Device.id == models.ControlPathID.device_id)
            .where(Device.hostname == sa.bindparam('hostname'),
                   ARQ.state == states.BOUND)
            .order_by(ARQ.id))


# -- creating ------------------------------------------------------------

def _units(groups):
    """How many ARQs each group asks for: the sum of its resources, one
    for the slices of a MIG instance."""
    return [inventory.accelerators_asked(group) for group in groups]


# Built once: statements cost more to build than to run on MariaDB. Core
# statements on the session's connection: no ORM object is involved.
_PROFILE_BY_NAME = sa.select(
    Profile.id, Profile.uuid, Profile.name, Profile.profile_json,
    Profile.revision, Profile.generation, Profile.enabled,
    Profile.is_public).where(Profile.name == sa.bindparam('name'))
_PROFILE_PROJECTS = sa.select(ProfileProject.project_id).where(
    ProfileProject.device_profile_id == sa.bindparam('profile_id'))
_INSERT_ARQ = sa.insert(ARQ.__table__)


# What a POST needs of a profile, by name. Read once per worker. Other
# workers' changes cannot reach it, so each INSERT made from it checks in
# the same statement that the profile is still there with that id, uuid
# and generation (every write of a profile bumps it: a new revision, a
# profile disabled, access changed), and one that no longer is is read
# again; ids are never reused (AUTOINCREMENT on SQLite), so a re-made
# profile never matches an old entry. This worker's own writes of a
# profile drop its entry (``forget_profile``).
KnownProfile = collections.namedtuple('KnownProfile', (
    'id', 'uuid', 'name', 'groups', 'counts', 'revision', 'generation',
    'enabled', 'is_public', 'projects'))
_KNOWN_PROFILES = {}
_KNOWN_PROFILES_MAX = 256


def forget_profile(profile_name):
    """Drop what ``create_arqs`` knows of a profile: called by every
    write that changes or removes one, after it commits."""
    _KNOWN_PROFILES.pop(profile_name, None)


def create_arqs(context, profile_name, project_id, any_profile=False,
                within_limits=None):
    """One Initial ARQ per unit of every resource of every group of the
    profile's current revision, all in one statement; returns them as
    views. A disabled profile makes none (Conflict); a private one only
    for its projects, unless ``any_profile`` (an admin): for any other it
    is not found.

    ``within_limits(usage, asked, profile_name)``, if given, is called in
    the creating transaction with the project's ``project_usage.Usage``
    and what this creation adds, and raises to refuse it; the project's
    ``project_quota_locks`` row is locked first, so that creations of one
    project count one after the other.

    The INSERT is not sent again on an error: an error that comes after
    the server committed it (a reply lost with the connection) must not
    make the ARQs twice, nor report a failure while they exist. So on an
    error the ARQs are looked for by their new uuids: all there means
    made, none there means not made (the error is raised).
    """
    now = models.utcnow()
    if within_limits is not None:
        return _create_within_limits(context, profile_name, project_id,
                                     any_profile, within_limits, now)
    known = _KNOWN_PROFILES.get(profile_name)
    rows = None
    try:
        if known is not None and _profile_refusal(
                known, project_id, any_profile) is not None:
            # Refused from what this worker read: read again, as another
            # worker may have changed the profile since.
            known = None
        if known is not None:
            rows = _new_rows(known, project_id, now)
            with context.db.write_connection(context) as connection:
                made = connection.execute(_insert_if_profile(len(rows)),
                                          _checked(known, rows)).rowcount
            if not made:
                forget_profile(profile_name)
                rows = None
        if rows is None:
            with context.db.write_connection(context) as connection:
                known = _known_profile(connection, profile_name)
                refusal = _profile_refusal(known, project_id, any_profile)
                if refusal is not None:
                    raise refusal
                rows = _new_rows(known, project_id, now)
                connection.execute(_INSERT_ARQ, rows)
    except (db_exc.DBError, sa.exc.DBAPIError):
        # (SQLite's driver errors at COMMIT reach here untranslated.)
        if rows is None or not _all_made(context, rows):
            raise
    return _created_views(known, project_id, rows, now)


def _create_within_limits(context, profile_name, project_id, any_profile,
                          within_limits, now):
    made = []  # (known, rows) of the last transaction tried

    @oslo_db_api.wrap_db_retry(
        max_retries=10, retry_interval=0.01, inc_retry_interval=True,
        exception_checker=project_usage.contended)
    def create():
        with context.db.write_connection(context) as connection:
            project_usage.lock(connection, project_id)
            known = _known_profile(connection, profile_name)
            refusal = _profile_refusal(known, project_id, any_profile)
            if refusal is not None:
                raise refusal
            asked = project_usage.asked(known.groups)
            asked.by_profile[known.name] = asked.arqs
            within_limits(project_usage.usage(connection, project_id),
                          asked, known.name)
            rows = _new_rows(known, project_id, now)
            made[:] = [(known, rows)]
            connection.execute(_INSERT_ARQ, rows)
        return known, rows

    try:
        known, rows = create()
    except (db_exc.DBError, sa.exc.DBAPIError):
        # As in ``create_arqs``: an error after the commit made them.
        if not made or not _all_made(context, made[0][1]):
            raise
        known, rows = made[0]
    return _created_views(known, project_id, rows, now)


def _created_views(known, project_id, rows, now):
    return [{'uuid': r['uuid'], 'state': r['state'],
             'device_profile_group_id': r['device_profile_group_id'],
             'hostname': None, 'device_rp_uuid': None,
             'instance_uuid': None, 'project_id': project_id,
             'created_at': now, 'updated_at': None,
             'device_profile_name': known.name,
             'device_profile_revision': known.revision,
             'attach_handle_uuid': None, 'attach_handle_type': None,
             'attach_handle_info': None, 'attach_details': None}
            for r in rows]


def _all_made(context, rows):
    """Whether every ARQ of ``rows`` (new uuids) exists: the INSERT that
    failed committed before its error. Partly made cannot be: it was one
    statement in one transaction."""
    uuids = [r['uuid'] for r in rows]
    with context.db.read_connection(context) as connection:
        found = connection.execute(sa.select(sa.func.count()).where(
            ARQ.uuid.in_(uuids))).scalar_one()
    return found == len(uuids)


def _profile_refusal(known, project_id, any_profile):
    """Why ``project_id`` may make no ARQs from the profile ``known``;
    None if it may."""
    if not known.is_public and not any_profile and (
            project_id not in known.projects):
        # Invisible to the project, as in its lists.
        return _profile_not_found(known.name)
    if not known.enabled:
        return exception.Conflict(
            'Device profile %s is disabled: it makes no new accelerator '
            'requests.' % known.name, code='cyborg.device_profile.disabled')
    return None


def _profile_not_found(profile_name):
    return exception.NotFound(
        'No device profile named %r exists.' % profile_name,
        code='cyborg.device_profile.not_found')


def _known_profile(connection, profile_name):
    """The ``KnownProfile`` of that name, read and checked; kept in
    ``_KNOWN_PROFILES``."""
    profile = connection.execute(
        _PROFILE_BY_NAME, {'name': profile_name}).one_or_none()
    if profile is None:
        raise _profile_not_found(profile_name)
    # Summed before anything is made of them: a profile stored before
    # counts were capped may ask for millions.
    counts = _units(profile.profile_json['groups'])
    total = sum(counts)
    if total > MAX_ARQS_PER_REQUEST:
        raise exception.Invalid(
            'Device profile %s asks for %d accelerators; one request '
            'may create at most %d accelerator requests.'
            % (profile_name, total, MAX_ARQS_PER_REQUEST),
            code='cyborg.arq.too_many')
    if not total:
        raise exception.Invalid(
            'Device profile %s asks for no resources, so there is no '
            'accelerator to request.' % profile_name,
            code='cyborg.arq.nothing_requested')
    projects = frozenset() if profile.is_public else frozenset(
        connection.execute(_PROFILE_PROJECTS,
                           {'profile_id': profile.id}).scalars())
    known = KnownProfile(profile.id, profile.uuid, profile.name,
                         tuple(profile.profile_json['groups']),
                         tuple(counts), profile.revision, profile.generation,
                         profile.enabled, profile.is_public, projects)
    if len(_KNOWN_PROFILES) >= _KNOWN_PROFILES_MAX:
        _KNOWN_PROFILES.clear()
    _KNOWN_PROFILES[profile_name] = known
    return known


def _new_rows(known, project_id, now):
    return [{'uuid': str(uuidlib.uuid4()), 'project_id': project_id,
             'state': states.INITIAL, 'device_profile_id': known.id,
             'device_profile_revision': known.revision,
             'device_profile_group_id': index, 'created_at': now}
            for index, count in enumerate(known.counts)
            for _ in range(count)]


_NEW_ARQ_COLUMNS = ('uuid', 'project_id', 'state', 'device_profile_id',
                    'device_profile_revision', 'device_profile_group_id',
                    'created_at')


@functools.lru_cache(maxsize=MAX_ARQS_PER_REQUEST)
def _insert_if_profile(count):
    """INSERT of ``count`` ARQs whose rows exist only if their profile
    still has the id, uuid and generation given: ``INSERT ... SELECT ...
    FROM device_profiles WHERE id = :profile_id AND uuid = :profile_uuid
    AND generation = :profile_generation``, one SELECT per ARQ (UNION
    ALL)."""
    table = ARQ.__table__
    selects = [
        sa.select(sa.bindparam('uuid_%d' % i, type_=table.c.uuid.type),
                  sa.bindparam('project_id', type_=table.c.project_id.type),
                  sa.bindparam('state', type_=table.c.state.type),
                  Profile.id, Profile.revision,
                  sa.bindparam('group_%d' % i, type_=sa.Integer),
                  sa.bindparam('created_at',
                               type_=table.c.created_at.type))
        .where(Profile.id == sa.bindparam('profile_id'),
               Profile.uuid == sa.bindparam('profile_uuid'),
               Profile.generation == sa.bindparam('profile_generation'))
        for i in range(count)]
    source = selects[0] if count == 1 else sa.union_all(*selects)
    # The other columns have server defaults, as the plain INSERT's.
    return sa.insert(table).from_select(
        _NEW_ARQ_COLUMNS, source, include_defaults=False)


def _checked(known, rows):
    """The parameters of ``_insert_if_profile(len(rows))``."""
    params = {'project_id': rows[0]['project_id'], 'state': rows[0]['state'],
              'created_at': rows[0]['created_at'],
              'profile_id': known.id, 'profile_uuid': known.uuid,
              'profile_generation': known.generation}
    for i, row in enumerate(rows):
        params['uuid_%d' % i] = row['uuid']
        params['group_%d' % i] = row['device_profile_group_id']
    return params


# -- binding -------------------------------------------------------------

def _refusal(session, uuid, project_id, event):
    """Why the compare-and-set of ``event`` on ARQ ``uuid`` changed
    nothing: it is not there (for this caller) or its state forbids it."""
    state = session.execute(
        _scoped(sa.select(ARQ.state), project_id).where(ARQ.uuid == uuid)
    ).scalar_one_or_none()
    if state is None:
        return not_found(uuid)
    try:
        states.next_state(state, event)
    except states.InvalidTransition as e:
        return states.InvalidTransition(
            'Accelerator request %s: %s' % (uuid, e.message))
    # The state allowed it a moment ago: someone else changed it since.
    return exception.Conflict(
        'Accelerator request %s changed while this request ran; try '
        'again.' % uuid, code='cyborg.arq.changed')


@_retry_on_deadlock
def start_binding(context, bindings, project_id=None, conductor=None):
    """Move every ARQ of ``bindings`` to BindStarted, or none of them.

    ``bindings`` maps an ARQ uuid to its ``hostname``,
    ``device_rp_uuid``, ``instance_uuid`` and, optionally, the
    ``project_id`` it is given to. ``conductor`` is the conductor the
    bind is sent to (their host's owner), recorded as the bind's owner.
    An instance that has ARQs of its project from an earlier bind is
    refused (Conflict); binds of one instance take turns, so that of two
    at once the second sees the first's ARQs.
    """
    with context.db.writer(context) as session:
        _start_binding(session, bindings, project_id, conductor)


def _start_binding(session, bindings, project_id, conductor):
    now = models.utcnow()
    instances = sorted({b['instance_uuid'] for b in bindings.values()})
    locking.take_turns(session.connection(),
                       ['arq-instance:' + i for i in instances],
                       ARQ.__table__, ARQ.instance_uuid.in_(instances))
    _refuse_earlier_binds(session, bindings, project_id)
    sources = states.sources(states.BIND)
    for uuid, binding in bindings.items():
        values = {'state': states.BIND_STARTED,
                  'hostname': binding['hostname'],
                  'device_rp_uuid': binding['device_rp_uuid'],
                  'instance_uuid': binding['instance_uuid'],
                  'bind_started_at': now, 'bind_conductor': conductor,
                  'nova_event_pending': False}
        if binding.get('project_id') is not None:
            values['project_id'] = binding['project_id']
        done = session.execute(
            _scoped(sa.update(ARQ), project_id).where(
                ARQ.uuid == uuid, ARQ.state.in_(sources)
            ).values(**values))
        if done.rowcount != 1:
            raise _refusal(session, uuid, project_id, states.BIND)


def _refuse_earlier_binds(session, bindings, project_id):
    """Conflict if an instance of ``bindings`` has other ARQs of the
    project its ARQs will belong to (the caller holds the instances'
    locks). Only that project's ARQs count, and so only they are named."""
    rows = session.execute(
        _scoped(sa.select(ARQ.uuid, ARQ.project_id), project_id)
        .where(ARQ.uuid.in_(list(bindings)))).all()
    _check_all_found(rows, bindings)
    owners = dict(rows)
    wanted = {(b['instance_uuid'], b.get('project_id') or owners[uuid])
              for uuid, b in bindings.items()}
    earlier = session.execute(
        sa.select(ARQ.instance_uuid, ARQ.uuid).where(
            sa.or_(*[sa.and_(ARQ.instance_uuid == instance,
                             ARQ.project_id == project)
                     for instance, project in sorted(wanted)]),
            ARQ.uuid.not_in(list(bindings))).order_by(ARQ.id).limit(1)
    ).first()
    if earlier is not None:
        raise exception.Conflict(
            'Instance %s already has accelerator request %s from an '
            'earlier bind; unbind or delete that first.'
            % (earlier.instance_uuid, earlier.uuid),
            code='cyborg.arq.instance_already_bound')


def fail_started_binds(context, uuids):
    """BindStarted → BindFailed for ``uuids`` (the bind never reached a
    conductor); returns the uuids that changed."""
    return [arq['uuid'] for arq in _fail_binds(
        context, ARQ.uuid.in_(list(uuids)))]


def _deadline(timeout):
    return models.utcnow() + datetime.timedelta(seconds=timeout)


@_retry_on_deadlock
def claim_binds(context, uuids, conductor, timeout):
    """Make this conductor the owner of the BindStarted ARQs of ``uuids``
    and return what binding them needs (see ``_bind_work``).

    Each claimed ARQ gets a deadline ``timeout`` seconds away (renewed
    as its bind really starts, ``renew_deadlines``). An ARQ already
    owned by another conductor is left to it; one the API addressed to
    this conductor (``bind_conductor`` set, no deadline yet) is claimed.
    """
    with context.db.writer(context) as session:
        session.execute(
            sa.update(ARQ).where(
                ARQ.uuid.in_(list(uuids)),
                ARQ.state == states.BIND_STARTED,
                sa.or_(ARQ.bind_conductor.is_(None),
                       ARQ.bind_conductor == conductor),
            ).values(bind_conductor=conductor,
                     bind_deadline=_deadline(timeout)))
        return _bind_work(session, sa.and_(
            ARQ.uuid.in_(list(uuids)), ARQ.state == states.BIND_STARTED,
            ARQ.bind_conductor == conductor))


@_retry_on_deadlock
def take_over_binds(context, uuids, previous, conductor, timeout):
    """Compare-and-set the owner of the BindStarted ARQs of ``uuids``
    from ``previous`` (a dead conductor, or None: never claimed) to
    ``conductor``, with a fresh deadline; what binding those it won
    needs. Two conductors that try at once: one wins each ARQ."""
    owner = (ARQ.bind_conductor.is_(None) if previous is None
             else ARQ.bind_conductor == previous)
    with context.db.writer(context) as session:
        session.execute(
            sa.update(ARQ).where(
                ARQ.uuid.in_(list(uuids)),
                ARQ.state == states.BIND_STARTED, owner,
            ).values(bind_conductor=conductor,
                     bind_deadline=_deadline(timeout)))
        # Those it already owned come too: the caller skips the binds a
        # thread of its process is running.
        return _bind_work(session, sa.and_(
            ARQ.uuid.in_(list(uuids)), ARQ.state == states.BIND_STARTED,
            ARQ.bind_conductor == conductor))


@_retry_on_deadlock
def renew_deadlines(context, arq_ids, conductor, timeout):
    """Push the deadline of these ARQs (those still BindStarted and this
    conductor's) ``timeout`` seconds away: the owner is making progress
    on them. Returns how many it renewed."""
    if not arq_ids:
        return 0
    with context.db.writer(context) as session:
        return session.execute(sa.update(ARQ).where(
            ARQ.id.in_(list(arq_ids)), ARQ.state == states.BIND_STARTED,
            ARQ.bind_conductor == conductor).values(
            bind_deadline=_deadline(timeout))).rowcount


def binds_in_progress(context):
    """Every BindStarted ARQ: ``(uuid, hostname, bind_conductor,
    bind_started_at, bind_deadline)``, for recovery to sort out."""
    with context.db.read_connection(context) as connection:
        return connection.execute(
            sa.select(ARQ.uuid, ARQ.hostname, ARQ.bind_conductor,
                      ARQ.bind_started_at, ARQ.bind_deadline).where(
                ARQ.state == states.BIND_STARTED).order_by(ARQ.id)).all()


def unfinished_binds(context, conductor):
    """The BindStarted ARQs this conductor claimed (after its restart);
    not those the API addressed to it that it has not claimed yet: their
    casts wait in the queue."""
    with context.db.writer(context) as session:
        return _bind_work(session, sa.and_(
            ARQ.state == states.BIND_STARTED,
            ARQ.bind_conductor == conductor,
            ARQ.bind_deadline.is_not(None)))


def _bind_work(session, where, **extra):
    """What binding each ARQ ``where`` selects needs, oldest first, with
    the columns of ``extra`` by name."""
    rows = session.execute(
        sa.select(ARQ.id, ARQ.uuid, ARQ.hostname, ARQ.device_rp_uuid,
                  ARQ.instance_uuid, ARQ.project_id, ARQ.bind_started_at,
                  ARQ.device_profile_id,
                  ARQ.device_profile_group_id,
                  ARQ.attach_handle_id, Profile.name.label('profile_name'),
                  Revision.profile_json,
                  *(column.label(name) for name, column in extra.items()))
        .join(Profile, Profile.id == ARQ.device_profile_id)
        # The groups of the revision the ARQ was made from.
        .join(Revision, sa.and_(
            Revision.device_profile_id == ARQ.device_profile_id,
            Revision.revision == ARQ.device_profile_revision))
        .where(where).order_by(ARQ.id)).all()
    work = []
    for row in rows:
        item = dict(row._mapping)
        groups = item.pop('profile_json')['groups']
        item['group'] = groups[row.device_profile_group_id]
        work.append(item)
    return work


_BINDING_COLUMNS = (
    Deployable.id, Deployable.uuid, Deployable.name,
    Deployable.driver_name, Deployable.bitstream_id, Device.hostname,
    Device.type.label('device_type'), Device.status.label('device_status'),
    Device.vendor, Device.model, Device.std_board_info,
    Device.quarantined, Device.health_override, Device.missing_since,
    models.ControlPathID.cpid_info.label('controlpath_info'))


def _binding_query(where):
    return (sa.select(*_BINDING_COLUMNS)
            .join(Device, Device.id == Deployable.device_id)
            .outerjoin(models.ControlPathID,
                       models.ControlPathID.device_id == Device.id)
            .where(where).order_by(Deployable.id))


def deployable_for_binding(context, rp_uuid=None, uuid=None):
    """The deployable behind a resource provider (or with this uuid), with
    its device; None if there is none."""
    with context.db.reader(context) as session:
        row = session.execute(_binding_query(
            Deployable.rp_uuid == rp_uuid if uuid is None
            else Deployable.uuid == uuid).limit(1)).one_or_none()
        if row is None:
            return None
    return dict(row._mapping)


def deployables_for_binding(context, rp_uuid):
    """Every deployable behind a resource provider, with its device, by
    id: one for a provider per device, each member of a pooled one."""
    with context.db.reader(context) as session:
        rows = session.execute(_binding_query(
            Deployable.rp_uuid == rp_uuid)).all()
    return [dict(row._mapping) for row in rows]


def deployables_of_device(context, device_id):
    """Every deployable of the device, with its device, by id."""
    with context.db.reader(context) as session:
        rows = session.execute(_binding_query(
            Deployable.device_id == device_id)).all()
    return [dict(row._mapping) for row in rows]


def programming_facts(context, deployable_id, except_handle=None,
                      same_request=None):
    """What programming a deployable needs to know besides its row: its
    attributes and how many of its handles are in use (not counting
    ``except_handle``, the binding ARQ's own).

    ``same_request`` is ``(device profile id, group index)`` of the
    binding ARQ: handles of other ARQs still BindStarted for that same
    group are not counted. They are not in an instance yet and want the
    bitstream this program loads (a bind cut short by a conductor's
    death, whose program ran to its end unrecorded)."""
    with context.db.reader(context) as session:
        attributes = dict(session.execute(
            sa.select(models.Attribute.key, models.Attribute.value).where(
                models.Attribute.deployable_id == deployable_id)).all())
        in_use = sa.select(sa.func.count()).where(
            Handle.deployable_id == deployable_id,
            Handle.in_use == sa.true())
        if except_handle is not None:
            in_use = in_use.where(Handle.id != except_handle)
        if same_request is not None:
            profile_id, group_id = same_request
            in_use = in_use.where(~sa.exists().where(
                ARQ.attach_handle_id == Handle.id,
                ARQ.state == states.BIND_STARTED,
                ARQ.device_profile_id == profile_id,
                ARQ.device_profile_group_id == group_id))
        in_use = session.execute(in_use).scalar_one()
    return attributes, in_use


# -- reserving a deployable ------------------------------------------------
#
# Programming an FPGA changes what every handle of the card offers, so it
# holds a claim on the deployable row (as Ironic reserves a node): one
# compare-and-set takes it, and whoever holds it is the only one to
# program. A taker writes its claim first and then counts the handles in
# use; a bind takes its handle first and then looks for a claim. Of a
# program and a bind that race, at least one sees the other and backs
# off: never both proceed.

def reserve_deployable(context, deployable_id, holder, stale_after,
                       expected=None):
    """Take the reservation of the deployable for ``holder``; False if
    someone else holds one younger than ``stale_after`` seconds (an
    older one was left by a conductor that died while it programmed).
    ``expected``: a reservation the caller found left by a dead process,
    broken if it is still the one there."""
    now = models.utcnow()
    cutoff = now - datetime.timedelta(seconds=stale_after)
    free = [Deployable.reservation.is_(None),
            Deployable.reservation == holder,
            Deployable.reserved_at < cutoff]
    if expected is not None:
        free.append(Deployable.reservation == expected)
    with context.db.writer(context) as session:
        return session.execute(sa.update(Deployable).where(
            Deployable.id == deployable_id, sa.or_(*free)).values(
            reservation=holder, reserved_at=now)).rowcount == 1


def release_deployable(context, deployable_id, holder):
    """Give the reservation back, if ``holder`` still has it."""
    with context.db.writer(context) as session:
        session.execute(sa.update(Deployable).where(
            Deployable.id == deployable_id,
            Deployable.reservation == holder).values(
            reservation=None, reserved_at=None))


def reservation_of(context, deployable_id, stale_after):
    """Who holds a live reservation of the deployable; None if nobody."""
    cutoff = models.utcnow() - datetime.timedelta(seconds=stale_after)
    with context.db.read_connection(context) as connection:
        return connection.execute(sa.select(Deployable.reservation).where(
            Deployable.id == deployable_id,
            Deployable.reserved_at >= cutoff)).scalar_one_or_none()


def record_bitstream(context, deployable_id, bitstream_id):
    """What was last loaded into an FPGA deployable (its bs-uuid)."""
    with context.db.writer(context) as session:
        session.execute(sa.update(Deployable).where(
            Deployable.id == deployable_id).values(bitstream_id=bitstream_id))


@_retry_on_deadlock
def allocate_attach_handle(context, arq_id, deployable_ids):
    """Give ARQ ``arq_id`` (BindStarted) a free attach handle of one of
    ``deployable_ids`` (the members of a pooled provider, or the one
    deployable of a provider per device), atomically; the handle as a
    dict with its ``deployable_id``, or None if none is free.

    An ARQ that has a handle already (a bind resumed after a crash)
    keeps it. Raises BindLost if the ARQ left BindStarted meanwhile.

    A handle prepared on the host (``PREPARED_ON_HOST``) gets a new UUID
    as it is taken: what the agent makes for this allocation is named
    after it, so that a late release of an earlier holder, which names
    the UUID it was given, cannot remove what was made for this one.
    """
    if isinstance(deployable_ids, int):
        deployable_ids = [deployable_ids]
    with context.db.writer(context) as session:
        arq = session.execute(
            sa.select(ARQ.state, ARQ.attach_handle_id).where(
                ARQ.id == arq_id).with_for_update()).one_or_none()
        if arq is None or arq.state != states.BIND_STARTED:
            raise BindLost(arq_id)
        if arq.attach_handle_id is not None:
            return _handle(session, arq.attach_handle_id)
        handle = _take_free_handle(session, deployable_ids)
        if handle is not None:
            session.execute(
                sa.update(ARQ).where(ARQ.id == arq_id).values(
                    attach_handle_id=handle['id'],
                    deployable_id=handle['deployable_id']))
        return handle


def _take_free_handle(session, deployable_ids):
    """Mark a free handle of ``deployable_ids`` in use, as a dict (a new
    UUID for one prepared on the host); None if none is free."""
    free = [dict(r._mapping) for r in session.execute(
        sa.select(*_HANDLE_COLUMNS).where(
            Handle.deployable_id.in_(deployable_ids),
            Handle.in_use == sa.false()).order_by(Handle.id).limit(
            _HANDLE_CANDIDATES))]
    # Contenders start at different handles instead of queueing on the
    # first one.
    random.shuffle(free)
    for handle in free:
        if handle['attach_type'] in PREPARED_ON_HOST:
            handle['uuid'] = str(uuidlib.uuid4())
        taken = session.execute(
            sa.update(Handle).where(
                Handle.id == handle['id'], Handle.in_use == sa.false()
            ).values(in_use=True, state=scrubs.IN_USE, uuid=handle['uuid']))
        if taken.rowcount == 1:
            return handle
    return None


@_retry_on_deadlock
def record_attach_details(context, arq_id, handle_id, details):
    """Keep ``details`` (what the host made for the bind) on ARQ
    ``arq_id`` if it is still being bound with handle ``handle_id``:
    True; False if it left BindStarted meanwhile (the caller undoes
    what was made)."""
    with context.db.writer(context) as session:
        done = session.execute(sa.update(ARQ).where(
            ARQ.id == arq_id, ARQ.state == states.BIND_STARTED,
            ARQ.attach_handle_id == handle_id).values(
                attach_details=details))
        return done.rowcount == 1


def mig_instances_of_host(context, hostname):
    """The ARQs that own a MIG instance on ``hostname`` (as its agent
    names the host): those that kept what their bind made, in any state
    (a release not done yet keeps it too), with their attach handle and
    driver. One SELECT."""
    return held_on_host(context, hostname, 'MIG',
                        ARQ.attach_details.is_not(None))


def mdevs_of_host(context, hostname):
    """The Bound ARQs that hold an mdev (an ``MDEV`` handle, its UUID
    the mdev's) on ``hostname``, with their attach handle and driver:
    what a host restart loses. One SELECT."""
    return held_on_host(context, hostname, 'MDEV',
                        ARQ.state == states.BOUND)


def held_on_host(context, hostname, attach_type, *where):
    """The ARQs holding a handle of ``attach_type`` on ``hostname`` that
    ``where`` keeps, with their handle and driver."""
    stmt = (sa.select(ARQ.uuid, ARQ.state, ARQ.attach_details,
                      Handle.uuid.label('handle_uuid'), Handle.attach_type,
                      Handle.attach_info, Deployable.driver_name)
            .select_from(ARQ)
            .join(Handle, Handle.id == ARQ.attach_handle_id)
            .join(Deployable, Deployable.id == Handle.deployable_id)
            .join(Device, Device.id == Deployable.device_id)
            .where(Device.hostname == hostname,
                   Handle.attach_type == attach_type, *where)
            .order_by(ARQ.id))
    with context.db.read_connection(context) as connection:
        return [dict(r._mapping) for r in connection.execute(stmt)]


@_retry_on_deadlock
def replace_attach_details(context, arq_uuid, handle_uuid, old, new):
    """Keep ``new`` as what the host made for ARQ ``arq_uuid`` (its MIG
    instance, made again after the host restarted) if the ARQ is still
    Bound with the handle ``handle_uuid`` names and still keeps ``old``:
    True; False if it was unbound, deleted or changed meanwhile."""
    with context.db.writer(context) as session:
        # The ARQ row locked: an unbind or delete waits, and then finds
        # the new details to release.
        arq = session.execute(
            sa.select(ARQ.id, ARQ.attach_handle_id, ARQ.attach_details)
            .where(ARQ.uuid == arq_uuid, ARQ.state == states.BOUND)
            .with_for_update()).one_or_none()
        if (arq is None or arq.attach_handle_id is None
                or arq.attach_details != old):
            return False
        held = session.execute(sa.select(Handle.uuid).where(
            Handle.id == arq.attach_handle_id)).scalar()
        if held != handle_uuid:
            return False
        done = session.execute(sa.update(ARQ).where(
            ARQ.id == arq.id, ARQ.state == states.BOUND,
            ARQ.attach_handle_id == arq.attach_handle_id).values(
                # updated_at kept: a pending Nova event is claimed by it.
                attach_details=new, updated_at=ARQ.updated_at))
        return done.rowcount == 1


@_retry_on_deadlock
def set_deployable_traits(context, deployable_id, traits, held_back=None):
    """Give deployable ``deployable_id`` the traits ``traits`` and, where
    ``held_back`` ({resource class: units}) says, the driver's
    ``reserved:`` attributes, and say that Placement must follow its
    host; True if anything changed."""
    with context.db.writer(context) as session:
        row = session.execute(
            sa.select(Deployable.traits, Device.hostname)
            .join(Device, Device.id == Deployable.device_id)
            .where(Deployable.id == deployable_id)).one_or_none()
        if row is None:
            return False
        changed = _hold_back(session, deployable_id, held_back or {})
        if list(row.traits or ()) != list(traits):
            session.execute(sa.update(Deployable).where(
                Deployable.id == deployable_id).values(traits=list(traits)))
            changed = True
        if changed:
            host_sync_states.bump_desired(session.connection(),
                                          row.hostname)
        return changed


def _hold_back(session, deployable_id, held_back):
    """Write the driver's ``reserved:`` attributes of ``held_back``; an
    operator's attribute of the same key is left alone. Whether any
    changed."""
    wanted = {inventory.RESERVED_INVENTORY + rc: str(units)
              for rc, units in held_back.items()}
    if not wanted:
        return False
    stored = {row.key: row for row in session.execute(
        sa.select(Attribute.id, Attribute.key, Attribute.value,
                  Attribute.origin)
        .where(Attribute.deployable_id == deployable_id,
               Attribute.key.in_(sorted(wanted))))}
    changed = False
    for key, value in sorted(wanted.items()):
        found = stored.get(key)
        if found is None:
            session.add(Attribute(uuid=str(uuidlib.uuid4()),
                                  deployable_id=deployable_id, key=key,
                                  value=value,
                                  origin=scrubs.DRIVER_ORIGIN))
            changed = True
        elif found.origin == scrubs.DRIVER_ORIGIN and found.value != value:
            session.execute(sa.update(Attribute).where(
                Attribute.id == found.id).values(value=value))
            changed = True
    return changed


def deployable_traits(context, deployable_id):
    """The traits of deployable ``deployable_id`` as stored."""
    with context.db.read_connection(context) as connection:
        return connection.execute(sa.select(Deployable.traits).where(
            Deployable.id == deployable_id)).scalar() or []


def deployable_of_handle(context, handle_uuid):
    """{id, hostname} of the deployable of the attach handle that has
    UUID ``handle_uuid`` now, or None."""
    with context.db.read_connection(context) as connection:
        row = connection.execute(
            sa.select(Deployable.id, Device.hostname)
            .join(Device, Device.id == Deployable.device_id)
            .join(Handle, Handle.deployable_id == Deployable.id)
            .where(Handle.uuid == handle_uuid)).one_or_none()
    return None if row is None else dict(row._mapping)


def attach_details_of(context, arq_id):
    """What the host made for ARQ ``arq_id``'s bind, or None."""
    with context.db.read_connection(context) as connection:
        return connection.execute(sa.select(ARQ.attach_details).where(
            ARQ.id == arq_id)).scalar()


def holds_handle(context, arq_id, handle_id, handle_uuid=None):
    """Whether ARQ ``arq_id`` is Bound to attach handle ``handle_id``,
    under the UUID ``handle_uuid`` if given (the same allocation, not a
    later one: SQLite gives a deleted ARQ's id to the next one)."""
    stmt = sa.select(ARQ.id).join(
        Handle, Handle.id == ARQ.attach_handle_id).where(
        ARQ.id == arq_id, ARQ.attach_handle_id == handle_id,
        ARQ.state == states.BOUND)
    if handle_uuid is not None:
        stmt = stmt.where(Handle.uuid == handle_uuid)
    with context.db.read_connection(context) as connection:
        return connection.execute(stmt).first() is not None


def _handle(session, handle_id):
    row = session.execute(
        sa.select(*_HANDLE_COLUMNS).where(Handle.id == handle_id)).one()
    return dict(row._mapping)


class BindLost(exception.Conflict):
    """The ARQ left BindStarted while being bound (unbound, deleted or
    failed by another conductor)."""

    def __init__(self, arq_id):
        super().__init__('Accelerator request %s is no longer being bound.'
                         % arq_id, code='cyborg.arq.bind_lost')


@_retry_on_deadlock
def finish_binding(context, arq_id, ok):
    """BindStarted → Bound (``ok``) or BindFailed, marking Nova's event as
    pending in the same transaction; a failed bind frees its handle.

    Returns the ``updated_at`` written, which its sender claims the event
    with (``claim_events``); None if the ARQ had left BindStarted (the
    bind lost)."""
    if ok:
        stamp = models.utcnow()
        with context.db.writer(context) as session:
            done = session.execute(
                sa.update(ARQ).where(
                    ARQ.id == arq_id, ARQ.state == states.BIND_STARTED
                ).values(state=states.BOUND, bind_conductor=None,
                         bind_deadline=None, nova_event_pending=True,
                         updated_at=stamp))
            return stamp if done.rowcount == 1 else None
    failed = _fail_binds(context, ARQ.id == arq_id)
    return failed[0]['updated_at'] if failed else None


@_retry_on_deadlock
def _fail_binds(context, where):
    with context.db.writer(context) as session:
        rows = session.execute(
            sa.select(ARQ.id, ARQ.uuid, ARQ.instance_uuid,
                      ARQ.attach_handle_id).where(
                where, ARQ.state == states.BIND_STARTED).with_for_update()
        ).all()
        if not rows:
            return []
        ids = [r.id for r in rows]
        stamp = models.utcnow()
        session.execute(
            sa.update(ARQ).where(ARQ.id.in_(ids)).values(
                state=states.BIND_FAILED, bind_conductor=None,
                bind_deadline=None, attach_handle_id=None,
                deployable_id=None, attach_details=None,
                nova_event_pending=True, updated_at=stamp))
        _free_handles(session, [r.attach_handle_id for r in rows])
        return [dict(r._mapping, updated_at=stamp) for r in rows]


def fail_stale_binds(context, older_than_seconds):
    """Fail every bind the API started more than ``older_than_seconds``
    ago, whoever holds it; recovery uses ``fail_overdue_binds`` instead,
    which asks each ARQ's own deadline. Returns the failed ARQs."""
    cutoff = models.utcnow() - datetime.timedelta(
        seconds=older_than_seconds)
    return _fail_binds(context, ARQ.bind_started_at < cutoff)


def fail_overdue_binds(context, now=None, hostnames=None):
    """Fail every bind whose own deadline has passed (its owner took
    longer than ``[conductor] bind_timeout`` over it, or died), only on
    ``hostnames`` if given (None in it: binds with no host). Returns the
    failed ARQs."""
    where = ARQ.bind_deadline < (now or models.utcnow())
    if hostnames is not None:
        named = [h for h in hostnames if h is not None]
        on_hosts = ARQ.hostname.in_(named)
        if None in hostnames:
            on_hosts = on_hosts | ARQ.hostname.is_(None)
        where = where & on_hosts
    return _fail_binds(context, where)


def overdue_bind_hosts(context, now=None):
    """The hosts (None: no host) of the binds whose deadline has passed:
    one SELECT."""
    with context.db.read_connection(context) as connection:
        return list(connection.execute(
            sa.select(ARQ.hostname).distinct().where(
                ARQ.state == states.BIND_STARTED,
                ARQ.bind_deadline < (now or models.utcnow()))).scalars())


def _free_handles(session, handle_ids):
    """Give the handles back: dirty until scrubbed, where their driver
    scrubs (``scrubs.release_handles``)."""
    scrubs.release_handles(session, handle_ids)


# -- Nova's events -------------------------------------------------------

def stale_events(context, older_than_seconds):
    """Events Nova has not got, pending for longer than
    ``older_than_seconds`` (their sender died or Nova was down), of
    instances none of whose ARQs is still being bound: Nova gets an
    instance's events together. Rows of (instance_uuid, uuid, state,
    updated_at)."""
    cutoff = models.utcnow() - datetime.timedelta(
        seconds=older_than_seconds)
    other = orm.aliased(ARQ)
    binding = sa.select(other.id).where(
        other.instance_uuid == ARQ.instance_uuid,
        other.state == states.BIND_STARTED)
    with context.db.read_connection(context) as connection:
        stmt = sa.select(ARQ.instance_uuid, ARQ.uuid, ARQ.state,
                         ARQ.updated_at).where(
            ARQ.nova_event_pending == sa.true(),
            sa.func.coalesce(ARQ.updated_at, ARQ.created_at) < cutoff,
            ~binding.exists()).order_by(ARQ.id)
        return [tuple(r) for r in connection.execute(stmt)]


@_retry_on_deadlock
def claim_events(context, rows):
    """Of the pending events ``rows`` (instance, uuid, state, the
    ``updated_at`` seen), those this caller wins the right to send: a
    compare-and-set on ``updated_at`` per row. The conductor that settled
    a bind claims with the stamp ``finish_binding`` wrote, a recovery pass
    with the one ``stale_events`` read, each right before sending: of two
    senders only one wins, and the winner's new stamp holds off recovery
    for ``nova_event_retry_after`` seconds."""
    claimed = []
    now = models.utcnow()
    with context.db.writer(context) as session:
        for instance, uuid, state, seen in rows:
            # Stamps have whole seconds: a claim in the second of the
            # stamp it replaces must still change it, or a second sender
            # holding the same stamp would win too.
            stamp = now if seen is None else max(
                now, seen + datetime.timedelta(seconds=1))
            done = session.execute(sa.update(ARQ).where(
                ARQ.uuid == uuid, ARQ.nova_event_pending == sa.true(),
                ARQ.updated_at == seen if seen is not None
                else ARQ.updated_at.is_(None)).values(updated_at=stamp))
            if done.rowcount == 1:
                claimed.append((instance, uuid, state))
    return claimed


@_retry_on_deadlock
def events_delivered(context, arq_uuids):
    with context.db.writer(context) as session:
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(list(arq_uuids))).values(nova_event_pending=False))


# -- unbinding and deleting ------------------------------------------------

def _locked(session, where, project_id):
    return session.execute(
        _scoped(sa.select(ARQ.id, ARQ.uuid, ARQ.state, ARQ.instance_uuid,
                          ARQ.hostname, ARQ.attach_handle_id), project_id)
        .where(where).order_by(ARQ.id).with_for_update()).all()


def _check_all_found(rows, uuids):
    missing = set(uuids) - {r.uuid for r in rows}
    if missing:
        raise not_found(', '.join(sorted(missing)))


def _releasing_columns():
    return {'hostname': None, 'device_rp_uuid': None, 'instance_uuid': None,
            'attach_handle_id': None, 'deployable_id': None,
            'bind_conductor': None, 'bind_started_at': None,
            'bind_deadline': None, 'nova_event_pending': False,
            'attach_details': None}


@_retry_on_deadlock
def unbind(context, uuids, project_id=None, describe=False):
    """Unbind every ARQ of ``uuids`` or none: → Unbound, handles freed.
    Returns them as they were before (see ``_views``)."""
    with context.db.writer(context) as session:
        rows = _locked(session, ARQ.uuid.in_(list(uuids)), project_id)
        _check_all_found(rows, uuids)
        allowed = states.sources(states.UNBIND)
        for row in rows:
            if row.state not in allowed:
                raise _refusal(session, row.uuid, project_id, states.UNBIND)
        released = _views(session, rows, describe)
        session.execute(sa.update(ARQ).where(
            ARQ.id.in_([r.id for r in rows])).values(
            state=states.UNBOUND, **_releasing_columns()))
        _free_handles(session, [r.attach_handle_id for r in rows])
    return released


def fail_unbind(context, uuids):
    """Bound → UnbindFailed: the device could not be released; the handle
    stays taken."""
    with context.db.writer(context) as session:
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(list(uuids)),
            ARQ.state.in_(states.sources(states.UNBIND_FAILED_EVENT))
        ).values(state=states.UNBIND_FAILED))


def handles_of(context, uuids=None, instance_uuid=None, project_id=None):
    """The ARQs named (by uuid or instance) with their attach handle and
    deployable driver: what releasing them on their host needs."""
    with context.db.read_connection(context) as connection:
        stmt = _scoped(
            sa.select(ARQ.uuid, ARQ.state, ARQ.hostname, ARQ.instance_uuid,
                      ARQ.attach_details, Handle.uuid.label('handle_uuid'),
                      Handle.attach_type, Handle.attach_info,
                      Deployable.driver_name,
                      # The agent's own name for the host: Nova may have
                      # bound with another (its FQDN).
                      Device.hostname.label('device_hostname'))
            .select_from(ARQ)
            .outerjoin(Handle, Handle.id == ARQ.attach_handle_id)
            .outerjoin(Deployable, Deployable.id == Handle.deployable_id)
            .outerjoin(Device, Device.id == Deployable.device_id),
            project_id)
        if uuids is not None:
            stmt = stmt.where(ARQ.uuid.in_(list(uuids)))
        if instance_uuid is not None:
            stmt = stmt.where(ARQ.instance_uuid == instance_uuid)
        return [dict(r._mapping) for r in connection.execute(stmt)]


@_retry_on_deadlock
def finish_deleting(context, uuids, describe=False):
    """Free the handles of these Deleting ARQs and remove them; returns
    those removed, as they were (see ``_views``)."""
    with context.db.writer(context) as session:
        rows = _locked(session, sa.and_(ARQ.uuid.in_(list(uuids)),
                                        ARQ.state == states.DELETING), None)
        removed = _views(session, rows, describe)
        _free_handles(session, [r.attach_handle_id for r in rows])
        session.execute(sa.delete(ARQ).where(
            ARQ.id.in_([r.id for r in rows])))
    return removed


class ServiceTokenRequired(exception.Forbidden):
    code = 'cyborg.arq.service_token_required'


@functools.cache
def _deleting(by_uuids, scoped):
    """The ARQs ``delete_arqs`` is asked for, locked; built once for each
    form (by uuids or by instance, in a project or in all)."""
    stmt = (sa.select(ARQ.id, ARQ.uuid, ARQ.instance_uuid,
                      ARQ.attach_handle_id, Handle.attach_type)
            .select_from(ARQ)
            .outerjoin(Handle, Handle.id == ARQ.attach_handle_id))
    if scoped:
        stmt = stmt.where(ARQ.project_id == sa.bindparam('project'))
    return stmt.where(
        ARQ.uuid.in_(sa.bindparam('uuids', expanding=True)) if by_uuids
        else ARQ.instance_uuid == sa.bindparam('instance')).order_by(
        ARQ.id).with_for_update(of=ARQ)


_DELETE_ARQS = sa.delete(ARQ.__table__).where(
    ARQ.id.in_(sa.bindparam('ids', expanding=True)))


@functools.cache
def _delete_unheld(scoped):
    """One ARQ that holds nothing (no instance, no handle), deleted by
    uuid in a single statement: what ``delete_arqs`` would do with it,
    without the locking SELECT and the transaction around it."""
    stmt = sa.delete(ARQ.__table__).where(
        ARQ.uuid == sa.bindparam('uuid'), ARQ.instance_uuid.is_(None),
        ARQ.attach_handle_id.is_(None))
    if scoped:
        stmt = stmt.where(ARQ.project_id == sa.bindparam('project'))
    return stmt


@_retry_on_deadlock
def delete_arqs(context, uuids=None, instance_uuid=None, project_id=None,
                allow_bound=True, describe=False):
    """Delete the ARQs named by uuid (all or none) or by instance (none is
    no error). Returns ``(deleted, deferred)``: the ARQs removed, as they
    were (see ``_views``), and the uuids of those left Deleting.

    Those with a handle prepared on a host are only moved to Deleting
    (``deferred``): the conductor releases the device and removes them.
    The others are removed at once; their passage through Deleting is
    invisible and needs no recovery. Unless ``allow_bound``, an ARQ bound
    to an instance refuses the whole request (ServiceTokenRequired).
    """
    if uuids is not None and len(uuids) == 1 and not describe:
        # The common case (an ARQ never bound, or unbound since) in one
        # round trip. Any other (not found, bound, holding a handle) is
        # left alone here and decided below.
        params = {'uuid': uuids[0]}
        if project_id is not None:
            params['project'] = project_id
        with context.db.write_connection(context) as connection:
            done = connection.execute(
                _delete_unheld(project_id is not None), params).rowcount
        if done:
            return [{'uuid': uuids[0]}], []
    with context.db.write_connection(context) as connection:
        rows = connection.execute(
            _deleting(uuids is not None, project_id is not None),
            {'uuids': list(uuids or ()), 'instance': instance_uuid,
             'project': project_id}).all()
        if uuids is not None:
            _check_all_found(rows, uuids)
        bound = [r.uuid for r in rows if r.instance_uuid is not None]
        if bound and not allow_bound:
            raise ServiceTokenRequired(
                'Deleting accelerator request %s, which is bound to an '
                'instance, requires a service token.' % bound[0])
        deferred = [r for r in rows if r.attach_type in PREPARED_ON_HOST]
        now = [r for r in rows if r.attach_type not in PREPARED_ON_HOST]
        if deferred:
            connection.execute(sa.update(ARQ).where(
                ARQ.id.in_([r.id for r in deferred])).values(
                state=states.DELETING))
        # These take a session; a connection runs their statements alike.
        deleted = _views(connection, now, describe)
        if now:
            _free_handles(connection, [r.attach_handle_id for r in now])
            connection.execute(_DELETE_ARQS, {'ids': [r.id for r in now]})
        return deleted, [r.uuid for r in deferred]


def stale_deletions(context, older_than_seconds):
    """Uuids of ARQs left Deleting longer than ``older_than_seconds``."""
    cutoff = models.utcnow() - datetime.timedelta(
        seconds=older_than_seconds)
    with context.db.read_connection(context) as connection:
        return list(connection.execute(
            sa.select(ARQ.uuid).where(
                ARQ.state == states.DELETING,
                sa.func.coalesce(ARQ.updated_at, ARQ.created_at) < cutoff)
        ).scalars())


# -- MIG binds moved to another GPU of their host ---------------------------

def mig_cards_of_host(context, hostname):
    """The deployables of ``hostname`` whose MIG instances are made on
    demand (those with MIG attach handles), with their device, provider
    and traits, by id."""
    has_mig = sa.exists().where(Handle.deployable_id == Deployable.id,
                                Handle.attach_type == 'MIG')
    with context.db.reader(context) as session:
        rows = session.execute(
            _binding_query(sa.and_(Device.hostname == hostname, has_mig))
            .add_columns(Deployable.rp_uuid, Deployable.traits)).all()
    return [dict(row._mapping) for row in rows]


def requests_on_provider(context, rp_uuid):
    """The ARQs being bound or bound to provider ``rp_uuid``, as bind work
    with ``made`` (whether their host made what they asked for yet),
    oldest first: what the claims on that provider stand for, where their
    binds reached this service."""
    with context.db.reader(context) as session:
        return _bind_work(session, sa.and_(
            ARQ.device_rp_uuid == rp_uuid,
            ARQ.state.in_([states.BIND_STARTED, states.BOUND])),
            made=ARQ.attach_details.is_not(None))


def binds_under_way(context, rp_uuids, but):
    """How many ARQs other than ``but`` are being bound to one of the
    providers ``rp_uuids`` with nothing made for them yet: binds that
    would queue on the same cards."""
    if not rp_uuids:
        return 0
    with context.db.reader(context) as session:
        return session.execute(
            sa.select(sa.func.count(ARQ.id)).where(
                ARQ.device_rp_uuid.in_(list(rp_uuids)),
                ARQ.state == states.BIND_STARTED,
                ARQ.attach_details.is_(None),
                ARQ.id != but)).scalar_one()


def instance_requests(context, instance_uuid):
    """The ARQs of ``instance_uuid`` being bound or bound, as bind work
    (their provider and group): what its allocation must hold."""
    with context.db.reader(context) as session:
        return _bind_work(session, sa.and_(
            ARQ.instance_uuid == instance_uuid,
            ARQ.state.in_([states.BIND_STARTED, states.BOUND])))


@_retry_on_deadlock
def move_bind(context, arq_id, handle_id, deployable_id, rp_uuid):
    """Move ARQ ``arq_id``, being bound with attach handle ``handle_id``
    and nothing made for it yet, to a free handle of deployable
    ``deployable_id`` behind provider ``rp_uuid``: its allocation was
    moved there. The new handle (as ``allocate_attach_handle`` gives
    it), or None when that deployable has none free. Raises BindLost if
    the ARQ left BindStarted, or holds another handle, meanwhile."""
    with context.db.writer(context) as session:
        arq = session.execute(
            sa.select(ARQ.state, ARQ.attach_handle_id, ARQ.attach_details)
            .where(ARQ.id == arq_id).with_for_update()).one_or_none()
        if (arq is None or arq.state != states.BIND_STARTED
                or arq.attach_handle_id != handle_id
                or arq.attach_details is not None):
            raise BindLost(arq_id)
        handle = _take_free_handle(session, [deployable_id])
        if handle is None:
            return None
        _free_handles(session, [handle_id])
        session.execute(sa.update(ARQ).where(ARQ.id == arq_id).values(
            attach_handle_id=handle['id'], deployable_id=deployable_id,
            device_rp_uuid=rp_uuid))
        return handle
