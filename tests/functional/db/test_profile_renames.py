"""Device profiles across upgrades, on each engine: custom names that
became standard ones are rewritten as a new revision once the devices
publish the standard name, by ``cyborg-dbsync online_data_migrations``
(run here as its migration function); what no device publishes is named
by the upgrade check (``profile_renames.unpublished``)."""

import dataclasses

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db import online_migrations
from cyborg.db.api import arqs as arqs_db
from cyborg.db.api import device_profiles
from cyborg.db.api import profile_renames
from tests import arq_stack
from tests import inventory_rows

# os-traits has HW_GPU_API_VULKAN and os-resource-classes PGPU: names an
# operator may have made up as custom ones before they were standard.
OLD_GROUPS = [{'resources:CUSTOM_PGPU': '1',
               'trait:CUSTOM_HW_GPU_API_VULKAN': 'required',
               'trait:CUSTOM_GPU_NVIDIA': 'required'},
              {'resources:FPGA': '1'}]
NEW_GROUPS = [{'resources:PGPU': '1',
               'trait:HW_GPU_API_VULKAN': 'required',
               'trait:CUSTOM_GPU_NVIDIA': 'required'},
              {'resources:FPGA': '1'}]


def publish(db, host, resource_class, traits):
    """A device on ``host`` whose one deployable publishes
    ``resource_class`` with ``traits``."""
    device, = inventory_rows.fake_devices()
    deployable, = device.deployables
    inventory_rows.add_host(db.engine, host, [dataclasses.replace(
        device, deployables=[dataclasses.replace(
            deployable, resource_class=resource_class,
            traits=list(traits))])])


def run_migrations(context):
    return {o.name: (o.found, o.done)
            for o in online_migrations.run(context)}


def test_a_renamed_name_is_rewritten_once_devices_publish_it(
        db, admin_context):
    arq_stack.make_profile(admin_context, 'gpu', OLD_GROUPS)
    arq_stack.make_profile(admin_context, 'untouched',
                           [{'resources:FPGA': '1'}])
    made, _ = arqs_db.create_arqs(admin_context, 'gpu', 'p1')
    publish(db, 'fpga-host', 'FPGA', ['CUSTOM_FAKE_DEVICE'])
    # The GPUs still publish the custom names: nothing to do yet.
    publish(db, 'gpu-host', 'CUSTOM_PGPU',
            ['CUSTOM_HW_GPU_API_VULKAN', 'CUSTOM_GPU_NVIDIA'])
    assert run_migrations(admin_context)['standard_profile_names'] == (0, 0)

    # The drivers now publish the standard names.
    with db.engine.begin() as connection:
        connection.execute(sa.update(models.Deployable).where(
            models.Deployable.resource_class == 'CUSTOM_PGPU').values(
                resource_class='PGPU',
                traits=['HW_GPU_API_VULKAN', 'CUSTOM_GPU_NVIDIA']))
    with db.engine.connect() as connection:
        assert profile_renames.pending(connection) == 1

    assert run_migrations(admin_context)['standard_profile_names'] == (1, 1)

    profile, revisions = device_profiles.revisions(admin_context,
                                                   name='gpu')
    assert profile.profile_json['groups'] == NEW_GROUPS
    assert [(r.revision, r.reason, r.profile_json['groups'])
            for r in revisions] == [(1, 'created', OLD_GROUPS),
                                    (2, 'migrated', NEW_GROUPS)]
    # The ARQ made before keeps (and binds by) the old revision.
    assert arqs_db.list_arqs(admin_context, uuids=[made['uuid']])[0][
        'device_profile_revision'] == 1
    assert device_profiles.get_profile(admin_context,
                                       name='untouched').revision == 1
    # Done: a second run finds nothing.
    assert run_migrations(admin_context)['standard_profile_names'] == (0, 0)


def test_a_profile_changed_meanwhile_is_left_for_the_next_run(
        db, admin_context, monkeypatch):
    arq_stack.make_profile(admin_context, 'gpu', OLD_GROUPS)
    publish(db, 'gpu-host', 'PGPU', ['HW_GPU_API_VULKAN',
                                     'CUSTOM_GPU_NVIDIA'])
    real_update = device_profiles.update_profile

    def changed_first(context, changes, **kwargs):
        # An operator's update lands between the read and the write.
        real_update(context, {'description': 'changed'}, name='gpu')
        return real_update(context, changes, **kwargs)

    monkeypatch.setattr(device_profiles, 'update_profile', changed_first)
    assert profile_renames.rename(admin_context, 10) == (1, 0)
    monkeypatch.setattr(device_profiles, 'update_profile', real_update)

    assert profile_renames.rename(admin_context, 10) == (1, 1)
    profile = device_profiles.get_profile(admin_context, name='gpu')
    assert (profile.revision, profile.description,
            profile.profile_json['groups']) == (3, 'changed', NEW_GROUPS)


def test_the_names_no_device_publishes_are_found(db, admin_context):
    arq_stack.make_profile(admin_context, 'gpu', OLD_GROUPS)
    arq_stack.make_profile(admin_context, 'fpga', [
        {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required',
         'trait:CUSTOM_NOT_THERE': 'forbidden'}])
    publish(db, 'fpga-host', 'FPGA', ['CUSTOM_FAKE_DEVICE'])

    with db.engine.connect() as connection:
        missing = profile_renames.unpublished(connection)

    # A forbidden trait no device has is as asked.
    assert missing == {'gpu': [
        ('resources', 'CUSTOM_PGPU'), ('trait', 'CUSTOM_GPU_NVIDIA'),
        ('trait', 'CUSTOM_HW_GPU_API_VULKAN')]}
