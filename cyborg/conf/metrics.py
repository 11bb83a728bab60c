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
                       default='127.0.0.1',
                       help='Address the metrics endpoints listen on, '
                            'IPv4 or IPv6 ("::" listens on IPv6, and on '
                            'IPv4 too where the kernel maps it, as Linux '
                            'does by default). The default, loopback, '
                            'serves a Prometheus (or a proxy) on the same '
                            'machine only: an address other machines reach '
                            'shows them instance and project ids, so set '
                            'one only on a network that Prometheus alone '
                            'can reach, and set bearer_token.'),
    cfg.IntOpt('max_connections',
               default=16,
               min=1,
               help='Connections each metrics endpoint serves at once, '
                    'one thread each; one past them is closed unanswered.'),
    cfg.FloatOpt('connection_timeout',
                 default=10.0,
                 min=0.1,
                 help='Seconds a metrics endpoint waits on an idle '
                      'connection (for the request to arrive, or for the '
                      'client to take the response) before closing it.'),
    cfg.StrOpt('bearer_token',
               secret=True,
               help='When set, the metrics endpoints answer only requests '
                    'with the header "Authorization: Bearer <this token>" '
                    '(Prometheus: the scrape config\'s authorization '
                    'credentials) and 401 to any other. Sent in clear '
                    'text: it keeps out other users of a trusted network, '
                    'not listeners on it.'),
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
