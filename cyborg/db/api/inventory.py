"""Host inventory queries: read one host's devices, lock the host, write.

Reading a host costs three statements whatever its size: devices with
their control paths, deployables with their attributes, attach handles.
Each is one query joined to ``devices`` by hostname. JSON columns are
read as raw text, so that comparing an unchanged report costs no JSON
parsing (see ``same_json``).

All functions take a SQLAlchemy Core connection that the caller got from
a ``Database`` transaction; the conductor decides the transaction.
"""

import dataclasses
import functools
import json

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import locking
from cyborg.device_config import status as config_states

devices = models.Device.__table__
controlpaths = models.ControlPathID.__table__
deployables = models.Deployable.__table__
attributes = models.Attribute.__table__
DRIVER_ORIGIN = 'driver'
attach_handles = models.AttachHandle.__table__
arqs = models.ExtendedAcceleratorRequest.__table__
config_status = models.DeviceConfigStatus.__table__


def _raw(column):
    # The stored text, without the JSON decoding of the column type.
    return sa.type_coerce(column, sa.Text).label(column.name)


@dataclasses.dataclass(slots=True)
class StoredHandle:
    id: int
    uuid: str
    deployable_id: int
    attach_type: str
    attach_info: str  # JSON text
    in_use: bool
    # An ARQ points at it, whatever in_use says.
    referenced: bool

    @property
    def busy(self):
        return self.in_use or self.referenced


@dataclasses.dataclass(slots=True)
class StoredDeployable:
    id: int
    uuid: str
    device_id: int
    name: str
    num_accelerators: int
    driver_name: str | None
    resource_class: str | None
    traits: str | None  # JSON text
    parent_id: int | None
    root_id: int | None
    rp_uuid: str | None
    referenced: bool  # an ARQ points at it
    attributes: dict = dataclasses.field(default_factory=dict)  # key: row
    handles: list = dataclasses.field(default_factory=list)

    @property
    def busy(self):
        return self.referenced or any(h.busy for h in self.handles)

    def trait_list(self):
        return json.loads(self.traits) if self.traits else []


@dataclasses.dataclass(slots=True)
class StoredAttribute:
    id: int
    value: str


@dataclasses.dataclass(slots=True)
class StoredDevice:
    id: int
    uuid: str
    type: str
    vendor: str
    model: str
    std_board_info: str | None  # JSON text
    vendor_board_info: str | None  # JSON text
    status: str
    missing_since: object
    cpid_id: int | None
    cpid_type: str | None
    cpid_info: str | None  # JSON text, keys sorted when written here
    # For device_health.effective_quarantine.
    quarantined: bool = False
    health_override: str | None = None
    # Its configuration is being changed, or failed
    # (device_config_status.HELD): out of scheduling.
    config_held: bool = False
    deployables: dict = dataclasses.field(default_factory=dict)  # by name

    @property
    def busy(self):
        return any(d.busy for d in self.deployables.values())


# read_host's statements, built once: it runs for every report of every
# host, and rebuilding them (and their cache keys) each time was a large
# share of an unchanged report's cost.
_READ_DEVICES = (
    sa.select(devices.c.id, devices.c.uuid, devices.c.type,
              devices.c.vendor, devices.c.model,
              _raw(devices.c.std_board_info),
              _raw(devices.c.vendor_board_info),
              devices.c.status, devices.c.missing_since,
              controlpaths.c.id.label('cpid_id'),
              controlpaths.c.cpid_type, controlpaths.c.cpid_info,
              devices.c.quarantined, devices.c.health_override,
              sa.exists().where(
                  config_status.c.device_id == devices.c.id,
                  config_status.c.state.in_(config_states.HELD))
              .label('config_held'))
    .select_from(devices.outerjoin(
        controlpaths, controlpaths.c.device_id == devices.c.id))
    .where(devices.c.hostname == sa.bindparam('hostname'))
    .order_by(devices.c.id, controlpaths.c.id))

