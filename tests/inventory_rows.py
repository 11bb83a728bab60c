"""Inventory rows written straight into the database, as the conductor
would store a host's report: devices, control paths, deployables, attach
handles and attributes.

For API tests and for seeding tempest before an agent runs.
"""

import dataclasses
import json
import uuid as uuidlib

import sqlalchemy as sa

from cyborg.accelerator.drivers import fake
from cyborg.db import models


@dataclasses.dataclass
class StoredDeployable:
    uuid: str
    id: int
    root_id: int | None  # None for a top-level deployable
    attributes: dict  # key -> attribute uuid


@dataclasses.dataclass
class StoredDevice:
    uuid: str
    id: int
    deployables: dict  # name -> StoredDeployable


# Facts a driver may report about the fake deployable.
FAKE_ATTRIBUTES = {'rc': 'FPGA', 'trait0': fake.TRAIT}


def fake_devices(**changes):
    """What the fake driver discovers, its deployable with attributes,
    with ``changes`` to the device.
    """
    # The fake driver reads neither its configuration nor PCI.
    devices = fake.FakeDriver(None, None).discover()
    for device in devices:
        device.deployables = [
            dataclasses.replace(d, attributes=dict(FAKE_ATTRIBUTES))
            for d in device.deployables]
    return [dataclasses.replace(d, **changes) for d in devices]


def add_host(engine, hostname, devices):
    """Store ``devices`` (``cyborg.objects.inventory.Device``) of a host.

    Returns a ``StoredDevice`` per device, in order.
    """
    now = models.utcnow()
    stored = []
    with engine.begin() as conn:
        for device in devices:
            stored.append(_add_device(conn, hostname, device, now))
    return stored


def _insert(conn, mapped, **values):
    values.setdefault('uuid', str(uuidlib.uuid4()))
    values.setdefault('created_at', models.utcnow())
    row_id = conn.execute(
        sa.insert(mapped).values(**values)).inserted_primary_key[0]
    return values['uuid'], row_id


def _add_device(conn, hostname, device, now):
    device_uuid, device_id = _insert(
        conn, models.Device, type=device.type, vendor=device.vendor,
        model=device.model, std_board_info=device.std_board_info,
        vendor_board_info=device.vendor_board_info, hostname=hostname,
        created_at=now)
    _, cpid_id = _insert(
        conn, models.ControlPathID, device_id=device_id,
        cpid_type=device.controlpath_type,
        cpid_info=json.dumps(device.controlpath_info, sort_keys=True),
        created_at=now)
    deployables = {}
    for deployable in device.deployables:
        # Parents come before their children.
        parent = deployables.get(deployable.parent)
        root_id = None
        if parent is not None:
            root_id = parent.root_id or parent.id
        dep_uuid, dep_id = _insert(
            conn, models.Deployable, name=deployable.name,
            num_accelerators=deployable.num_accelerators,
            device_id=device_id, driver_name=deployable.driver_name,
            rp_uuid=str(uuidlib.uuid3(uuidlib.NAMESPACE_DNS, '%s_%s' % (
                hostname, deployable.name))),
            resource_class=deployable.resource_class,
            traits=deployable.traits,
            parent_id=parent.id if parent else None, root_id=root_id,
            created_at=now)
        if deployable.attach_handles:
            # One statement for all of them: most tests store a host.
            conn.execute(sa.insert(models.AttachHandle), [
                {'uuid': str(uuidlib.uuid4()), 'deployable_id': dep_id,
                 'cpid_id': cpid_id, 'attach_type': handle.attach_type,
                 'attach_info': handle.attach_info, 'created_at': now}
                for handle in deployable.attach_handles])
        attributes = {}
        for key, value in deployable.attributes.items():
            attributes[key], _ = _insert(
                conn, models.Attribute, deployable_id=dep_id, key=key,
                value=value, origin='driver', created_at=now)
        deployables[deployable.name] = StoredDeployable(
            dep_uuid, dep_id, root_id, attributes)
    return StoredDevice(device_uuid, device_id, deployables)


def record_usage(engine, hostname, usage, usage_at=None):
    """An agent's latest usage figures on its service row, as its
    heartbeat writes them: ``{PCI address: {figure: value, ...}}``."""
    table = models.Service.__table__
    now = models.utcnow()
    values = {'usage': usage, 'usage_at': usage_at or now,
              'last_seen_at': now}
    with engine.begin() as conn:
        if not conn.execute(table.update().where(
                table.c.host == hostname,
                table.c.binary == 'cyborg-agent').values(**values)).rowcount:
            conn.execute(table.insert().values(
                host=hostname, binary='cyborg-agent', created_at=now,
                **values))


def set_health(engine, device_uuid, **values):
    """Write a device's health columns as the conductor would."""
    with engine.begin() as conn:
        conn.execute(sa.update(models.Device).where(
            models.Device.uuid == device_uuid).values(**values))
