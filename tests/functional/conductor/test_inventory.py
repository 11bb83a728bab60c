"""apply_host_inventory on the three engines: the diff and its writes."""

import dataclasses
import threading

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg.accelerator.drivers import fake
from cyborg.conductor import inventory as inventory_sync
from cyborg.db import models
from cyborg.objects import inventory as objects_inventory
from tests.functional.conductor import inventories
from tests.functional.conductor.inventories import copy
from tests.functional.conductor.inventories import fake_devices
from tests.functional.conductor.inventories import gpu
from tests.functional.conductor.inventories import host
from tests.functional.conductor.inventories import nested_fpga
from tests.functional.conductor.inventories import rows


def apply(context, report):
    return inventory_sync.apply_host_inventory(context, copy(report))


def test_first_report_creates_every_row(admin_context, db):
    report = host(*fake_devices(), nested_fpga('5e'))

    changes = apply(admin_context, report)

    assert changes.changed
    assert changes.counts['devices_added'] == 2
    [fake_device, fpga] = rows(db, models.Device)
    assert (fake_device.type, fake_device.vendor, fake_device.hostname,
            fake_device.status, fake_device.missing_since) == (
        'FPGA', 'abcd', inventories.HOST, 'enabled', None)
    assert fake_device.std_board_info == {'vendor_id': 'abcd',
                                          'product_id': 'abcd'}
    assert len(rows(db, models.ControlPathID)) == 2
    board = inventories.deployable_row(db, 'fpga_5e')
    region = inventories.deployable_row(db, 'fpga_5e_region0')
    assert (board.parent_id, board.root_id) == (None, None)
    assert (region.parent_id, region.root_id) == (board.id, board.id)
    assert region.resource_class == 'CUSTOM_FPGA_REGION'
    assert region.traits == ['CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_REGION_0']
    assert {(a.key, a.value) for a in rows(
        db, models.Attribute, deployable_id=region.id)} == {
        ('region_uuid', 'r-0'), ('bitstream', 'none')}
    fake_deployable = inventories.deployable_row(db, 'FakeDevice')
    handles = rows(db, models.AttachHandle,
                   deployable_id=fake_deployable.id)
    assert len(handles) == 16
    assert {h.attach_type for h in handles} == {'TEST_PCI'}
    assert not any(h.in_use for h in handles)
    # What Placement needs, one entry per deployable.
    assert [(d.name, d.resource_class, d.total, d.disabled, d.missing)
            for d in changes.deployables] == [
        ('FakeDevice', 'FPGA', 16, False, False),
        ('fpga_5e', 'FPGA', 1, False, False),
        ('fpga_5e_region0', 'CUSTOM_FPGA_REGION', 1, False, False)]


@pytest.mark.parametrize('extra_devices', [0, 40])
def test_unchanged_report_reads_three_statements_and_writes_nothing(
        admin_context, db, sql_counter, db_writes, extra_devices):
    report = host(*fake_devices(), nested_fpga('5e'),
                  *(gpu('%02x' % (0x80 + i)) for i in range(extra_devices)))
    apply(admin_context, report)
    sql_counter.reset()
    db_writes.reset()

    changes = apply(admin_context, report)

    assert not changes.changed
    assert db_writes.writes == []
    assert len(sql_counter) == 3, sql_counter.statements
    assert not any(s.lstrip().upper().startswith(('INSERT', 'UPDATE',
                                                  'DELETE'))
                   for s in sql_counter.statements)
    assert len(changes.deployables) == 3 + extra_devices


def test_reordered_report_is_no_change(admin_context, db_writes):
    report = host(*fake_devices(), gpu('81'), gpu('82'))
    apply(admin_context, report)
    db_writes.reset()
    reordered = copy(report)
    reordered.devices.reverse()
    fake_deployable = reordered.devices[-1].deployables[0]
    fake_deployable.attach_handles.reverse()
    fake_deployable.traits = list(reversed(fake_deployable.traits))
    for handle in fake_deployable.attach_handles:
        handle.attach_info = dict(reversed(handle.attach_info.items()))

    assert not apply(admin_context, reordered).changed
    assert db_writes.writes == []


