"""[agent] options: what the agent discovers and how often it reports."""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'agent'
TITLE = 'Agent options'

# The longest run of a vendor's programming tool that the agent may ask
# its privileged helper for.
PROGRAM_TOOL_MAX_SECONDS = 3600

opts = [
    cfg.ListOpt('enabled_drivers',
                default=[],
                help='Accelerator drivers the agent runs (entry points of '
                     'the cyborg.accelerator.driver namespace), for example '
                     'fake_driver, pci_driver, nvidia_gpu_driver.'),
    cfg.IntOpt('report_interval',
               default=60,
               min=1,
               help='Seconds between two discoveries of the host. Each '
                    'discovery reports the whole host to the conductor; a '
                    'report that changes nothing writes nothing.'),
    cfg.IntOpt('heartbeat_interval',
               default=5,
               min=1,
               help='Seconds between two heartbeats of the agent. Each one '
                    'observes the health and usage of the devices of the '
                    'last discovery (a few sysfs files and vendor library '
                    'calls per device, no rediscovery) and casts them to '
                    "the conductor that owns this host, which records the "
                    'agent alive, stores the usage on its services row and '
                    'writes a device\'s health only when it changed. Must '
                    'be below [DEFAULT] service_down_time (checked when the '
                    'agent starts), or the agent would count as dead '
                    'between two heartbeats.'),
    cfg.IntOpt('report_timeout',
               default=60,
               min=1,
               help='Seconds the agent waits for the conductor to answer '
                    'a report before trying again at the next interval.'),
    cfg.IntOpt('retry_interval',
               default=5,
               min=1,
               help='Seconds between two attempts to reach a neighbour '
                    '(RabbitMQ, Placement) that is down when the agent '
                    'starts.'),
    cfg.IntOpt('program_tool_timeout',
               default=180,
               min=1,
               max=PROGRAM_TOOL_MAX_SECONDS,
               help="Seconds the vendor's FPGA programming tool (fpgaconf, "
                    'xbmgmt, ...) may run before the agent kills it and '
                    'reports the program failed. Must be shorter than '
                    '[conductor] agent_program_timeout, the time the '
                    'conductor waits for the whole program call (checked '
                    'when the agent starts): otherwise the card would '
                    'still be being programmed after its bind failed.'),
    cfg.FloatOpt('test_prepare_answer_delay',
                 default=0,
                 min=0,
                 help='For tests only; leave at 0 in production. Seconds '
                      'the agent waits, after it has prepared an attach '
                      'handle (created the mdev of a vGPU), before it '
                      'answers the conductor, once per accelerator request: '
                      'a test stops the conductor in that window, between '
                      'the device being made and the bind being recorded.'),
]



def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
