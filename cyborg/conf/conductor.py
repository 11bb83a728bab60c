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
    cfg.StrOpt('mig_placement_rule',
               default='best-fit',
               choices=[('best-fit', 'The start that keeps the largest '
                         'profile creatable, then the most placements, '
                         'then the lowest slot.'),
                        ('lowest-slot', 'The lowest free start slot.')],
               help='Where the agent creates a MIG instance made on demand, '
                    'among the start slots its profile may take on the '
                    'GPU.'),
    cfg.BoolOpt('mig_move_on_refusal',
                default=True,
                help='When the GPU Placement chose for a MIG instance made '
                     'on demand cannot place it (its free slices lie at no '
                     'start the profile may take), move the request to '
                     'another GPU of the same host that can: the '
                     'instance\'s allocation of those slices moves in '
                     'Placement (which checks the room), then the bind. '
                     'Off: such a bind fails, and Nova puts the instance '
                     'in ERROR.'),
    cfg.StrOpt('mig_gpu_choice',
               default='fullest-when-alone',
               choices=[('scheduler', 'The GPU whose provider Nova\'s '
                         'claim names (another one only when it cannot '
                         'place the profile: mig_move_on_refusal).'),
                        ('fullest', 'The GPU of the host whose traits offer '
                         'the fewest profiles among those that offer the '
                         'one asked, where it is fuller than the GPU Nova '
                         'chose and Placement gives it the room.'),
                        ('fullest-when-alone', 'As ``fullest`` while no '
                         'other MIG bind of the host is under way; the GPU '
                         'Nova claimed while one is: binds packed on one GPU '
                         'wait for each other, as a card makes its '
                         'instances one at a time.')],
               help='Which GPU of the host a MIG instance made on demand is '
                    'made on. Placement counts slices and weighs nothing: '
                    'the GPU Nova claims may be an empty one while a busy '
                    'one could take the instance, and small instances '
                    'spread over the GPUs leave none empty for a 7g.80gb. '
                    '``fullest`` and ``fullest-when-alone`` pack them, '
                    'moving the '
                    'instance\'s allocation of those slices in Placement '
                    'as mig_move_on_refusal does (one more Placement read '
                    'and write for each bind moved). The instance stays on '
                    'the host Nova chose.'),
    cfg.IntOpt('bind_timeout',
               default=330,
               min=5,
               help='Seconds one accelerator request may take to bind once '
                    'a conductor has started on it: its own deadline, set '
                    'when the conductor claims it and renewed as its bind '
                    'really starts, so that requests bound one after '
                    'another each get the whole time. A bind past its '
                    'deadline is failed by any live conductor, which frees '
                    'its attach handle and tells Nova. Must be longer than '
                    'the agent calls one bind may make: agent_program_timeout '
                    'plus agent_timeout (checked when the conductor '
                    'starts). A bind whose conductor died is taken over by '
                    'the next conductor on the hash ring as soon as the '
                    'dead one misses [DEFAULT] service_down_time, without '
                    'waiting for this.'),
    cfg.IntOpt('agent_timeout',
               default=60,
               min=1,
               help='Seconds the conductor waits for an agent to prepare '
                    'or release an attach handle (create or remove a '
                    'mediated device).'),
    cfg.IntOpt('agent_program_timeout',
               default=240,
               min=1,
               help='Seconds the conductor waits for an agent to program '
                    'an FPGA: download the bitstream from Glance and run the '
                    "vendor's tool. Must be longer than the agent's [agent] "
                    'program_tool_timeout (checked when the agent starts).'),
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
               help='Seconds between two runs of each recovery worker of '
                    'a conductor. The workers run apart, so that one slow '
                    'item does not hold up the others: taking over the '
                    'binds of dead conductors and resuming its own, failing '
                    'binds past their deadline, finishing deletions left '
                    'half done, and sending Nova the events it has not '
                    'acknowledged yet.'),
    cfg.IntOpt('recovery_max_backoff',
               default=300,
               min=1,
               help='Seconds at most between two attempts at one recovery '
                    'item that keeps failing (a deletion on a host whose '
                    'agent does not answer, an event Nova cannot take): '
                    'each failure doubles its wait, from recovery_interval '
                    'up to this.'),
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
    cfg.IntOpt('quarantine_hold_down',
               default=300,
               min=0,
               help='Seconds a quarantined device must stay healthy before '
                    'its quarantine is released. A device is quarantined '
                    'when its agent observes it turn unhealthy (its whole '
                    'inventory reserved in Placement, so nothing new is '
                    'scheduled on it; existing accelerator requests keep '
                    'it). Each conductor checks the hosts it owns every '
                    'sync_retry_interval seconds, or every hold-down if '
                    'shorter, and releases the devices that have been '
                    'healthy that long. An operator override of the device '
                    '(ignore or quarantine) wins over both.'),
    cfg.IntOpt('config_interval',
               default=10,
               min=1,
               help='Seconds between two passes of the device '
                    'configuration rollout over the hosts this conductor '
                    'owns: a pending device is drained (its inventory '
                    'reserved in Placement), applied by its agent once no '
                    'attach handle of it is in use, and released.'),
    cfg.IntOpt('config_drain_hosts',
               default=1,
               min=1,
               help='How many hosts of one device configuration policy may '
                    'be draining or applying at once; the others wait, '
                    'pending.'),
    cfg.IntOpt('agent_config_timeout',
               default=1860,
               min=10,
               help='Seconds the conductor waits for an agent to apply a '
                    'device configuration (its teardown and setup '
                    'playbooks, each within the agent\'s [device_config] '
                    'playbook_timeout, and a new discovery). On a timeout '
                    'the device stays applying and the next pass asks '
                    'again: an applied setting is a no-op the second '
                    'time.'),
]



def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
