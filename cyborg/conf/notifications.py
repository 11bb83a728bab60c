"""[notifications] options: where versioned notifications go.

Whether they are sent at all is oslo.messaging's
``[oslo_messaging_notifications] driver`` (unset: none are); this group
names the topics, as Nova's does.
"""

from oslo_config import cfg

from cyborg.conf import groups

GROUP = 'notifications'
TITLE = 'Versioned notifications'

opts = [
    cfg.ListOpt('versioned_notifications_topics',
                default=['versioned_notifications'],
                help='The topics that versioned notifications are sent to '
                     'when [oslo_messaging_notifications] driver is set; '
                     'Nova sends its own to the same topic by default.'),
]


def register_opts(conf):
    groups.register(conf, GROUP, TITLE, opts)


def list_opts():
    return groups.listing(GROUP, TITLE, opts)
