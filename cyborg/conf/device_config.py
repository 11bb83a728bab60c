"""[device_config] options: where the agent's privsep daemon finds the
playbooks that configure devices, and how long one may run."""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'device_config'
TITLE = 'Device configuration playbooks'
# The longest a playbook may be given: a MIG layout on eight GPUs, or an
# FPGA base image, takes minutes, not hours.
MAX_PLAYBOOK_SECONDS = 3600

opts = [
    cfg.StrOpt('playbook_dir',
               default='/etc/cyborg/playbooks',
               help='The operator\'s own playbook pairs, one directory '
                    'each (setup.yml, teardown.yml, variables.yml), beside '
                    'those the service ships. Read by the agent\'s privsep '
                    'daemon, which runs a playbook only if the directory, '
                    'every directory above it and the playbook files '
                    'belong to root and no one else may write them. '
                    '"cyborg-playbooks check" checks a directory before '
                    'use. A pair of the same name as a shipped one is '
                    'refused.'),
    cfg.IntOpt('playbook_timeout',
               default=900,
               min=10,
               max=MAX_PLAYBOOK_SECONDS,
               help='Seconds one playbook run may take before it is '
                    'stopped and its device left failed.'),
    cfg.StrOpt('nvml_library',
               default='libnvidia-ml.so.1',
               help='The NVML library the MIG playbooks load (the '
                    'nvml_library variable of every playbook): a library '
                    'name the dynamic loader finds, or an absolute path. '
                    'An absolute path to a Python file (.py) names a '
                    'replay of a recorded card instead, which defines '
                    'install(pynvml): for dry runs and tests, never for a '
                    'host whose cards are in use. Like the playbooks, such '
                    'a file and every directory above it must belong to '
                    'root alone.'),
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
