"""``/`` and ``/v2``: the version documents, public, for discovery."""

import pecan
from webob import exc as webob_exc

from cyborg.api import expose
from cyborg.api import microversion
from cyborg.api import views
from cyborg.api.controllers import resource
from cyborg.api.controllers.v2 import arqs
from cyborg.api.controllers.v2 import attributes
from cyborg.api.controllers.v2 import deployables
from cyborg.api.controllers.v2 import device_config_policies
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api.controllers.v2 import devices
from cyborg.api.controllers.v2 import limits
from cyborg.api.controllers.v2 import services


def _version(request, href):
    return {
        'id': 'v2',
        'status': 'CURRENT',
        'min_version': microversion.MIN_STRING,
        'max_version': microversion.MAX_STRING,
        'links': [{'href': href, 'rel': 'self'}],
    }


class V2Controller:

    device_profiles = device_profiles.DeviceProfilesController()
    devices = devices.DevicesController()
    deployables = deployables.DeployablesController()
    attributes = attributes.AttributesController()
    accelerator_requests = arqs.AcceleratorRequestsController()
    services = services.ServicesController()
    limits = limits.LimitsController()
    device_config_policies = (
        device_config_policies.DeviceConfigPoliciesController())

    @expose.json()
    def index(self):
        request = pecan.request
        document = _version(request, views.base_url(request) + '/v2/')
        document['id'] = 'v2.0'
        return document


class RootController:

    v2 = V2Controller()

    @pecan.expose()
    def _route(self, args, request):
        # Straight to a collection: pecan's own walk takes a dir() of
        # every controller on the path, on every request.
        if len(args) >= 2 and args[0] == 'v2':
            collection = getattr(self.v2, args[1], None)
            if isinstance(collection, resource.ResourceController):
                return collection._route(args[2:], request)
        if args in (['v2'], ['v2', '']):
            return self.v2.index, []
        raise webob_exc.HTTPNotFound()

    @expose.json()
    def index(self):
        request = pecan.request
        current = _version(request, views.base_url(request) + '/v2')
        return {
            'name': 'OpenStack Cyborg API',
            'description': 'Cyborg manages the accelerators of a cloud: '
                           'their discovery, their inventory in Placement '
                           'and their binding to instances.',
            'versions': [current],
            'default_version': current,
        }
