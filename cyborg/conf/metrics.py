"""[metrics] options: the Prometheus endpoints of the agent and conductor."""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'metrics'
TITLE = 'Prometheus metrics endpoints'

opts = [
    cfg.BoolOpt('enabled',
                default=False,
                help='Serve Prometheus metrics over HTTP from each agent '
                     '(GPU series named as NVIDIA dcgm-exporter names them, '
                     'device health) and each conductor (reports, binds, '
                     'recovery, Placement calls). Off by default: the '
                     'endpoint has no authentication and its labels name '
                     'instances and projects, so open it only where '
                     'Prometheus alone can reach it.'),
    cfg.HostAddressOpt('listen_address',
                       default='0.0.0.0',
                       help='Address the metrics endpoints listen on, '
                            'IPv4 or IPv6 ("::" listens on IPv6, and on '
                            'IPv4 too where the kernel maps it, as Linux '
                            'does by default).'),
    cfg.PortOpt('agent_port',
                default=9469,
                help='Port of the agent\'s metrics endpoint (GET '
                     '/metrics). 0 takes any free port, which the agent '
                     'logs.'),
    cfg.PortOpt('conductor_port',
                default=9468,
                help='Port of the conductor\'s metrics endpoint (GET '
                     '/metrics). 0 takes any free port, which the '
                     'conductor logs. A conductor and an agent on one '
                     'machine need different ports.'),
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
