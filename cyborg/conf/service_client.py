"""Option groups for calling another OpenStack service with keystoneauth.

Each such group ([placement], [nova], [glance]) holds keystoneauth's own
session, auth plugin and adapter options, so that a devstack-style
section (``auth_type = password``, ``auth_url``, ``username``, ...,
``region_name``, ``valid_interfaces``) works as it does for Nova. A group
may add options of its own, and a default for keystoneauth's
``timeout`` (seconds a request may wait for an answer), so that no call
to the service waits forever.
"""

import copy

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg


class ServiceClientGroup:
    """One keystoneauth option group, plus ``extra_opts``."""

    def __init__(self, name, title, help, service_type, extra_opts=(),
                 default_timeout=None):
        self.name = name
        self.default_timeout = default_timeout
        self.title = title
        self.help = help
        self.service_type = service_type
        self.extra_opts = list(extra_opts)

    def _group(self):
        # A new OptGroup per ConfigOpts: oslo.config keeps overrides on it.
        return cfg.OptGroup(self.name, title=self.title, help=self.help)

    def _adapter_opts(self):
        opts = ks_loading.get_adapter_conf_options(include_deprecated=False)
        cfg.set_defaults(opts, service_type=self.service_type,
                         valid_interfaces=['internal', 'public'])
        return opts

    def _session_opts(self):
        opts = ks_loading.get_session_conf_options()
        if self.default_timeout is not None:
            cfg.set_defaults(opts, timeout=self.default_timeout)
        return opts

    def register_opts(self, conf):
        conf.register_group(self._group())
        conf.register_opts(self._session_opts(), group=self.name)
        ks_loading.register_auth_conf_options(conf, self.name)
        conf.register_opts(self._adapter_opts() + self.extra_opts,
                           group=self.name)

    def list_opts(self):
        # The password plugin's options are the ones a sample should show;
        # keystoneauth registers the chosen plugin's options when it loads.
        opts = (self._session_opts()
                + ks_loading.get_auth_common_conf_options()
                + ks_loading.get_auth_plugin_conf_options('password')
                + self._adapter_opts() + self.extra_opts)
        return {self._group(): copy.deepcopy(opts)}
