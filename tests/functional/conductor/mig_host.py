"""The GPU host both MIG stacks stand on (``test_mig_binding``,
``test_mig_restore``): the recorded H100 host's tree, the NVML stand-in
with the H100 80GB's MIG behaviour serving it for MIG on demand, its
provider of slices synced to a real Placement, a device profile per MIG
profile asked, and the agent's privileged calls in the test process."""

import contextlib
import types
import uuid

from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.conductor import host_sync
from cyborg.conductor import placement_sync
from cyborg.privsep import checks
from tests import arq_stack
from tests import inventory_rows
from tests.arq_stack import ARQS
from tests.placement_service import create_compute_node
from tests.unit.drivers import conftest as drivers_conftest
from tests.unit.drivers.trees import hosts

HOST = 'gpu-host'
H100 = hosts.H100.bdf


@contextlib.contextmanager
def mig_host(conf, db, tmp_path, monkeypatch, admin_context, privileged_on,
             mig_nvml, placement, slices, addresses=None):
    """The host, synced. ``slices`` is {MIG profile: (compute slices,
    memory slices)} of the device profiles ``mig-<profile>`` to make;
    ``addresses``, H100s at those addresses instead of the recorded
    host's. Yields ``root``, ``library`` (the stand-in), ``driver``,
    ``client`` (Placement's), ``sync`` (the ``HostSync``), ``rp`` (the
    slices' provider of the first GPU) and ``rps`` (each GPU's, by
    address)."""
    root = tmp_path / 'host'
    library = drivers_conftest.h100_on_demand_host(
        root, monkeypatch, privileged_on, mig_nvml, addresses)
    addresses = list(addresses or [H100])
    daemon = checks.daemon_conf()
    daemon.set_override('mig_on_demand_addresses', addresses,
                        group='gpu_devices')
    try:
        conf.set_override('host', HOST)
        conf.set_override('mig_on_demand_addresses', addresses,
                          group='gpu_devices')
        driver = nvidia.NvidiaGPUDriver(conf, pci.PCIReader(str(root)))
        inventory_rows.add_host(db.engine, HOST, driver.discover())
        client = placement.client()
        create_compute_node(placement.adapter(), HOST)
        sync = host_sync.HostSync(client)
        assert sync.sync_host(admin_context, HOST)['status'] == 'synced'
        for profile, (compute, memory) in slices.items():
            arq_stack.make_profile(admin_context, 'mig-' + profile, [{
                'resources:CUSTOM_MIG_COMPUTE_SLICE': str(compute),
                'resources:CUSTOM_MIG_MEMORY_SLICE': str(memory),
                'trait:CUSTOM_MIG_PROFILE_%s' % profile.upper().replace(
                    '.', '_'): 'required'}])
        rps = {address: placement_sync.provider_uuid(
            '%s_migs_%s' % (HOST, address)) for address in addresses}
        yield types.SimpleNamespace(
            root=root, library=library, driver=driver, client=client,
            sync=sync, rp=rps[addresses[0]], rps=rps)
    finally:
        daemon.clear_override('mig_on_demand_addresses', group='gpu_devices')


class Tenant:
    """What a test does through the API (``api``) on the slices'
    provider ``rp``, and what it reads off the stand-in ``library``."""

    def __init__(self, api, library, rp):
        self.api = api
        self.library = library
        self.rp = rp

    def bind(self, profile):
        return arq_stack.bind_one(self.api, 'mig-' + profile, self.rp,
                                  str(uuid.uuid4()), HOST)

    def unbind(self, arq):
        self.api.patch_json(ARQS + '/' + arq['uuid'], {arq['uuid']: [
            {'op': 'remove', 'path': '/hostname'}]})
        return self.get(arq)

    def get(self, arq):
        return self.api.get(ARQS + '/' + arq['uuid']).json

    def held(self):
        """{MIG UUID: (profile, start)} on the card."""
        return {u: (i.profile, i.start)
                for i in self.library.instances(H100) for u in i.uuids}
