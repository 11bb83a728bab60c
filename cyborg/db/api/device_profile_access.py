"""Which projects may use a private device profile, as Nova's flavor
access: only a private profile has such a list; each change bumps the
profile's generation, which ARQ creation checks."""

from oslo_db import exception as db_exc
import sqlalchemy as sa

from cyborg import exception
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles

ProfileProject = models.DeviceProfileProject


def projects(context, uuid=None, name=None):
    """The projects a profile (by uuid or name) is shared with, sorted;
    Conflict for a public profile, which every project uses."""
    with context.db.reader(context) as session:
        profile = device_profiles.find(session, uuid, name)
        _refuse_public(profile)
        return profile, session.scalars(
            sa.select(ProfileProject.project_id).where(
                ProfileProject.device_profile_id == profile.id)
            .order_by(ProfileProject.project_id)).all()


def add_project(context, project_id, uuid=None, name=None):
    """Share the private profile with ``project_id``; Conflict if it is
    public or already shared with it."""
    try:
        with context.db.writer(context) as session:
            profile = device_profiles.find(session, uuid, name,
                                           for_update=True)
            _refuse_public(profile)
            session.add(ProfileProject(device_profile_id=profile.id,
                                       project_id=project_id))
            profile.generation += 1
            session.flush()
    except db_exc.DBDuplicateEntry as e:
        raise exception.Conflict(
            'Device profile %s is already shared with project %s.'
            % (uuid or name, project_id),
            code='cyborg.device_profile.access_exists') from e
    arqs.forget_profile(profile.name)
    return profile


def remove_project(context, project_id, uuid=None, name=None):
    """Stop sharing the private profile with ``project_id``; NotFound if
    it was not. ARQs the project already made are left alone."""
    with context.db.writer(context) as session:
        profile = device_profiles.find(session, uuid, name,
                                       for_update=True)
        _refuse_public(profile)
        gone = session.execute(sa.delete(ProfileProject).where(
            ProfileProject.device_profile_id == profile.id,
            ProfileProject.project_id == project_id)).rowcount
        if not gone:
            raise exception.NotFound(
                'Device profile %s is not shared with project %s.'
                % (profile.name, project_id),
                code='cyborg.device_profile.access_not_found')
        profile.generation += 1
    arqs.forget_profile(profile.name)
    return profile


def _refuse_public(profile):
    if profile.is_public:
        raise exception.Conflict(
            'Device profile %s is public: every project may use it. Make '
            'it private (is_public false) to choose projects.'
            % profile.name, code='cyborg.device_profile.public')
