"""What a project's ARQs hold, as limits count it
(``cyborg.db.api.project_usage``), on each engine."""

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db import session
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import project_usage
from tests import arq_stack
from tests import db_servers
from tests.conftest import create_schema
from tests.conftest import make_conf

VGPU = [{'resources:VGPU': '2'}]


def _usage(context, project_id='p'):
    return project_usage.usage_of(context, project_id)


def test_each_revision_counts_its_own_groups(admin_context):
    arq_stack.make_profile(admin_context, 'gpu', VGPU)
    arqs.create_arqs(admin_context, 'gpu', 'p')
    device_profiles.update_profile(
        admin_context, {'groups': [{'resources:PGPU': '1'}]}, name='gpu')
    arqs.create_arqs(admin_context, 'gpu', 'p')
    arqs.create_arqs(admin_context, 'gpu', 'other')
    usage = _usage(admin_context)
    assert usage.arqs == 3
    assert usage.by_class == {'VGPU': 2, 'PGPU': 1}
    assert usage.by_profile == {'gpu': 3}
    # One ARQ of a two-VGPU group deleted alone still counts its share.
    first = arqs.list_arqs(admin_context, project_id='p')[0]
    arqs.delete_arqs(admin_context, uuids=[first['uuid']])
    arqs.finish_deleting(admin_context, [first['uuid']])
    assert _usage(admin_context).by_class == {'VGPU': 1, 'PGPU': 1}


def test_a_projects_lock_row_is_made_once(admin_context, db):
    for _ in range(2):
        with db.write_connection(admin_context) as connection:
            project_usage.lock(connection, 'p')
    rows = db.read_rows(admin_context, models.ProjectQuotaLock.__table__
                        .select())
    assert [r.project_id for r in rows] == ['p']


def test_groups_are_kept_by_profile_uuid_not_id(admin_context, tmp_path):
    """Two databases whose profiles have the same id and revision but
    different groups: each is counted by its own."""
    url = db_servers.create_database('sqlite', tmp_path)
    create_schema(url)
    other_db = session.Database(make_conf(url))
    try:
        other = cyborg_context.admin_context(other_db, project_id='p')
        arq_stack.make_profile(admin_context, 'gpu', VGPU)
        arq_stack.make_profile(other, 'gpu', [{'resources:FPGA': '1'}])
        arqs.create_arqs(admin_context, 'gpu', 'p')
        arqs.create_arqs(other, 'gpu', 'p')
        assert _usage(admin_context).by_class == {'VGPU': 2}
        assert _usage(other).by_class == {'FPGA': 1}
    finally:
        other_db.dispose()
        db_servers.drop_database(url)
