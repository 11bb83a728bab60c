"""[conductor] options."""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'conductor'
TITLE = 'Conductor options'

opts = [
    cfg.IntOpt('retry_interval',
               default=5,
               min=1,
               help='Seconds between two attempts to reach a neighbour '
                    '(the database, RabbitMQ, Placement) that is down when '
                    'the conductor starts.'),
    cfg.IntOpt('bind_timeout',
               default=300,
               min=5,
               help='Seconds an accelerator request may stay BindStarted. '
                    'A bind that takes longer (its conductor died, or the '
                    'request to bind never reached a conductor) is failed '
                    'by any live conductor, which frees its attach handle '
                    'and tells Nova. Keep it above agent_timeout.'),
    cfg.IntOpt('agent_timeout',
               default=240,
               min=1,
               help='Seconds the conductor waits for an agent to prepare '
                    'or release a device: to create or remove a mediated '
                    'device, or to program an FPGA, which can be slow.'),
    cfg.IntOpt('nova_event_retry_after',
               default=60,
               min=1,
               help='Seconds after which an accelerator-request-bound event '
                    'that Nova has not acknowledged is sent again by a '
                    'recovery pass (its conductor died before sending it, '
                    'or Nova was unreachable).'),
    cfg.IntOpt('recovery_interval',
               default=30,
               min=1,
               help='Seconds between two recovery passes of a conductor: '
                    'failing binds older than bind_timeout, finishing '
                    'deletions left half done, and sending Nova the events '
                    'it has not acknowledged yet.'),
    cfg.IntOpt('sync_retry_interval',
               default=30,
               min=1,
               help='Seconds between two passes that sync to Placement the '
                    'hosts whose resource providers are behind the database '
                    '(a change made while Placement was unreachable, such '
                    'as a device disabled then). Each conductor syncs the '
                    'hosts it owns.'),
    cfg.IntOpt('reconcile_interval',
               default=300,
               min=1,
               help='Seconds between two reconciliation passes: each '
                    'conductor compares the resource providers of the hosts '
                    'it owns in Placement (providers, inventories, reserved, '
                    'traits) with the database and repairs any difference, '
                    'for example a provider deleted in Placement by hand. '
                    'Every repair is logged as a warning.'),
]



def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
