"""apply_device_config through the agent's RPC endpoint: the pair it runs
for a VF count follows the kernel driver that holds the PF as it
applies (a stand-in runs the playbooks)."""

import os

from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.qat import intel as qat
from tests.unit.agent.conftest import HOST
from tests.unit.agent.conftest import agent_conf
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs


def info(function):
    domain, bus, slot_function = function.bdf.split(':')
    device, number = slot_function.split('.')
    return {'domain': domain, 'bus': bus, 'device': device,
            'function': number}


def test_a_qat_pf_vf_count_runs_the_pair_of_its_driver(serve_agent,
                                                       tmp_path):
    root = sysfs.build(str(tmp_path / 'io'), hosts.HOSTS['io'])
    runs = []

    def run_playbook(pair, action, variables):
        runs.append((pair, action, variables))
        return {'status': 'successful', 'rc': 0, 'tasks': [],
                'failed_task': None, 'message': ''}
    conf = agent_conf()
    agent = serve_agent(conf, [qat.IntelQATDriver(conf, pci.PCIReader(root))],
                        run_playbook=run_playbook)

    def apply(function):
        runs.clear()
        result = agent.api.apply_device_config(
            agent.context, HOST, info(function), 'sriov_vfs',
            {'num_vfs': 4}, {'num_vfs': 8})
        assert result['state'] == 'applied', result
        return [(pair, action, variables.get('vf_driver'),
                 variables['num_vfs']) for pair, action, variables in runs]

    assert apply(hosts.QAT_C62X) == [
        ('qat_vfs', 'teardown', 'c6xxvf', 4),
        ('qat_vfs', 'setup', 'c6xxvf', 8)]
    assert runs[1][2] == {'pci_address': hosts.QAT_C62X.bdf, 'num_vfs': 8,
                          'vf_driver': 'c6xxvf', 'cfg_services': 'keep'}
    # Upstream, gen4 VFs come up bound to no driver.
    assert apply(hosts.QAT_4XXX)[-1] == ('qat_vfs', 'setup', 'none', 8)

    # Unbound since discovery: no QAT driver to take the VFs' count.
    os.unlink(os.path.join(root, 'sys/bus/pci/devices',
                           hosts.QAT_C62X_NO_VFS.bdf, 'driver'))
    assert apply(hosts.QAT_C62X_NO_VFS) == [
        ('sriov_vfs', 'teardown', None, 4), ('sriov_vfs', 'setup', None, 8)]