_READ_DEPLOYABLES = (
    sa.select(deployables.c.id, deployables.c.uuid,
              deployables.c.device_id, deployables.c.name,
              deployables.c.num_accelerators, deployables.c.driver_name,
              deployables.c.resource_class, _raw(deployables.c.traits),
              deployables.c.parent_id, deployables.c.root_id,
              deployables.c.rp_uuid,
              sa.exists().where(arqs.c.deployable_id == deployables.c.id)
              .label('referenced'),
              attributes.c.id.label('attribute_id'),
              attributes.c.key.label('attribute_key'),
              attributes.c.value.label('attribute_value'))
    .select_from(deployables.join(
        devices, devices.c.id == deployables.c.device_id).outerjoin(
        attributes, sa.and_(
            attributes.c.deployable_id == deployables.c.id,
            # Operators' attributes are not the report's to change.
            attributes.c.origin == DRIVER_ORIGIN)))
    .where(devices.c.hostname == sa.bindparam('hostname')))

_READ_HANDLES = (
    sa.select(attach_handles.c.id, attach_handles.c.uuid,
              attach_handles.c.deployable_id,
              attach_handles.c.attach_type,
              _raw(attach_handles.c.attach_info),
              attach_handles.c.in_use,
              sa.exists().where(
                  arqs.c.attach_handle_id == attach_handles.c.id)
              .label('referenced'))
    .select_from(attach_handles.join(
        deployables,
        deployables.c.id == attach_handles.c.deployable_id).join(
        devices, devices.c.id == deployables.c.device_id))
    .where(devices.c.hostname == sa.bindparam('hostname')))


class TornRead(Exception):
    """``read_host``'s statements saw different commits.

    PostgreSQL reads each statement of a READ COMMITTED transaction at
    its own snapshot: a report of the host committed between them leaves
    deployables whose device was not read, or handles whose deployable
    was not. Only a reader that does not hold the host's lock
    (``lock_host``) can see one.
    """


def read_host(connection, hostname):
    """The host's devices, each with deployables, attributes and handles.

    Three statements. A device with several control paths is keyed by
    the first one (lowest id); its other rows are ignored. Raises
    ``TornRead`` where a write of the host committed between them.
    """
    params = {'hostname': hostname}
    found = {}
    for row in connection.execute(_READ_DEVICES, params):
        if row[0] not in found:
            found[row[0]] = StoredDevice(*row)

    by_id = {}
    # Positional: building objects from thousands of rows is the cost of
    # an unchanged report.
    for row in connection.execute(_READ_DEPLOYABLES, params):
        deployable = by_id.get(row[0])
        if deployable is None:
            device = found.get(row[2])
            if device is None:
                raise TornRead(hostname)
            deployable = by_id[row[0]] = StoredDeployable(
                *row[:11], bool(row[11]))
            device.deployables[row[3]] = deployable
        if row[12] is not None:
            deployable.attributes[row[13]] = StoredAttribute(row[12],
                                                             row[14])

    for row in connection.execute(_READ_HANDLES, params):
        deployable = by_id.get(row[2])
        if deployable is None:
            raise TornRead(hostname)
        deployable.handles.append(StoredHandle(
            row[0], row[1], row[2], row[3], row[4], bool(row[5]),
            bool(row[6])))
    return list(found.values())


def lock_host(connection, hostname):
    """Serialise writers of one host's inventory until the transaction ends.

    Two conductors may handle reports of the same host. Readers never
    wait: only a report that has something to write takes the lock, then
    reads the host again and decides its writes on that fresh state. A
    host's first report has no rows to lock, and both writers would
    insert the same devices: see ``locking``. On MySQL/MariaDB the lock
    is on the host's device rows through the hostname index.
    """
    # The name is the bare hostname: the key conductors of the release
    # before take too.
    locking.take_turns(connection, [hostname], devices,
                       devices.c.hostname == hostname)


