"""The console of a foreground command: why a start failed, where the log
is, and a console that went away ending the command without a traceback."""

import os
import signal
import threading

from oslo_config import cfg
from oslo_log import log
import pytest

from cyborg import cmd
from cyborg import service
from cyborg.cmd import console


@pytest.fixture(autouse=True)
def signal_handlers():
    """``launch`` takes SIGTERM, SIGINT and SIGHUP: give them back."""
    kept = {signum: signal.getsignal(signum)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def log_conf(**options):
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf([], project='cyborg', default_config_files=[])
    for name, value in options.items():
        conf.set_override(name, value)
    return conf


class Failing(service.Service):

    def __init__(self, error):
        super().__init__('cyborg-test')
        self.error = error
        self.stopped = False

    def on_start(self):
        self.on_stop(setattr, self, 'stopped', True)
        raise self.error


def test_a_failed_start_says_why_and_where_the_log_is(capsys, tmp_path):
    conf = log_conf(log_dir=str(tmp_path), log_file='cyborg-test.log')
    busy = Failing(OSError(98, 'Address already in use'))

    assert cmd.launch(busy, conf) == 1
    assert busy.stopped  # what had started is stopped again
    assert capsys.readouterr().err == (
        'cyborg-test: failed to start: OSError: [Errno 98] Address already '
        'in use; the log is %s\n' % (tmp_path / 'cyborg-test.log'))


def test_a_missing_extra_is_named(capsys):
    assert cmd.launch(Failing(ModuleNotFoundError(
        "No module named 'placement'", name='placement')), log_conf()) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "cyborg-test: failed to start: ModuleNotFoundError: No module named "
        "'placement'; the all-in-one extra installs it: pip install "), err
    # No log file: the log went to the console, above.
    assert err.endswith('; the log above says more\n'), err


class Talking(service.Service):
    """Writes a line to its console once started, as the single-machine
    mode prints its progress."""

    def __init__(self, stream):
        super().__init__('cyborg-test')
        self.stream = stream
        self.said = threading.Event()

    def on_start(self):
        self.stream.write('started\n')
        self.stream.flush()
        self.said.set()


def test_a_closed_console_ends_the_command_cleanly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` has finished
    stream = console.GuardedStream(os.fdopen(write_end, 'w'), 'stdout')
    talking = Talking(stream)
    try:
        # Stopped as by SIGTERM, exit 0, no BrokenPipeError.
        assert service.launch(talking) == 0
        assert talking.said.is_set() and talking.stopping
        assert stream.closed_by_reader
        # What is written later (the last flush at exit) goes nowhere.
        stream.write('stopped\n')
        stream.flush()
    finally:
        stream.close()


def test_other_write_errors_are_not_hidden():
    with open(os.devnull, 'rb') as readable:
        stream = console.GuardedStream(readable, 'stdout')
        with pytest.raises(OSError):
            stream.write(b'not writable')


@pytest.mark.parametrize('options, expected', [
    ({'log_file': '/var/log/cyborg/api.log'}, '/var/log/cyborg/api.log'),
    ({'log_file': 'api.log', 'log_dir': '/srv/log'}, '/srv/log/api.log'),
    ({}, None),
])
def test_log_path(options, expected):
    assert cmd.log_path(log_conf(**options)) == expected
