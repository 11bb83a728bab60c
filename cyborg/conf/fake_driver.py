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
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
