"""What the service commands share: a start that fails says why.

The log goes to a file once one is configured, and the console would say
nothing of a start that failed; ``launch`` then prints the reason and the
log file's path on stderr, and returns the non-zero exit status.
"""

import os
import sys

from cyborg.cmd import console

# Top-level modules that only an extra of setup.cfg installs.
EXTRA_OF_MODULE = {'placement': 'all-in-one'}


def log_path(conf):
    """The file oslo.log writes to, as it chooses it; None when the log
    goes to the console (or to syslog or the journal)."""
    if conf.log_file:
        return (os.path.join(conf.log_dir, conf.log_file) if conf.log_dir
                else conf.log_file)
    if conf.log_dir:
        return os.path.join(conf.log_dir,
                            os.path.basename(sys.argv[0]) + '.log')
    return None


def describe_failure(error):
    """The error in one line; a missing module that an extra installs
    names that extra."""
    from cyborg import service  # the commands that launch it import it
    text = service.describe_error(error)
    if isinstance(error, ModuleNotFoundError):
        extra = EXTRA_OF_MODULE.get((error.name or '').partition('.')[0])
        if extra:
            text += ("; the %s extra installs it: pip install "
                     "'cyborg[%s]' (in a checkout: pip install -e "
                     "'.[%s]')" % (extra, extra, extra))
    return text


def tell_start_failed(name, error, conf):
    where = log_path(conf)
    console.say('%s: failed to start: %s; %s' % (
        name, describe_failure(error),
        'the log is %s' % where if where else 'the log above says more'),
        error=True)


def launch(svc, conf, reload_conf=True):
    """``service.launch`` in the foreground; a start that fails is told on
    the console. ``reload_conf``: SIGHUP reads the files of ``conf``
    again. Returns the exit status."""
    from cyborg import service
    status = service.launch(svc, conf if reload_conf else None)
    if status and svc.start_error is not None:
        tell_start_failed(svc.name, svc.start_error, conf)
    return status


def run_subcommand(add_commands, help_text, argv=None):
    """Parse ``argv`` (by default the command line) with the service's
    options and one subcommand, whose parsers ``add_commands`` adds, each
    with a ``run(conf)`` default; returns what ``run`` returns."""
    from oslo_config import cfg

    from cyborg import conf as cyborg_conf
    conf = cfg.ConfigOpts()
    conf.register_cli_opt(cfg.SubCommandOpt(
        'command', title='Commands', handler=add_commands, help=help_text))
    cyborg_conf.load(sys.argv[1:] if argv is None else argv, conf=conf)
    return conf.command.run(conf)
