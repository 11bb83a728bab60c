"""``arqs.rehearse_binding``: a worker's bind, rehearsed and rolled back."""

import concurrent.futures

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import arqs as arqs_db
from tests.conftest import StatementCounter


def _count(db, model):
    with db.engine.connect() as connection:
        return connection.execute(
            sa.select(sa.func.count()).select_from(model.__table__)
        ).scalar_one()


def test_a_rehearsal_runs_the_bind_and_leaves_nothing(db, admin_context):
    counter = StatementCounter(*db.engines)
    try:
        arqs_db.rehearse_binding(admin_context)
    finally:
        counter.close()

    # The bind's own UPDATE ran...
    assert any(s.lstrip().upper().startswith(
        'UPDATE EXTENDED_ACCELERATOR_REQUESTS') for s in counter.statements)
    # ... and nothing of it stayed.
    assert _count(db, models.ExtendedAcceleratorRequest) == 0
    assert _count(db, models.DeviceProfile) == 0


def test_rehearsals_at_once_hold_nothing_the_other_needs(db, admin_context):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = [pool.submit(arqs_db.rehearse_binding, admin_context)
                for _ in range(4)]
        for future in done:
            future.result(timeout=60)
    assert _count(db, models.ExtendedAcceleratorRequest) == 0
