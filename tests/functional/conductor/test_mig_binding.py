"""MIG instances made on demand, from the API to the card and back, on
each database engine with a real Placement.

API, conductor and the agent's endpoint share oslo.messaging's in-process
transport; the agent's NVIDIA driver serves the recorded H100 host's
tree, the card is the NVML stand-in with the H100 80GB's profile and
placement tables, and the agent's privileged calls run in the test
process, their checks included. Placement holds the GPU's provider: its
traits must say, after every bind and unbind, which profiles the card
can still create.
"""

import uuid

import pytest

from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.conductor import host_sync
from cyborg.conductor import mig
from cyborg.conductor import placement_sync
from cyborg.privsep import checks
from cyborg.privsep import mig as privsep_mig
from tests import arq_stack
from tests import inventory_rows
from tests.arq_stack import ARQS
from tests.placement_service import create_compute_node
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

HOST = 'gpu-host'
H100 = hosts.H100.bdf
SLICES = {'1g.10gb': (1, 1), '3g.40gb': (3, 4), '4g.40gb': (4, 4),
          '7g.80gb': (7, 8), '2g.20gb': (2, 2)}


class Rig:
    def __init__(self, api, db, library, placement_client, rp):
        self.api = api
        self.db = db
        self.library = library
        self.placement = placement_client
        self.rp = rp

    def bind(self, profile):
        return arq_stack.bind_one(self.api, 'mig-' + profile, self.rp,
                                  str(uuid.uuid4()), HOST)

    def unbind(self, arq):
        self.api.patch_json(ARQS + '/' + arq['uuid'], {arq['uuid']: [
            {'op': 'remove', 'path': '/hostname'}]})
        return self.api.get(ARQS + '/' + arq['uuid']).json

    def held(self):
        """{MIG UUID: (profile, start)} on the card."""
        return {u: (i.profile, i.start)
                for i in self.library.instances(H100) for u in i.uuids}

    def offered(self):
        """The profiles Placement says the GPU can still create."""
        traits = self.placement.get_traits(self.rp)[1]
        return sorted(
            mig.profile_asked({'trait:' + t: 'required'}) for t in traits
            if t.startswith(mig.TRAIT_PREFIX))


@pytest.fixture
def rig(conf, db, tmp_path, monkeypatch, admin_context, privileged_on,
        mig_nvml, placement):  # noqa: F811
    root = tmp_path / 'host'
    sysfs.build(root, [f for f in hosts.H100_HOST
                       if f.bdf in {H100, hosts.H100.parent}])
    library = mig_nvml(H100)
    privileged_on(str(root))
    monkeypatch.setattr(privsep_mig, '_cards', {})
    daemon = checks.daemon_conf()
    daemon.set_override('mig_on_demand_addresses', [H100],
                        group='gpu_devices')
    conf.set_override('host', HOST)
    conf.set_override('mig_on_demand_addresses', [H100],
                      group='gpu_devices')
    driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(str(root)))
    inventory_rows.add_host(db.engine, HOST, driver.discover())
    client = placement.client()
    create_compute_node(placement.adapter(), HOST)
    sync = host_sync.HostSync(client)
    assert sync.sync_host(admin_context, HOST)['status'] == 'synced'
    rp = placement_sync.provider_uuid('%s_migs_%s' % (HOST, H100))
    for profile, (compute, memory) in SLICES.items():
        arq_stack.make_profile(admin_context, 'mig-' + profile, [{
            'resources:CUSTOM_MIG_COMPUTE_SLICE': str(compute),
            'resources:CUSTOM_MIG_MEMORY_SLICE': str(memory),
            'trait:CUSTOM_MIG_PROFILE_%s' % profile.upper().replace(
                '.', '_'): 'required'}])
    try:
        with arq_stack.serving_with_agent(
                conf, db, HOST, [driver], agent_args={'glance': None},
                binder_args={'sync': sync}) as api:
            yield Rig(api, db, library, client, rp)
    finally:
        daemon.clear_override('mig_on_demand_addresses', group='gpu_devices')


def test_each_bind_gets_its_own_instance_and_the_traits_follow(rig):
    assert rig.offered() == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                             '3g.40gb', '4g.40gb', '7g.80gb']

    big = rig.bind('3g.40gb')

    assert big['state'] == 'Bound', big
    assert big['attach_handle_type'] == 'MIG'
    info = big['attach_handle_info']
    assert info['mig_profile'] == '3g.40gb'
    # Best fit: at slot 4, where it leaves the 4g.40gb creatable.
    assert info['start'] == '4'
    assert rig.held()[info['mig_uuid']] == ('3g.40gb', 4)
    assert '7g.80gb' not in rig.offered()
    assert '4g.40gb' in rig.offered()

    small = [rig.bind('1g.10gb') for _ in range(4)]

    assert [a['state'] for a in small] == ['Bound'] * 4
    uuids = {a['attach_handle_info']['mig_uuid'] for a in small}
    assert len(uuids | {info['mig_uuid']}) == 5
    assert sorted(int(a['attach_handle_info']['start']) for a in small) == [
        0, 1, 2, 3]
    # The card is full: Placement offers nothing more.
    assert rig.offered() == []

    freed = rig.unbind(big)

    assert freed['state'] == 'Unbound'
    assert info['mig_uuid'] not in rig.held()
    assert len(rig.held()) == 4
    assert rig.offered() == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                             '3g.40gb']


# The refusal is the card's: one engine is enough.
@pytest.mark.parametrize('database_url', ['sqlite'], indirect=True)
def test_a_bind_the_card_cannot_place_fails_with_that_reason(rig):
    first = rig.bind('4g.40gb')
    assert first['state'] == 'Bound'
    assert rig.offered() == ['1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb',
                             '3g.40gb']

    # A 7g.80gb, as a scheduler that raced the first bind would ask: the
    # card refuses it and nothing is made.
    refused = rig.bind('7g.80gb')

    assert refused['state'] == 'BindFailed'
    assert len(rig.held()) == 1
