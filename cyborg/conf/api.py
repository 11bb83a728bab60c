"""[api] options: where the REST API listens and how it answers."""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'api'
TITLE = 'REST API options'

opts = [
    cfg.HostAddressOpt('host_ip',
                       default='127.0.0.1',
                       help='Address the API server listens on.'),
    cfg.PortOpt('port',
                default=6666,
                help='Port the API server listens on.'),
    cfg.IntOpt('threads',
               default=16,
               min=1,
               help='Worker threads of the built-in API server.'),
    cfg.URIOpt('public_endpoint',
               help='Base URL that clients use to reach the API, for example '
                    'https://cloud.example.com/accelerator. When unset, links '
                    'are built from the URL of each request.'),
    cfg.FloatOpt('conductor_timeout',
                 default=10.0,
                 min=0.5,
                 help='Seconds an API request that waits for a conductor '
                      'may take in all, counted from its arrival: an '
                      'enable or disable for Placement to be updated (the '
                      'device status is stored first; past this bound the '
                      'request answers 503, saying that Placement will be '
                      'updated when it can be), an unbind of a vGPU for its '
                      'mediated device to be removed (503 past it), a '
                      'delete for its devices to be released (204 past it; '
                      'the recovery finishes). The API worker is free again '
                      'after it whatever the conductors do.'),
    cfg.IntOpt('max_limit',
               default=1000,
               min=1,
               help='Largest number of items a collection returns in one '
                    'response.'),
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
