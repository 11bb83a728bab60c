"""The shipped mig_layout pair with the real ansible-runner and
ansible-core, against the recorded H100 host's tree and the NVML stand-in
with the H100 80GB's MIG profile and placement tables.

The pair's module runs in a process of its own: it loads the stand-in
through ``nvml_library`` (``nvml_mig_replay``), which keeps the GPU's
instances in a file between processes as a card keeps them between
programs. The test's own stand-in reads them back, and the agent's
driver discovers the GPU through it.
"""

import pytest

from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers.gpu import nvidia
from cyborg.agent import device_config
from cyborg.device_config import kinds
from cyborg.device_config import status as config_status
from cyborg.privsep import checks
from cyborg.privsep import playbook
from tests.unit.drivers import nvml_mig_replay
from tests.unit.drivers.conftest import make_driver_conf
from tests.unit.drivers.conftest import mig_nvml  # noqa: F401
from tests.unit.drivers.trees import hosts
from tests.unit.drivers.trees import sysfs

H100 = hosts.H100.bdf
SEVEN = {'mig_enabled': True, 'mig_devices': {'1g.10gb': 7}}
TWO = {'mig_enabled': True, 'mig_devices': {'3g.40gb': 2}}


class Card:
    """The H100's tree and its NVML, shared with the playbook's process."""

    def __init__(self, root, card_dir, library):
        self.root = root
        self.card_dir = card_dir
        self.library = library

    def run(self, pair, action, variables, check_mode=False):
        nvml_library = nvml_mig_replay.write(self.card_dir, self.library)
        result = playbook.run(pair, action, variables, check_mode,
                              str(self.root), timeout=120,
                              nvml_library=nvml_library)
        nvml_mig_replay.read(self.card_dir, self.library)
        return result

    def apply(self, applied, wanted):
        """What the agent does for a mig_layout policy."""
        return device_config.apply(kinds.MIG_LAYOUT, H100, applied, wanted,
                                   self.run)

    def layout(self):
        return sorted((i.profile, i.start, len(i.uuids))
                      for i in self.library.instances(H100))

    def discover(self):
        driver = nvidia.NvidiaGPUDriver(make_driver_conf(),
                                        pci.PCIReader(str(self.root)))
        [gpu] = [d for d in driver.discover()
                 if d.controlpath_info['bus'] == '4e']
        return gpu


@pytest.fixture
def card(tmp_path, mig_nvml):  # noqa: F811
    root = tmp_path / 'host'
    sysfs.build(root, [f for f in hosts.H100_HOST
                       if f.bdf in {H100, hosts.H100.parent}])
    card_dir = tmp_path / 'card'
    card_dir.mkdir(mode=0o755)
    return Card(root, card_dir, mig_nvml(H100))


def test_seven_1g_instances_apply_and_appear_as_devices(card):
    # In MIG mode with no instance, the GPU is published neither whole
    # nor sliced.
    assert card.discover().deployables == []

    done = card.apply(None, SEVEN)

    assert done['state'] == config_status.APPLIED, done
    assert done['changed'] == ['mig_layout setup: Set the MIG mode and '
                               'layout']
    assert card.layout() == [('1g.10gb', start, 1) for start in range(7)]
    [deployable] = card.discover().deployables
    assert deployable.name == 'mig_%s_1g.10gb' % H100
    assert deployable.resource_class == 'CUSTOM_MIG_1G_10GB'
    assert deployable.num_accelerators == 7
    assert 'CUSTOM_MIG_PROFILE_1G_10GB' in deployable.traits
    handles = deployable.attach_handles
    assert {h.attach_type for h in handles} == {'MIG'}
    uuids = {h.attach_info['mig_uuid'] for h in handles}
    assert len(uuids) == 7
    assert uuids == {u for i in card.library.instances(H100)
                     for u in i.uuids}
    assert sorted(int(h.attach_info['start']) for h in handles) == list(
        range(7))

    # Applied is a no-op the next time.
    again = card.apply(SEVEN, SEVEN)
    assert again['state'] == config_status.APPLIED
    assert again['changed'] == []
    assert {h.attach_info['mig_uuid']
            for h in card.discover().deployables[0].attach_handles} == uuids


