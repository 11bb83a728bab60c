"""The settings of each kind and the selectors, as stored and as refused;
the checks against what the selected devices report."""

import pytest

from cyborg import exception
from cyborg.device_config import device_checks
from cyborg.device_config import kinds
from cyborg.device_config import selection


def device(**facts):
    values = {'id': 1, 'uuid': 'd1', 'hostname': 'compute-1',
              'vendor_id': '8086', 'product_id': '1572',
              'drivers': frozenset({'intel_nic_driver'}),
              'pci_address': '0000:3b:00.0'}
    values.update(facts)
    return selection.DeviceFacts(**values)


@pytest.mark.parametrize('kind, given, stored', [
    ('sriov_vfs', {'num_vfs': 0}, {'num_vfs': 0}),
    ('driver_binding', {'driver': 'own'}, {'driver': 'own'}),
    ('vgpu_type', {'mdev_type': 'i915-GVTg_V5_4'},
     {'mdev_type': 'i915-GVTg_V5_4'}),
    ('fpga_base_image',
     {'bitstream_uuid': '0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e'},
     {'bitstream_uuid': '0b2c5e1f-3a4d-4b6c-8d0e-1f2a3b4c5d6e'}),
    ('mig_layout', {'mig_enabled': True,
                    'mig_devices': {'1g.10gb': 7, '3g.40gb': 0}},
     {'mig_enabled': True, 'mig_devices': {'1g.10gb': 7}}),
    ('mig_layout', {'mig_enabled': False},
     {'mig_enabled': False, 'mig_devices': {}}),
    ('playbook', {'playbook': 'qat-vfs'},
     {'playbook': 'qat-vfs', 'variables': {}}),
])
def test_settings_as_stored(kind, given, stored):
    assert kinds.check(kind, given) == stored


@pytest.mark.parametrize('kind, given', [
    ('sriov_vfs', {'num_vfs': 2049}),
    ('sriov_vfs', {'num_vfs': 1.5}),
    ('sriov_vfs', [8]),
    ('vgpu_type', {'mdev_type': 'nvidia'}),
    # The API gives the stored form only.
    ('fpga_base_image',
     {'bitstream_uuid': '0B2C5E1F-3A4D-4B6C-8D0E-1F2A3B4C5D6E'}),
    ('vgpu_type', {'mdev_type': 'nvidia-35\n'}),
    ('mig_layout', {'mig_enabled': True, 'mig_devices': [['1g.10gb', 7]]}),
    ('mig_layout', {'mig_enabled': True, 'mig_devices': {'1g.10gb': 1.0}}),
    ('playbook', {'playbook': '-x'}),
    ('playbook', {'playbook': 'x', 'variables': {'a': 'b' * 256}}),
])
def test_settings_refused(kind, given):
    with pytest.raises(exception.Invalid) as caught:
        kinds.check(kind, given)
    assert caught.value.status == 400
    assert caught.value.message.endswith('.')


def test_selectors_as_stored():
    assert selection.check_hosts(['b', 'a*', 'b']) == ['a*', 'b']
    assert selection.check_devices({
        'vendor_id': '10DE', 'pci_addresses': ['0000:AF:00.0',
                                               '0000:af:00.0']}) == {
        'vendor_id': '10de', 'pci_addresses': ['0000:af:00.0']}


@pytest.mark.parametrize('hosts, selector, selected', [
    (['*'], {'vendor_id': '8086'}, True),
    (['compute-?'], {'product_id': '1572'}, True),
    (['compute-[2-9]'], {'vendor_id': '8086'}, False),
    (['Compute-1'], {'vendor_id': '8086'}, False),
    (['compute-1'], {'driver': 'intel_nic_driver'}, True),
    (['compute-1'], {'driver': 'intel_qat_driver'}, False),
    (['*'], {'vendor_id': '8086', 'product_id': '1592'}, False),
    (['*'], {'pci_addresses': ['0000:3b:00.0']}, True),
    (['*'], {'pci_addresses': ['0000:3b:00.1']}, False),
])
def test_selection(hosts, selector, selected):
    assert selection.selects(hosts, selector, device()) is selected


def test_exact_hosts_narrow_a_query_only_without_patterns():
    assert selection.exact_hosts(['a', 'b']) == ['a', 'b']
    assert selection.exact_hosts(['a', 'b*']) is None


def test_devices_that_report_nothing_are_left_to_the_agent():
    silent = device(sriov_totalvfs=None, mdev_types=None,
                    product_id='20b0', vendor_id='10de')
    device_checks.check('sriov_vfs', {'num_vfs': 2048}, {}, [silent])
    device_checks.check('vgpu_type', {'mdev_type': 'nvidia-1'}, {}, [silent])
    device_checks.check('mig_layout', {'mig_enabled': True,
                                       'mig_devices': {'7g.80gb': 2}},
                        {}, [silent])
    # A GPU that offers no vGPU type at all says so.
    with pytest.raises(exception.Invalid, match='it offers none.'):
        device_checks.check('vgpu_type', {'mdev_type': 'nvidia-1'}, {},
                            [device(mdev_types=())])
