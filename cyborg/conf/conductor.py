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
]



def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
