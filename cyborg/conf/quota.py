"""[quota] options: whether ARQ creation is held to Keystone's unified
limits. oslo.limit reads its own ``[oslo_limit]`` section (the Keystone
credentials and this service's endpoint) from the API's ``cfg.CONF``."""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'quota'
TITLE = 'Limits on what each project may request'

NOOP = 'noop'
UNIFIED_LIMITS = 'unified_limits'

opts = [
    cfg.StrOpt('driver',
               default=NOOP,
               choices=[(NOOP, 'No limits: every project may create as '
                               'many accelerator requests as it wants.'),
                        (UNIFIED_LIMITS,
                         'Keystone\'s unified limits of this service, read '
                         'through oslo.limit with the [oslo_limit] '
                         'credentials (a user with the reader role on the '
                         'system): accelerator_requests, class:<resource '
                         'class> and device_profile:<profile name>. A '
                         'resource with no registered limit is not '
                         'limited.')],
               help='How accelerator request creation is limited per '
                    'project.'),
    cfg.IntOpt('limits_cache_seconds',
               default=60,
               min=0,
               help='How long an API worker uses the limits it read from '
                    'Keystone before reading them again: a limit changed '
                    'in Keystone applies within this time. 0 reads them '
                    'for every accelerator request creation.'),
    cfg.FloatOpt('keystone_timeout',
                 default=10.0,
                 min=0.1,
                 help='Seconds each call to Keystone for limits may take, '
                      'unless [oslo_limit] timeout says otherwise. A '
                      'creation whose limits cannot be read is refused '
                      'with 503.'),
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