def test_a_new_layout_replaces_the_old_one(card):
    assert card.apply(None, SEVEN)['state'] == config_status.APPLIED

    done = card.apply(SEVEN, TWO)

    assert done['state'] == config_status.APPLIED, done
    assert done['changed'] == [
        "mig_layout teardown: Destroy the layout's instances",
        'mig_layout setup: Set the MIG mode and layout']
    assert card.layout() == [('3g.40gb', 0, 1), ('3g.40gb', 4, 1)]
    [deployable] = card.discover().deployables
    assert deployable.resource_class == 'CUSTOM_MIG_3G_40GB'
    assert deployable.num_accelerators == 2


def test_an_instance_in_use_is_never_destroyed(card):
    assert card.apply(None, SEVEN)['state'] == config_status.APPLIED
    busy = card.library.instances(H100)[2]
    card.library.run_process(H100, busy.gi_id, busy.ci_ids[0], 4242)

    done = card.apply(None, TWO)

    assert done['state'] == config_status.FAILED
    assert done['failed_task'] == 'Set the MIG mode and layout'
    assert 'has running processes: nothing destroyed' in done['message']
    assert busy.uuids[0] in done['message']
    # The instance stays; no 3g.40gb was made next to what is left.
    assert (busy.gi_id, busy.uuids) in {
        (i.gi_id, i.uuids) for i in card.library.instances(H100)}
    assert all(i.profile == '1g.10gb' for i in card.library.instances(H100))


def test_turning_mig_on_is_refused_while_it_waits_for_a_reset(
        tmp_path, mig_nvml):  # noqa: F811
    root = tmp_path / 'host'
    sysfs.build(root, [f for f in hosts.H100_HOST
                       if f.bdf in {H100, hosts.H100.parent}])
    card_dir = tmp_path / 'card'
    card_dir.mkdir(mode=0o755)
    card = Card(root, card_dir, mig_nvml(H100, mig_enabled=False))
    [whole] = card.discover().deployables
    assert whole.resource_class == 'PGPU'

    done = card.apply(None, SEVEN)

    assert done['state'] == config_status.FAILED
    assert done['message'] == (
        'MIG mode of %s turns on at the GPU\'s next reset, which is never '
        'forced: reset it when it is idle (nvidia-smi -r -i %s), then the '
        'policy applies' % (H100, H100))
    # Pending, not current: the GPU is still whole, and holds nothing.
    assert card.library.state()[H100]['mode'] == [0, 1]
    assert card.discover().deployables[0].resource_class == 'PGPU'

    # The operator resets the GPU: the same policy applies.
    card.library.set_mig_mode(H100, 1)
    assert card.apply(None, SEVEN)['state'] == config_status.APPLIED
    assert len(card.library.instances(H100)) == 7


def test_check_mode_says_what_it_would_do_and_changes_nothing(card):
    before = card.library.state()

    result = card.run('mig_layout', 'setup',
                      {'pci_address': H100, **SEVEN}, check_mode=True)

    assert result['status'] == 'successful', result
    assert [t['status'] for t in result['tasks']] == ['changed']
    assert card.library.state() == before


def test_the_library_a_playbook_loads_must_be_roots_alone(tmp_path):
    open_dir = tmp_path / 'open'
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    replay = open_dir / 'nvml.py'
    replay.write_text('')
    with pytest.raises(checks.InvalidArgument, match='may be changed by '
                       'others than root'):
        playbook.checked_run('mig_layout', 'setup',
                             {'pci_address': H100, **SEVEN}, '/',
                             nvml_library=str(replay))
    for library in ('nvml.so', 'lib/../nvml.so', 'libnvidia-ml.so.1;x'):
        with pytest.raises(checks.InvalidArgument):
            playbook.checked_run('mig_layout', 'setup',
                                 {'pci_address': H100, **SEVEN}, '/',
                                 nvml_library=library)
    _, extravars = playbook.checked_run('mig_layout', 'setup',
                                        {'pci_address': H100, **SEVEN}, '/')
    assert extravars['nvml_library'] == 'libnvidia-ml.so.1'