def test_changed_report_writes_only_the_change(admin_context, db,
                                               db_writes):
    report = host(*fake_devices(), gpu('81'))
    apply(admin_context, report)
    before = {h.uuid: h for h in rows(db, models.AttachHandle)}
    db_writes.reset()
    changed = copy(report)
    fake_deployable = changed.devices[0].deployables[0]
    fake_deployable.traits.append('CUSTOM_FPGA_FUNCTION_X')
    fake_deployable.attributes['function'] = 'x'
    removed = fake_deployable.attach_handles.pop()

    changes = apply(admin_context, changed)

    assert changes.changed
    # The last: Placement must follow (the host's desired generation).
    assert db_writes.tables() == [('DELETE', 'attach_handles'),
                                  ('INSERT', 'attributes'),
                                  ('UPDATE', 'deployables'),
                                  ('UPDATE', 'host_sync_states')]
    after = {h.uuid: h for h in rows(db, models.AttachHandle)}
    # The other handles keep their rows and uuids.
    assert set(after) < set(before)
    assert len(after) == len(before) - 1
    assert removed.attach_info not in [h.attach_info for h in after.values()]
    row = inventories.deployable_row(db, 'FakeDevice')
    assert row.traits == ['CUSTOM_FAKE_DEVICE', 'CUSTOM_FPGA_FUNCTION_X']
    # The GPU, untouched by the change, was not written.
    assert inventories.deployable_row(db, 'gpu_81').updated_at is None

    db_writes.reset()
    assert not apply(admin_context, changed).changed
    assert db_writes.writes == []


def test_device_fields_and_deployable_tree_change(admin_context, db):
    report = host(nested_fpga('5e'))
    apply(admin_context, report)
    changed = copy(report)
    device = changed.devices[0]
    device.model = 'PAC N3000'
    device.vendor_board_info = {'shell': 'v2'}
    region = device.deployables[1]
    region.num_accelerators = 2
    region.resource_class = 'FPGA'
    region.attributes = {'region_uuid': 'r-0', 'bitstream': 'crypto'}
    # A second level under the region.
    device.deployables.append(dataclasses.replace(
        region, name='fpga_5e_function0', parent='fpga_5e_region0',
        attach_handles=[], attributes={}))

    changes = apply(admin_context, changed)

    assert changes.counts['devices_updated'] == 1
    assert changes.counts['deployables_added'] == 1
    [device_row] = rows(db, models.Device)
    assert (device_row.model, device_row.vendor_board_info) == (
        'PAC N3000', {'shell': 'v2'})
    board = inventories.deployable_row(db, 'fpga_5e')
    region_row = inventories.deployable_row(db, 'fpga_5e_region0')
    function = inventories.deployable_row(db, 'fpga_5e_function0')
    assert (region_row.num_accelerators, region_row.resource_class) == (
        2, 'FPGA')
    assert (function.parent_id, function.root_id) == (region_row.id,
                                                      board.id)
    assert {a.key: a.value for a in rows(
        db, models.Attribute, deployable_id=region_row.id)} == {
        'region_uuid': 'r-0', 'bitstream': 'crypto'}
    assert not apply(admin_context, changed).changed


def test_gone_device_is_deleted_bottom_up(admin_context, db):
    report = host(*fake_devices(), nested_fpga('5e'))
    apply(admin_context, report)

    changes = apply(admin_context, host(*fake_devices()))

    assert changes.counts['devices_removed'] == 1
    assert [d.model for d in rows(db, models.Device)] == ['FakeFPGA']
    assert [d.name for d in rows(db, models.Deployable)] == ['FakeDevice']
    # Only the fake deployable's own attribute is left.
    assert [a.key for a in rows(db, models.Attribute)] == ['region_uuid']
    assert len(rows(db, models.ControlPathID)) == 1
    assert len(rows(db, models.AttachHandle)) == 16
    assert [d.name for d in changes.deployables] == ['FakeDevice']


