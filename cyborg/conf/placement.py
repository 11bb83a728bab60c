"""[placement] options: how to reach and authenticate to Placement."""

from cyborg.conf import service_client

GROUP = 'placement'

_GROUP = service_client.ServiceClientGroup(
    GROUP, 'Placement service client',
    'Where the Placement API is and the credentials used to call it. The '
    'conductor reports each deployable there as a resource provider under '
    'its compute node.',
    service_type='placement')

register_opts = _GROUP.register_opts
list_opts = _GROUP.list_opts
