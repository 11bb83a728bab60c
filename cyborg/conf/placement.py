"""[placement] options: how to reach and authenticate to Placement.

keystoneauth's own session, auth plugin and adapter options, so that a
devstack-style section (``auth_type = password``, ``auth_url``,
``username``, ..., ``region_name``, ``valid_interfaces``) works as it
does for Nova.
"""

import copy

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

GROUP = 'placement'


def _group():
    # A new OptGroup per ConfigOpts: oslo.config keeps overrides on it.
    return cfg.OptGroup(
        GROUP, title='Placement service client',
        help='Where the Placement API is and the credentials used to call '
             'it. The conductor reports each deployable there as a '
             'resource provider under its compute node.')


_ADAPTER_DEFAULTS = {'service_type': 'placement',
                     'valid_interfaces': ['internal', 'public']}


def _adapter_opts():
    opts = ks_loading.get_adapter_conf_options(include_deprecated=False)
    cfg.set_defaults(opts, **_ADAPTER_DEFAULTS)
    return opts


def register_opts(conf):
    conf.register_group(_group())
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    conf.register_opts(_adapter_opts(), group=GROUP)


def list_opts():
    # The password plugin's options are the ones a sample should show;
    # keystoneauth registers the chosen plugin's options when it loads.
    opts = (ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options('password')
            + _adapter_opts())
    return {_group(): copy.deepcopy(opts)}