def test_gone_device_in_use_stays_missing_until_free(admin_context, db,
                                                     db_writes):
    apply(admin_context, host(*fake_devices(), gpu('81')))
    arq = inventories.bind_handle(db, 'FakeDevice')

    changes = apply(admin_context, host(gpu('81')))

    assert changes.counts['devices_missing'] == 1
    fake_row = rows(db, models.Device, model='FakeFPGA')[0]
    assert fake_row.missing_since is not None
    assert len(rows(db, models.AttachHandle)) == 17
    [missing] = [d for d in changes.deployables if d.name == 'FakeDevice']
    assert missing.missing and missing.reserved_fully

    # Still gone, still used: nothing to write.
    db_writes.reset()
    again = apply(admin_context, host(gpu('81')))
    assert not again.changed
    assert db_writes.writes == []
    assert [d.missing for d in again.deployables] == [True, False]

    inventories.unbind(db, arq)
    freed = apply(admin_context, host(gpu('81')))

    assert freed.counts['devices_removed'] == 1
    assert [d.model for d in rows(db, models.Device)] == ['A100']
    assert [d.name for d in freed.deployables] == ['gpu_81']


def test_gone_device_comes_back_before_it_is_free(admin_context, db):
    apply(admin_context, host(*fake_devices()))
    inventories.bind_handle(db, 'FakeDevice')
    apply(admin_context, host())

    changes = apply(admin_context, host(*fake_devices()))

    assert changes.counts['devices_updated'] == 1
    [device] = rows(db, models.Device)
    assert device.missing_since is None
    assert [(d.name, d.missing) for d in changes.deployables] == [
        ('FakeDevice', False)]


def test_handle_in_use_is_never_removed(admin_context, db):
    apply(admin_context, host(*fake_devices()))
    inventories.bind_handle(db, 'FakeDevice')
    in_use = [h for h in rows(db, models.AttachHandle) if h.in_use]
    report = host(*fake_devices())
    report.devices[0].deployables[0].attach_handles = []

    changes = apply(admin_context, report)

    assert changes.counts['attach_handles_removed'] == 15
    assert rows(db, models.AttachHandle) == in_use


def test_gone_deployable_in_use_is_kept_and_listed_missing(admin_context,
                                                           db):
    apply(admin_context, host(nested_fpga('5e')))
    inventories.bind_handle(db, 'fpga_5e_region0')
    report = host(nested_fpga('5e'))
    del report.devices[0].deployables[1]

    changes = apply(admin_context, report)

    assert [(d.name, d.missing) for d in changes.deployables] == [
        ('fpga_5e', False), ('fpga_5e_region0', True)]
    assert len(rows(db, models.Deployable)) == 2


def test_contradicting_report_is_refused(admin_context, db):
    report = host(gpu('81'), gpu('81'))
    with pytest.raises(exception.Invalid, match='reported twice'):
        apply(admin_context, report)
    orphan = host(nested_fpga('5e'))
    orphan.devices[0].deployables[1].parent = 'nowhere'
    with pytest.raises(exception.Invalid, match='nowhere'):
        apply(admin_context, orphan)
    assert rows(db, models.Device) == []


def test_concurrent_first_reports_write_the_host_once(db):
    """Two conductors with the same first report of a host."""
    report = host(*fake_devices(), gpu('81'))
    barrier = threading.Barrier(2)
    errors = []

    def conductor():
        context = cyborg_context.admin_context(db)
        try:
            barrier.wait()
            apply(context, report)
        except Exception as exc:  # asserted below, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=conductor) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert len(rows(db, models.Device)) == 2
    assert len(rows(db, models.Deployable)) == 2
    assert len(rows(db, models.AttachHandle)) == 17


@pytest.mark.parametrize('database_url', ['mysql', 'postgresql'],
                         indirect=True)
