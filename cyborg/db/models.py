"""The database schema: the tables and the indexes their queries need.

Devices are found on hosts; each is addressed through control path ids
(for example its PCI physical function) and offers deployables, the units
that Placement sees. Deployables form a tree (parent/root), carry
key/value attributes and own the attach handles that a VM receives.
Accelerator requests (ARQs) are made from a device profile and, once
bound, point at the deployable and the attach handle they were given.
"""

import datetime
import json

import sqlalchemy as sa
from sqlalchemy import orm

# Explicit constraint names, so that every engine and every migration agree.
NAMING_CONVENTION = {
    'ix': 'ix_%(table_name)s_%(column_0_N_name)s',
    'uq': 'uq_%(table_name)s_%(column_0_N_name)s',
    'fk': 'fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s',
    'pk': 'pk_%(table_name)s',
}


def utcnow():
    # Whole seconds: MariaDB drops fractions, and every engine must agree.
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.replace(tzinfo=None, microsecond=0)


class JSONText(sa.types.TypeDecorator):
    """A JSON document kept as text, which every engine stores the same."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value, dialect):
        # Key order is kept: clients read back what they sent.
        return None if value is None else json.dumps(value)

    def process_result_value(self, value, dialect):
        return None if value is None else json.loads(value)


class Base(orm.DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class TimestampMixin:
    # Naive datetimes, always UTC: MariaDB has no time zone type.
    created_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        sa.DateTime, nullable=False, default=utcnow)
    updated_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime, nullable=True, onupdate=utcnow)


def _uuid_column():
    return orm.mapped_column(sa.String(36), nullable=False, unique=True)


class Device(TimestampMixin, Base):
    __tablename__ = 'devices'
    __table_args__ = (
        sa.Index('ix_devices_hostname', 'hostname'),
        sa.Index('ix_devices_type', 'type'),
        sa.Index('ix_devices_vendor', 'vendor'),
        sa.Index('ix_devices_health', 'health'),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    uuid: orm.Mapped[str] = _uuid_column()
    type: orm.Mapped[str] = orm.mapped_column(sa.String(30), nullable=False)
    vendor: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                                nullable=False)
    model: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                               nullable=False)
    std_board_info: orm.Mapped[dict | None] = orm.mapped_column(JSONText)
    vendor_board_info: orm.Mapped[dict | None] = orm.mapped_column(JSONText)
    hostname: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                                  nullable=False)
    # enabled | maintaining (disabled by an operator).
    status: orm.Mapped[str] = orm.mapped_column(
        sa.String(32), nullable=False, default='enabled',
        server_default='enabled')
    # Set when the host stopped reporting the device while something still
    # used it; the rows stay until they are free, then go.
    missing_since: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)
    # healthy | degraded | unhealthy | unknown, as the agent last observed
    # it, with why; written only when it changes, so ``health_updated_at``
    # is when the device entered its state.
    health: orm.Mapped[str] = orm.mapped_column(
        sa.String(16), nullable=False, default='unknown',
        server_default='unknown')
    health_reason: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    health_updated_at: orm.Mapped[datetime.datetime | None] = (
        orm.mapped_column(sa.DateTime))
    # Set automatically when the device turned unhealthy, cleared once it
    # has stayed healthy for ``[conductor] quarantine_hold_down``; while
    # the device is quarantined, Placement reserves its whole inventory.
    quarantined: orm.Mapped[bool] = orm.mapped_column(
        sa.Boolean, nullable=False, default=False,
        server_default=sa.false())
    # The operator's word, kept across reports and restarts: None (health
    # decides), 'ignore' (never quarantined automatically) or 'quarantine'
    # (quarantined whatever its health).
    health_override: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(16))


class ControlPathID(TimestampMixin, Base):
    """How a host addresses a device, for example its PCI physical function."""

    __tablename__ = 'controlpath_ids'
    __table_args__ = (
        sa.UniqueConstraint('device_id', 'cpid_type', 'cpid_info'),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    uuid: orm.Mapped[str] = _uuid_column()
    device_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('devices.id', ondelete='RESTRICT'), nullable=False)
    cpid_type: orm.Mapped[str] = orm.mapped_column(sa.String(30),
                                                   nullable=False)
    # JSON of the address, e.g. {"domain": "0000", "bus": "0c", ...}.
    cpid_info: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                                   nullable=False)


class Deployable(TimestampMixin, Base):
    __tablename__ = 'deployables'
    __table_args__ = (
        sa.Index('ix_deployables_device_id', 'device_id'),
        sa.Index('ix_deployables_rp_uuid', 'rp_uuid'),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    uuid: orm.Mapped[str] = _uuid_column()
    parent_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    root_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    name: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                              nullable=False)
    num_accelerators: orm.Mapped[int] = orm.mapped_column(nullable=False)
    device_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('devices.id', ondelete='RESTRICT'), nullable=False)
    driver_name: orm.Mapped[str | None] = orm.mapped_column(sa.String(100))
    rp_uuid: orm.Mapped[str | None] = orm.mapped_column(sa.String(36))
    bitstream_id: orm.Mapped[str | None] = orm.mapped_column(sa.String(36))
    # What Placement sees: the inventory's class and the provider's traits.
    resource_class: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))
    traits: orm.Mapped[list | None] = orm.mapped_column(JSONText)
    # A claim held across slow work on the whole card (programming an
    # FPGA): the conductor that holds it and since when.
    reservation: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
    reserved_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)


class Attribute(TimestampMixin, Base):
    """A key/value fact about a deployable (resource class, trait, ...)."""

    __tablename__ = 'attributes'
    __table_args__ = (
        sa.UniqueConstraint('deployable_id', 'key'),
        sa.Index('ix_attributes_key', 'key'),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    uuid: orm.Mapped[str] = _uuid_column()
    deployable_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'), nullable=False)
    key: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False)
    value: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                               nullable=False)
    # 'driver': reported by the host's agent, kept in step with its
    # reports; 'operator': made through the API, left alone by reports.
    origin: orm.Mapped[str] = orm.mapped_column(
        sa.String(16), nullable=False, default='operator',
        server_default='operator')


class AttachHandle(TimestampMixin, Base):
    """What a VM receives: a PCI function or a mediated device."""

    __tablename__ = 'attach_handles'
    __table_args__ = (
        # Allocation looks for a free handle of one deployable.
        sa.Index('ix_attach_handles_deployable_id_in_use',
                 'deployable_id', 'in_use'),
        # The scrubber looks for dirty handles.
        sa.Index('ix_attach_handles_state', 'state'),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    uuid: orm.Mapped[str] = _uuid_column()
    deployable_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'), nullable=False)
    cpid_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('controlpath_ids.id', ondelete='RESTRICT'),
        nullable=False)
    # PCI | MDEV | TEST_PCI
    attach_type: orm.Mapped[str] = orm.mapped_column(sa.String(30),
                                                     nullable=False)
    attach_info: orm.Mapped[dict] = orm.mapped_column(JSONText,
                                                      nullable=False)
    # Taken: by an ARQ, or dirty until scrubbed (``state``). Allocation
    # takes only a handle that is not.
    in_use: orm.Mapped[bool] = orm.mapped_column(
        sa.Boolean, nullable=False, default=False, server_default=sa.false())
    # free | in_use | dirty | scrubbing (cyborg.db.api.scrubs); in_use is
    # False exactly when this is free.
    state: orm.Mapped[str] = orm.mapped_column(
        sa.String(16), nullable=False, default='free', server_default='free')
    # Released while its deployable is scrubbed: since when it waits.
    dirty_since: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)
    # The scrub in progress: which conductor asked for it, and since when,
    # so that one left by a crash is found and started again.
    scrub_conductor: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))
    scrub_started_at: orm.Mapped[datetime.datetime | None] = (
        orm.mapped_column(sa.DateTime))
    # The last scrub: passed or failed, the step that failed and why,
    # when it ended and how long it took.
    last_scrub_result: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(16))
    last_scrub_step: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(64))
    last_scrub_message: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    last_scrub_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)
    last_scrub_seconds: orm.Mapped[float | None] = orm.mapped_column(
        sa.Float)


class DeviceProfile(TimestampMixin, Base):
    __tablename__ = 'device_profiles'
    # Ids are never reused (SQLite would give a deleted newest id again).
    __table_args__ = ({'sqlite_autoincrement': True},)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    uuid: orm.Mapped[str] = _uuid_column()
    name: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False,
                                              unique=True)
    description: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    # {"groups": [{"resources:FPGA": "1", ...}, ...]}; group order matters.
    # What the current revision says: kept here too, as every read of a
    # profile wants the current one.
    profile_json: orm.Mapped[dict] = orm.mapped_column(JSONText,
                                                       nullable=False)
    # The number of the current revision (``DeviceProfileRevision``).
    revision: orm.Mapped[int] = orm.mapped_column(
        nullable=False, default=1, server_default='1')
    # Bumped by every write of the profile (revision, enabled, access):
    # what ARQ creation checks in its INSERT against a stale read.
    generation: orm.Mapped[int] = orm.mapped_column(
        nullable=False, default=1, server_default='1')
    # A disabled profile makes no new ARQs; only admins list it.
    enabled: orm.Mapped[bool] = orm.mapped_column(
        sa.Boolean, nullable=False, default=True, server_default=sa.true())
    # A private profile is seen and used only by the projects of
    # ``DeviceProfileProject`` (and admins).
    is_public: orm.Mapped[bool] = orm.mapped_column(
        sa.Boolean, nullable=False, default=True, server_default=sa.true())


class DeviceProfileRevision(Base):
    """One revision of a profile's name, description and groups, kept for
    as long as the profile: ARQs bind by the revision they were made
    from."""

    __tablename__ = 'device_profile_revisions'
    __table_args__ = (sa.UniqueConstraint('device_profile_id', 'revision'),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    device_profile_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('device_profiles.id', ondelete='CASCADE'),
        nullable=False)
    revision: orm.Mapped[int] = orm.mapped_column(nullable=False)
    name: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False)
    description: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    profile_json: orm.Mapped[dict] = orm.mapped_column(JSONText,
                                                       nullable=False)
    created_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        sa.DateTime, nullable=False, default=utcnow)
    # Why it was made: created, updated, or migrated (a rename of a trait
    # or resource class that became standard).
    reason: orm.Mapped[str] = orm.mapped_column(
        sa.String(32), nullable=False, default='created',
        server_default='created')


class DeviceProfileProject(Base):
    """A project that may use a private profile."""

    __tablename__ = 'device_profile_projects'
    __table_args__ = (
        sa.UniqueConstraint('device_profile_id', 'project_id'),
        sa.Index('ix_device_profile_projects_project_id', 'project_id'),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    device_profile_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('device_profiles.id', ondelete='CASCADE'),
        nullable=False)
    project_id: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                                    nullable=False)


class ProjectQuotaLock(Base):
    """One row per project that has made ARQs under limits: creations by
    the project lock it (``FOR UPDATE``) while they count its usage, so
    that two of them never both fit in the room left for one."""

    __tablename__ = 'project_quota_locks'

    project_id: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                                    primary_key=True)
    created_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        sa.DateTime, nullable=False, default=utcnow)


class ExtendedAcceleratorRequest(TimestampMixin, Base):
    """An accelerator request (ARQ): one accelerator for one instance."""

    __tablename__ = 'extended_accelerator_requests'
    __table_args__ = (
        sa.Index('ix_extended_accelerator_requests_instance_uuid',
                 'instance_uuid'),
        sa.Index('ix_extended_accelerator_requests_project_id',
                 'project_id'),
        sa.Index('ix_extended_accelerator_requests_device_profile_id',
                 'device_profile_id'),
        sa.Index('ix_extended_accelerator_requests_state', 'state'),
        sa.Index('ix_extended_accelerator_requests_nova_event_pending',
                 'nova_event_pending'),
        # A MIG bind reads the other ARQs of its GPU's provider inside
        # the GPU's lock.
        sa.Index('ix_extended_accelerator_requests_device_rp_uuid',
                 'device_rp_uuid'),
        # Ids are never reused (SQLite would give a deleted newest id
        # again, to an ARQ that a bind of the old one would then touch).
        {'sqlite_autoincrement': True},
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    uuid: orm.Mapped[str] = _uuid_column()
    project_id: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
    state: orm.Mapped[str] = orm.mapped_column(
        sa.String(32), nullable=False, default='Initial',
        server_default='Initial')
    device_profile_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('device_profiles.id', ondelete='RESTRICT'),
        nullable=False)
    device_profile_group_id: orm.Mapped[int] = orm.mapped_column(
        nullable=False)
    # The profile's revision this ARQ was made from, and binds by.
    device_profile_revision: orm.Mapped[int] = orm.mapped_column(
        nullable=False, default=1, server_default='1')
    hostname: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
    device_rp_uuid: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(36))
    instance_uuid: orm.Mapped[str | None] = orm.mapped_column(sa.String(36))
    deployable_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    # Unique: one attach handle is never given to two ARQs.
    attach_handle_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('attach_handles.id', ondelete='RESTRICT'), unique=True)
    # The bind in progress: which conductor holds it and since when, so
    # that a restarted or another conductor can finish or fail it.
    bind_conductor: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))
    bind_started_at: orm.Mapped[datetime.datetime | None] = (
        orm.mapped_column(sa.DateTime))
    # When the conductor that claimed the bind gives up on it; set per
    # ARQ when its bind really starts, not when the API accepted it.
    bind_deadline: orm.Mapped[datetime.datetime | None] = (
        orm.mapped_column(sa.DateTime))
    # Set with Bound/BindFailed in the same transaction, cleared once Nova
    # has the event: a crash in between leaves it for the next conductor.
    nova_event_pending: orm.Mapped[bool] = orm.mapped_column(
        sa.Boolean, nullable=False, default=False,
        server_default=sa.false())
    # What the host made for this ARQ at bind (a MIG instance: its GPU,
    # profile, start, GPU and compute instance ids and MIG UUID), given
    # back at release so that only that is destroyed; None otherwise.
    attach_details: orm.Mapped[dict | None] = orm.mapped_column(JSONText)


class Service(TimestampMixin, Base):
    """A running service process (conductor, agent) and its heartbeat."""

    __tablename__ = 'services'
    __table_args__ = (sa.UniqueConstraint('host', 'binary'),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    host: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False)
    # cyborg-conductor | cyborg-agent
    binary: orm.Mapped[str] = orm.mapped_column(sa.String(64),
                                                nullable=False)
    # The package version and the newest RPC API version it speaks.
    version: orm.Mapped[str | None] = orm.mapped_column(sa.String(64))
    rpc_version: orm.Mapped[str | None] = orm.mapped_column(sa.String(16))
    last_seen_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        sa.DateTime, nullable=False, default=utcnow)
    # An agent's latest usage figures, written with its heartbeat (one
    # UPDATE): {device address: {figure: value, ...}} and when observed.
    usage: orm.Mapped[dict | None] = orm.mapped_column(JSONText)
    usage_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)


class HostSyncState(TimestampMixin, Base):
    """Whether Placement holds what the database wants for one host.

    Every change of the host's providers bumps ``desired_generation`` in
    the transaction that makes it; a sync that succeeded records the
    generation it read. The host needs a sync while the two differ.
    """

    __tablename__ = 'host_sync_states'
    __table_args__ = (sa.UniqueConstraint('hostname'),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    hostname: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                                  nullable=False)
    desired_generation: orm.Mapped[int] = orm.mapped_column(
        nullable=False, default=1, server_default='1')
    synced_generation: orm.Mapped[int] = orm.mapped_column(
        nullable=False, default=0, server_default='0')
    compute_node_uuid: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(36))
    synced_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)
    last_error: orm.Mapped[str | None] = orm.mapped_column(sa.Text)


class DeviceConfigPolicy(TimestampMixin, Base):
    """An operator's wanted configuration of the devices it selects.

    A policy selects devices by host (names or fnmatch patterns; ``*``
    is every host) and by what the device is (``device_selector``:
    driver, vendor and product ids, PCI addresses). Its ``settings`` are
    of one ``kind`` (``cyborg.device_config.kinds``). Where two policies
    select one device, the higher ``priority`` wins.
    """

    __tablename__ = 'device_config_policies'
    # Ids are never reused: a status row names its policy by id.
    __table_args__ = ({'sqlite_autoincrement': True},)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    uuid: orm.Mapped[str] = _uuid_column()
    name: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False,
                                              unique=True)
    priority: orm.Mapped[int] = orm.mapped_column(nullable=False)
    # ["compute-1", "gpu-*"]: names or fnmatch patterns.
    host_selector: orm.Mapped[list] = orm.mapped_column(JSONText,
                                                        nullable=False)
    # {"driver": ..., "vendor_id": ..., "product_id": ...,
    #  "pci_addresses": [...]}: each key optional, all must match.
    device_selector: orm.Mapped[dict] = orm.mapped_column(JSONText,
                                                          nullable=False)
    kind: orm.Mapped[str] = orm.mapped_column(sa.String(32), nullable=False)
    settings: orm.Mapped[dict] = orm.mapped_column(JSONText, nullable=False)
    # Whether deleting the policy puts its devices back as discovered;
    # otherwise they keep what was applied.
    restore_on_delete: orm.Mapped[bool] = orm.mapped_column(
        sa.Boolean, nullable=False, default=False,
        server_default=sa.false())
    # Set when a policy that restores its devices is deleted while some
    # are still to be put back: from then on it selects nothing, and the
    # row goes with the last of its status rows.
    deleted_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime, nullable=True)


class DeviceConfigStatus(TimestampMixin, Base):
    """Where one device stands with the policy that wins it.

    One row per selected device: the winning policy's settings as wanted,
    what the host last applied, and the state of the change. The row goes
    with its device or its policy.
    """

    __tablename__ = 'device_config_status'
    __table_args__ = (
        sa.UniqueConstraint('device_id'),
        sa.Index('ix_device_config_status_policy_id', 'policy_id'),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    # CASCADE: a device the conductor removes takes its status along,
    # rather than the removal failing on it.
    device_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('devices.id', ondelete='CASCADE'), nullable=False)
    policy_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('device_config_policies.id', ondelete='CASCADE'),
        nullable=False)
    wanted_settings: orm.Mapped[dict] = orm.mapped_column(JSONText,
                                                          nullable=False)
    applied_settings: orm.Mapped[dict | None] = orm.mapped_column(JSONText)
    # pending | draining | applying | applied | failed
    state: orm.Mapped[str] = orm.mapped_column(
        sa.String(16), nullable=False, default='pending',
        server_default='pending')
    failed_task: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
    message: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
