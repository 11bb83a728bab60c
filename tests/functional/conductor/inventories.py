"""Host inventories as agents report them, and a look at the rows."""

import uuid

import sqlalchemy as sa

from cyborg.accelerator.drivers import fake
from cyborg.db import models
from cyborg.objects import inventory
from tests.functional.conductor.conftest import HOST


def fake_devices():
    """What the fake driver discovers: one FPGA with 16 handles."""
    return fake.FakeDriver(conf=None, pci_reader=None).discover()


def gpu(bus):
    """A whole GPU at 0000:<bus>:00.0 given to VMs as a PCI function."""
    address = inventory.PCIAddress('0000', bus, '00', '0')
    return inventory.Device(
        type='GPU', vendor='10de', model='A100',
        controlpath_type='PCI', controlpath_info=address.as_info(),
        std_board_info={'vendor_id': '10de', 'product_id': '20b0'},
        deployables=[inventory.Deployable(
            name='gpu_%s' % bus, num_accelerators=1, resource_class='PGPU',
            driver_name='nvidia_gpu_driver',
            traits=['CUSTOM_GPU_NVIDIA', 'CUSTOM_GPU_PRODUCT_ID_20B0'],
            attach_handles=[inventory.AttachHandle('PCI',
                                                   address.as_info())],
            attributes={'numa_node': '0'})])


def nested_fpga(bus):
    """An FPGA board with a region inside it (a deployable tree)."""
    address = inventory.PCIAddress('0000', bus, '00', '0')
    vf = inventory.PCIAddress('0000', bus, '00', '1')
    return inventory.Device(
        type='FPGA', vendor='8086', model='PAC',
        controlpath_type='PCI', controlpath_info=address.as_info(),
        deployables=[
            inventory.Deployable(
                name='fpga_%s' % bus, num_accelerators=1,
                resource_class='FPGA', driver_name='intel_fpga_driver',
                traits=['CUSTOM_FPGA_INTEL']),
            inventory.Deployable(
                name='fpga_%s_region0' % bus, num_accelerators=1,
                resource_class='CUSTOM_FPGA_REGION',
                driver_name='intel_fpga_driver',
                traits=['CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_REGION_0'],
                attach_handles=[inventory.AttachHandle('PCI',
                                                       vf.as_info())],
                attributes={'region_uuid': 'r-0', 'bitstream': 'none'},
                parent='fpga_%s' % bus)])


def host(*devices, hostname=HOST):
    return inventory.HostInventory(hostname=hostname, devices=list(devices))


def copy(report):
    """A report as it arrives over RPC: a fresh object of equal content."""
    return inventory.HostInventory.from_dict(report.to_dict())


def rows(db, mapped, **where):
    table = mapped.__table__
    stmt = sa.select(table).order_by(table.c.id)
    for column, value in where.items():
        stmt = stmt.where(table.c[column] == value)
    with db.engine.connect() as connection:
        return connection.execute(stmt).all()


def deployable_row(db, name):
    [row] = rows(db, models.Deployable, name=name)
    return row


def bind_handle(db, deployable_name):
    """Give one attach handle of the deployable to an ARQ, as binding does.

    Returns the ARQ's uuid.
    """
    deployable = deployable_row(db, deployable_name)
    handle = rows(db, models.AttachHandle, deployable_id=deployable.id)[0]
    arq_uuid = str(uuid.uuid4())
    with db.engine.begin() as connection:
        profile_id = connection.execute(
            sa.insert(models.DeviceProfile.__table__).values(
                uuid=str(uuid.uuid4()), name='dp-%s' % arq_uuid[:8],
                profile_json={'groups': [{'resources:FPGA': '1'}]},
                created_at=models.utcnow())).inserted_primary_key[0]
        connection.execute(
            sa.insert(models.ExtendedAcceleratorRequest.__table__).values(
                uuid=arq_uuid, state='Bound',
                device_profile_id=profile_id, device_profile_group_id=0,
                hostname=HOST, instance_uuid=str(uuid.uuid4()),
                deployable_id=deployable.id, attach_handle_id=handle.id,
                created_at=models.utcnow()))
        connection.execute(
            sa.update(models.AttachHandle.__table__)
            .where(models.AttachHandle.__table__.c.id == handle.id)
            .values(in_use=True))
    return arq_uuid


def unbind(db, arq_uuid):
    """Delete the ARQ and free its attach handle."""
    arqs = models.ExtendedAcceleratorRequest.__table__
    handles = models.AttachHandle.__table__
    with db.engine.begin() as connection:
        handle_id = connection.execute(
            sa.select(arqs.c.attach_handle_id)
            .where(arqs.c.uuid == arq_uuid)).scalar_one()
        connection.execute(sa.delete(arqs).where(arqs.c.uuid == arq_uuid))
        connection.execute(sa.update(handles)
                           .where(handles.c.id == handle_id)
                           .values(in_use=False))
