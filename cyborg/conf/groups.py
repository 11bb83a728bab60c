"""Registering an option group on a configuration object.

oslo.config keeps registered options, overrides included, on the
OptGroup object itself: a group shared between ConfigOpts would carry
one's overrides into the next. So each registration makes a new one.
"""

from oslo_config import cfg


def register(conf, name, title, opts):
    conf.register_group(cfg.OptGroup(name, title=title))
    conf.register_opts(opts, group=name)


def listing(name, title, opts):
    """What ``list_opts`` gives the sample generator for one group."""
    return {cfg.OptGroup(name, title=title): opts}