def insert_rows(connection, table, rows):
    """Insert ``rows`` (dicts) in one statement; their ids, in order."""
    if not rows:
        return []
    now = models.utcnow()
    for row in rows:
        row.setdefault('created_at', now)
    # Matched back by uuid rather than by RETURNING order, which SQLite
    # does not promise: SQLAlchemy would then insert row by row.
    result = connection.execute(
        sa.insert(table).returning(table.c.uuid, table.c.id), rows)
    ids = dict(result.all())
    return [ids[row['uuid']] for row in rows]


def update_row(connection, table, row_id, values):
    values = dict(values, updated_at=models.utcnow())
    connection.execute(sa.update(table).where(table.c.id == row_id)
                       .values(**values))


def delete_rows(connection, table, ids):
    if ids:
        connection.execute(sa.delete(table).where(table.c.id.in_(ids)))


def delete_attributes_of(connection, deployable_ids):
    """Every attribute of these deployables, whoever made it."""
    if deployable_ids:
        connection.execute(sa.delete(attributes).where(
            attributes.c.deployable_id.in_(deployable_ids)))


def insert_driver_attributes(connection, rows):
    """Insert reported attributes; a reported key takes over an operator's
    attribute of the same key on that deployable.
    """
    if not rows:
        return
    connection.execute(sa.delete(attributes).where(
        sa.tuple_(attributes.c.deployable_id, attributes.c.key).in_(
            [(row['deployable_id'], row['key']) for row in rows]),
        attributes.c.origin != DRIVER_ORIGIN))
    insert_rows(connection, attributes,
                [dict(row, origin=DRIVER_ORIGIN) for row in rows])


def find_device_host(connection, device_uuid):
    """``(hostname, status)`` of the device, or None if there is none."""
    return connection.execute(
        sa.select(devices.c.hostname, devices.c.status)
        .where(devices.c.uuid == device_uuid)).one_or_none()


def set_device_status(connection, device_uuid, status):
    """True if the status changed (a compare-and-set on the old value)."""
    result = connection.execute(
        sa.update(devices)
        .where(devices.c.uuid == device_uuid, devices.c.status != status)
        .values(status=status, updated_at=models.utcnow()))
    return result.rowcount > 0


def record_provider_uuids(connection, provider_uuids):
    """Set ``rp_uuid`` of deployables, ``{deployable id: rp uuid}``, and
    ``device_rp_uuid`` of the ARQs bound to them."""
    if not provider_uuids:
        return
    rows = [{'b_deployable_id': i, 'provider_uuid': u}
            for i, u in provider_uuids.items()]
    connection.execute(
        sa.update(deployables)
        .where(deployables.c.id == sa.bindparam('b_deployable_id'))
        .values(rp_uuid=sa.bindparam('provider_uuid')), rows)
    connection.execute(
        sa.update(arqs)
        .where(arqs.c.deployable_id == sa.bindparam('b_deployable_id'))
        .values(device_rp_uuid=sa.bindparam('provider_uuid')), rows)


def handle_holders(connection, hostname):
    """``{instance uuid: {deployable name: attach handles its ARQs
    hold}}`` on the host."""
    rows = connection.execute(
        sa.select(arqs.c.instance_uuid, deployables.c.name,
                  sa.func.count().label('held'))
        .select_from(arqs.join(
            attach_handles, attach_handles.c.id == arqs.c.attach_handle_id)
            .join(deployables,
                  deployables.c.id == attach_handles.c.deployable_id)
            .join(devices, devices.c.id == deployables.c.device_id))
        .where(devices.c.hostname == hostname,
               arqs.c.instance_uuid.is_not(None))
        .group_by(arqs.c.instance_uuid, deployables.c.name))
    holders = {}
    for instance_uuid, name, held in rows:
        holders.setdefault(instance_uuid, {})[name] = held
    return holders


# Board infos and trait lists repeat across a host's devices: their
# texts are parsed once. The parsed values are only compared, never
# changed.
_parse_json = functools.lru_cache(maxsize=1024)(json.loads)


def same_json(stored_text, value):
    """Whether stored JSON text holds ``value`` (None and {} alike)."""
    if stored_text is None:
        return not value
    stored = _parse_json(stored_text)
    return stored == value or (not stored and not value)
