"""[fake_driver] options: how the fake FPGA of fake_driver behaves."""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'fake_driver'
TITLE = 'Fake driver options'

opts = [
    cfg.FloatOpt('program_seconds',
                 default=0,
                 min=0,
                 help='Seconds the fake FPGA of fake_driver takes to load a '
                      'bitstream. Only tests need more than 0: a slow '
                      'program lets them stop a conductor in the middle of '
                      'a bind.'),
    cfg.StrOpt('scrub',
               default='none',
               choices=[('none', 'Not scrubbed: the fake card holds no '
                                 'tenant data.'),
                        ('pass', 'Scrubbed, and verified clean.'),
                        ('fail', 'The verification fails.'),
                        ('hang', 'The scrub never ends (tests of the '
                                 'conductor\'s timeout).')],
               help='How the fake FPGA\'s handles are scrubbed between '
                    'tenants; tests choose.'),
    cfg.FloatOpt('scrub_seconds',
                 default=0,
                 min=0,
                 help='Seconds the fake FPGA\'s scrub takes.'),
    cfg.StrOpt('memory_dir',
               help='A directory that stands for the memory of the fake '
                    'FPGA\'s handles: one file per handle, named after its '
                    'PCI address, that a tenant may write into. A passing '
                    'scrub empties it and checks that it is empty; a '
                    'failing one leaves it as it is. Unset: the handles '
                    'hold nothing.'),
    cfg.IntOpt('scrub_fail_every',
               default=0,
               min=0,
               help='With scrub = pass, every Nth scrub of this agent fails '
                    'its verification (0: none); tests inject faults.'),
    cfg.IntOpt('scrub_hang_every',
               default=0,
               min=0,
               help='With scrub = pass, every Nth scrub of this agent takes '
                    'scrub_hang_seconds more (0: none); tests inject '
                    'scrubs that outlast the conductor\'s timeout.'),
    cfg.FloatOpt('scrub_hang_seconds',
                 default=0,
                 min=0,
                 help='Seconds a scrub named by scrub_hang_every hangs '
                      'before it goes on.'),
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
