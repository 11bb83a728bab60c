"""How long the agent waits for its privileged daemon's answer."""

from cyborg.conf import device_config as device_config_conf
from cyborg.privsep import agent_pctxt
from cyborg.privsep import playbook


class Channel:
    """The agent's end of the daemon's socket: what each call asked."""

    running = True

    def __init__(self):
        self.calls = []

    def remote_call(self, name, args, kwargs, timeout):
        self.calls.append((name, timeout))
        return {'status': 'successful'}


def test_a_playbook_is_waited_for_as_long_as_the_daemon_may_run_it(
        monkeypatch):
    channel = Channel()
    monkeypatch.setattr(agent_pctxt, 'client_mode', True)
    monkeypatch.setattr(agent_pctxt, 'channel', channel)

    playbook.run_playbook('sriov_vfs', 'setup',
                          {'pci_address': '0000:18:00.0', 'num_vfs': 8})

    [(name, timeout)] = channel.calls
    assert name == 'cyborg.privsep.playbook.run_playbook'
    # Not the 30 s of a sysfs write: the longest run a configuration
    # allows, with the runner's grace.
    assert timeout > (device_config_conf.MAX_PLAYBOOK_SECONDS
                      + playbook._GRACE)
