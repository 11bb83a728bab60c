"""[scrub] options: how attach handles are scrubbed between tenants.

The agent reads ``disabled_drivers`` (it reports which of its
deployables are scrubbed); the conductors read the rest (they ask the
agents to scrub, and wait for them).
"""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'scrub'
TITLE = 'Scrubbing devices between tenants'

# Seconds each scrub method may take, unless [scrub] timeouts says.
DEFAULT_TIMEOUTS = {
    'flr': 60,
    'mdev-destroy': 30,
    'mig-destroy': 60,
    # A sanitize is waited for up to 600 s (nvme_scrub.NVME_SETTLE; the
    # next scrub waits again), after a few reads of at most 70 s each. A
    # format takes seconds on most drives (nvme-cli allows it 600 s).
    'nvme-sanitize': 900,
    # A base image's download and load ([conductor] agent_program_timeout
    # is 240 s by default), then a discovery and an inventory report.
    'fpga-base-image': 300,
    'fake': 30,
}
# A method not named anywhere.
FALLBACK_TIMEOUT = 120

opts = [
    cfg.ListOpt('disabled_drivers',
                default=[],
                help='Drivers whose devices are not scrubbed when an '
                     'instance lets them go (agent): their attach handles '
                     'are free for the next instance at once, with what '
                     'the last tenant left on them. Every driver that can '
                     'scrub does unless named here; the API shows each '
                     'deployable\'s scrub method, none for these.'),
    cfg.DictOpt('timeouts',
                default={},
                help='Seconds a scrub may take, by method (conductor), '
                     'over the defaults: ' + ', '.join(
                         '%s:%d' % item
                         for item in sorted(DEFAULT_TIMEOUTS.items()))
                     + '. A scrub past its time has failed: the device is '
                       'quarantined and the handle stays dirty.'),
    cfg.IntOpt('interval',
               default=5,
               min=1,
               help='Seconds between two looks of a conductor for dirty '
                    'attach handles on the hosts it owns.'),
    cfg.IntOpt('retry_interval',
               default=300,
               min=1,
               help='Seconds before a handle whose scrub failed is '
                    'scrubbed again (its device stays quarantined until '
                    'one passes).'),
]


def timeout_of(conf, method):
    """Seconds a scrub by ``method`` may take."""
    configured = conf.scrub.timeouts or {}
    value = configured.get(method, DEFAULT_TIMEOUTS.get(method,
                                                        FALLBACK_TIMEOUT))
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return DEFAULT_TIMEOUTS.get(method, FALLBACK_TIMEOUT)


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
