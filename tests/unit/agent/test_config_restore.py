"""Whether a device still holds applied settings after the agent's start
(``config_restore.holds``), from what ``device_state.read`` answers."""

import pytest

from cyborg.agent import config_restore


@pytest.mark.parametrize('kind, settings, state, held', [
    ('sriov_vfs', {'num_vfs': 8}, {'sriov_numvfs': 8}, True),
    ('sriov_vfs', {'num_vfs': 8}, {'sriov_numvfs': 0}, False),
    ('driver_binding', {'driver': 'vfio-pci'},
     {'driver': 'vfio-pci', 'driver_override': 'vfio-pci'}, True),
    # After a reboot: the override gone, the function on its own driver.
    ('driver_binding', {'driver': 'vfio-pci'},
     {'driver': 'i40e', 'driver_override': None}, False),
    ('driver_binding', {'driver': 'vfio-pci'},
     {'driver': 'vfio-pci', 'driver_override': None}, False),
    ('driver_binding', {'driver': 'own'},
     {'driver': 'i40e', 'driver_override': None}, True),
    ('driver_binding', {'driver': 'own'},
     {'driver': None, 'driver_override': None}, False),
    ('vgpu_type', {'mdev_type': 'nvidia-1062'},
     {'vf_vgpu_types': {'0000:4e:00.4': 'nvidia-1062',
                        '0000:4e:00.5': None}}, True),
    ('vgpu_type', {'mdev_type': 'nvidia-1062'},
     {'vf_vgpu_types': dict.fromkeys(['0000:4e:00.4', '0000:4e:00.5'])},
     False),
    ('vgpu_type', {'mdev_type': 'nvidia-472'},
     {'mdev_types': ['nvidia-472']}, True),
    # No VFs, no mdev types: nothing offers the type any more.
    ('vgpu_type', {'mdev_type': 'nvidia-472'}, {'driver': 'nvidia'}, False),
    ('sriov_vfs', {'num_vfs': 8}, None, False),
])
def test_holds(kind, settings, state, held):
    assert config_restore.holds(kind, settings, state) is held
