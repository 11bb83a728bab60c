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
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
