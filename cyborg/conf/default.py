"""[DEFAULT] options shared by every service."""

import socket

from oslo_config import cfg

opts = [
    cfg.StrOpt('host',
               default=socket.gethostname(),
               sample_default='<hostname>',
               help='Name of this host as the other services and Placement '
                    'know it.'),
    cfg.StrOpt('auth_strategy',
               default='keystone',
               choices=[('keystone', 'Validate tokens with keystonemiddleware '
                                     'auth_token.'),
                        ('noauth', 'No authentication: the request headers '
                                   'say who the caller is. For tests and the '
                                   'single-machine mode only.')],
               help='How API requests are authenticated.'),
    cfg.IntOpt('heartbeat_interval',
               default=10,
               min=1,
               help='Seconds between two heartbeats of a conductor: each '
                    'one records in the database that it is alive and reads '
                    'the live conductors again. Agents heartbeat every '
                    '[agent] heartbeat_interval seconds.'),
    cfg.IntOpt('service_down_time',
               default=30,
               min=2,
               help='Seconds without a heartbeat after which a conductor '
                    'or agent counts as dead: the hash ring gives a dead '
                    "conductor's hosts to the live ones, which finish or "
                    'fail its binds. Must be above heartbeat_interval and '
                    '[agent] heartbeat_interval.'),
    cfg.StrOpt('state_path',
               default='/var/lib/cyborg',
               help='Top-level directory for the state of the service.'),
]


def register_opts(conf):
    conf.register_opts(opts)


def list_opts():
    return {'DEFAULT': opts}
