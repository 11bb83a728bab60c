"""What the conductor tells an agent that puts back the MIG instances of
its binds, and the compare-and-set by which an ARQ keeps an instance
made again: on each database engine, through the conductor's RPC API on
the stack of ``test_mig_restore``.
"""

import uuid

import pytest

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg.conductor import mig
from cyborg.conductor import rpcapi as conductor_rpcapi
from tests.functional.conductor.test_mig_restore import HOST
from tests.functional.conductor.test_mig_restore import rig  # noqa: F401
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401


def kept(arq):
    return {name: arq['attach_handle_info'][name] for name in mig.DETAILS}


def test_an_arq_keeps_new_details_only_while_bound_with_the_old_ones(
        rig):  # noqa: F811
    conductor = conductor_rpcapi.ConductorAPI(rig.transport, timeout=10)
    context = cyborg_context.admin_context(None)
    arq = rig.bind('1g.10gb')
    handle = arq['attach_handle_uuid']
    old = kept(arq)

    [held] = conductor.mig_instances_of_host(context, HOST)

    assert held['arq_uuid'] == arq['uuid']
    assert held['state'] == 'Bound'
    assert held['driver_name'] == 'nvidia_gpu_driver'
    assert held['attach_handle']['uuid'] == handle
    assert held['attach_handle']['attach_type'] == 'MIG'
    assert held['attach_details'] == old
    assert conductor.mig_instances_of_host(context, 'another-host') == []

    new = dict(old, gi_id='9', ci_id='0',
               mig_uuid='MIG-%s' % uuid.uuid4())

    def record(was, now, handle_uuid=handle):
        return conductor.record_mig_instance(context, arq['uuid'],
                                             handle_uuid, was, now)

    # Not the details the ARQ keeps, nor its handle: nothing changes.
    assert not record(dict(old, mig_uuid='MIG-%s' % uuid.uuid4()), new)
    assert not record(old, new, handle_uuid=str(uuid.uuid4()))
    assert kept(rig.get(arq)) == old
    # An instance made again is at its own profile and start.
    with pytest.raises(exception.Invalid,
                       match='made again at its own profile and start'):
        record(old, dict(new, start=str(int(old['start']) + 1)))
    assert kept(rig.get(arq)) == old

    assert record(old, new)

    assert kept(rig.get(arq)) == new
    assert [h['attach_details'] for h in conductor.mig_instances_of_host(
        context, HOST)] == [new]
    # Kept once: the old details no longer match.
    assert not record(old, dict(new, mig_uuid='MIG-%s' % uuid.uuid4()))
    assert kept(rig.get(arq)) == new

    assert rig.unbind(arq)['state'] == 'Unbound'

    assert not record(new, old)
    assert conductor.mig_instances_of_host(context, HOST) == []
