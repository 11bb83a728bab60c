"""[conductor] options."""

from oslo_config import cfg

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


def _group():
    # A new OptGroup per configuration: oslo.config keeps the registered
    # options, overrides included, on the group object itself.
    return cfg.OptGroup(GROUP, title=TITLE)


def register_opts(conf):
    conf.register_group(_group())
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {_group(): opts}