def test_a_report_committed_while_another_is_read_tears_no_read(db):
    """A conductor reads the host (no lock) while another conductor
    commits the same first report between the read's statements; on the
    engines where a write need not wait for a reader."""
    report = host(*fake_devices(), gpu('81'))
    reader = threading.current_thread()
    committed = []

    def other_conductor():
        apply(cyborg_context.admin_context(db), report)
        committed.append(True)

    @sa.event.listens_for(db.engine, 'after_cursor_execute')
    def commit_after_the_devices_read(conn, cursor, statement, *args):
        if (threading.current_thread() is reader and not committed
                and 'FROM devices' in statement):
            writer = threading.Thread(target=other_conductor)
            writer.start()
            writer.join(timeout=60)

    try:
        changes = apply(cyborg_context.admin_context(db), report)
    finally:
        sa.event.remove(db.engine, 'after_cursor_execute',
                        commit_after_the_devices_read)

    assert committed == [True]
    # The other conductor wrote the host; this one found it done.
    assert not changes.changed
    assert [d.name for d in changes.deployables] == ['FakeDevice', 'gpu_81']
    assert len(rows(db, models.Device)) == 2
    assert len(rows(db, models.Deployable)) == 2
    assert len(rows(db, models.AttachHandle)) == 17


def test_reports_leave_operator_attributes_alone(admin_context, db):
    apply(admin_context, host(*fake_devices()))
    [deployable] = rows(db, models.Deployable)
    with db.engine.begin() as conn:
        conn.execute(sa.insert(models.Attribute).values(
            uuid='2b0f6d1e-5c4a-4f3b-8e9d-7a6c5b4d3e2f',
            deployable_id=deployable.id, key='owner', value='team-a',
            created_at=models.utcnow()))

    apply(admin_context, host(*fake_devices()))
    kept = {a.key: (a.value, a.origin) for a in rows(db, models.Attribute)}
    changes = apply(admin_context, host())

    assert kept == {'owner': ('team-a', 'operator'),
                    'region_uuid': (fake.REGION_UUID, 'driver')}
    # The device went away: its operator attribute goes with it.
    assert changes.counts['devices_removed'] == 1
    assert rows(db, models.Attribute) == []


def _vgpus(marks):
    """A GPU whose vGPU handles (type nvidia-472 on VF af:00.4) carry the
    given marks."""
    address = objects_inventory.PCIAddress('0000', 'af', '00', '0')
    vf = objects_inventory.PCIAddress('0000', 'af', '00', '4')
    return objects_inventory.Device(
        type='GPU', vendor='10de', model='A100',
        controlpath_type='PCI', controlpath_info=address.as_info(),
        std_board_info={'vendor_id': '10de', 'product_id': '20b0'},
        deployables=[objects_inventory.Deployable(
            name='vgpu_0000:af:00.0_nvidia-472',
            num_accelerators=len(marks), resource_class='VGPU',
            driver_name='nvidia_gpu_driver', traits=['CUSTOM_GPU_NVIDIA'],
            attach_handles=[objects_inventory.AttachHandle('MDEV', {
                **vf.as_info(), 'asked_type': 'nvidia-472',
                'vgpu_mark': mark}) for mark in marks])])


def test_a_handle_whose_mark_alone_changed_is_the_same_handle(
        admin_context, db):
    """A driver that numbers its vGPU handles anew (an upgrade, a sibling
    VF gone) renames them: the stored rows keep their ids, uuids and
    holders, and take the new info; none is added or removed."""
    apply(admin_context, host(_vgpus(['nvidia-472_2'])))
    inventories.bind_handle(db, 'vgpu_0000:af:00.0_nvidia-472')
    [before] = rows(db, models.AttachHandle)

    changes = apply(admin_context, host(_vgpus(['nvidia-472_0'])))

    assert (changes.counts['attach_handles_updated'],
            changes.counts['attach_handles_added'],
            changes.counts['attach_handles_removed']) == (1, 0, 0)
    [after] = rows(db, models.AttachHandle)
    assert (after.id, after.uuid, after.in_use) == (before.id, before.uuid,
                                                    True)
    assert after.attach_info['vgpu_mark'] == 'nvidia-472_0'
    # Reported again as it is now: nothing to write.
    again = apply(admin_context, host(_vgpus(['nvidia-472_0'])))
    assert not any(again.counts.values()), again.counts
