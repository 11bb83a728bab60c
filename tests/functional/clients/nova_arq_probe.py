"""Nova's cyborg client module taking an instance through its ARQs.

Run as a separate process: Nova registers its options on the global
oslo.config object, and some of them (``host``) clash with the
service's own options registered there.

    python nova_arq_probe.py

The test drives it one step at a time: one JSON request a line on
stdin, one JSON answer a line on stdout (anything Nova prints goes to
stderr). A request is ``{"op": <step>, ...arguments}``; an answer is the
step's result, ``{"error": <Nova exception class>, "message": ...}`` when
Nova's client raised, or ``{"crash": <traceback>}`` for anything else.
The first line written is ``{"ready": true}``, once Nova is imported (a
few seconds, which the test spends meanwhile on its own setup).

``connect`` (endpoint) comes first: Nova's ``[cyborg] endpoint_override``.
Each further step does what Nova's own code does at that point of a boot:

- ``groups`` (dp_name): the request groups of the flavor's device
  profile, as the API builds the request spec; with each group's
  Placement query parameters, as the scheduler sends them;
- ``map`` (dp_name, allocations, provider_traits): the request group to
  resource provider mapping from the instance's allocation
  (``RequestSpec.map_requested_resources_to_providers``);
- ``create`` (dp_name, rg_rp_map): the conductor's ARQ creation, each
  ARQ matched to a provider; ``bind`` (bindings): its bind call;
- ``arqs`` (instance_uuid, only_resolved): what the compute manager
  reads once the bind events arrived;
- ``delete`` (instance_uuid): deleting the instance.
"""

import json
import os
import sys
import traceback

from nova import context as nova_context
from nova import exception
from nova import objects
from nova.accelerator import cyborg
import nova.conf


def _context():
    # The user's request context, as Nova's conductor and compute manager
    # use it; the service's noauth takes any token.
    return nova_context.RequestContext(
        user_id='nova-user', project_id='nova-project',
        auth_token='user-token', is_admin=False)


class Steps:

    def __init__(self):
        # The RequestGroup objects of each profile, as the request spec
        # keeps them between scheduling and binding.
        self._groups = {}

    def connect(self, endpoint):
        nova.conf.CONF.set_override('endpoint_override', endpoint,
                                    group='cyborg')
        return {'endpoint': endpoint}

    def _client(self):
        return cyborg.get_client(_context())

    def groups(self, dp_name):
        groups = cyborg.get_device_profile_request_groups(_context(),
                                                          dp_name)
        self._groups[dp_name] = groups
        return {'groups': [{
            'requester_id': g.requester_id,
            'resources': g.resources,
            'required_traits': sorted(g.required_traits),
            'forbidden_traits': sorted(g.forbidden_traits),
            'queryparams': g.to_queryparams(),
        } for g in groups]}

    def map(self, dp_name, allocations, provider_traits):
        spec = objects.RequestSpec(requested_resources=self._groups[dp_name])
        spec.map_requested_resources_to_providers(allocations,
                                                  provider_traits)
        return {'rg_rp_map': spec.get_request_group_mapping()}

    def create(self, dp_name, rg_rp_map):
        arqs = self._client().create_arqs_and_match_resource_providers(
            dp_name, rg_rp_map)
        return {'arqs': arqs}

    def bind(self, bindings):
        self._client().bind_arqs(bindings)
        return {'bound': sorted(bindings)}

    def arqs(self, instance_uuid, only_resolved):
        return {'arqs': self._client().get_arqs_for_instance(
            instance_uuid, only_resolved=only_resolved)}

    def delete(self, instance_uuid):
        self._client().delete_arqs_for_instance(instance_uuid)
        return {'deleted': instance_uuid}


def _answer(steps, request):
    op = request.pop('op')
    try:
        return getattr(steps, op)(**request)
    except exception.NovaException as e:
        return {'error': type(e).__name__, 'message': str(e)}
    except Exception:
        return {'crash': traceback.format_exc()}


def main():
    # Answers go to the original stdout; whatever else writes to it
    # (logging, warnings) goes to stderr instead.
    answers = os.fdopen(os.dup(1), 'w', buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    objects.register_all()
    # No configuration file: [cyborg] is the override of connect.
    nova.conf.CONF([], project='nova')
    steps = Steps()
    answers.write(json.dumps({'ready': True}) + '\n')
    for line in sys.stdin:
        if line.strip():
            answers.write(json.dumps(_answer(steps, json.loads(line)))
                          + '\n')


if __name__ == '__main__':
    main()
