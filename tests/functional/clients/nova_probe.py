"""Asks Nova's cyborg client for device profile request groups.

Run as a separate process: Nova registers its options on the global
oslo.config object, and some of them (``host``) clash with the
service's own options registered there.

    python nova_probe.py <cases.json> <results.json>

Each case is ``{"name": ..., "endpoint_override": url | null,
"catalog_url": url | null}``; each result is either ``{"groups": [...]}``
or ``{"error": <exception class>, "message": ...}``.
"""

import json
import sys

from nova import context as nova_context
from nova import exception
from nova import objects
from nova.accelerator import cyborg
import nova.conf


def _group(request_group):
    return {
        'requester_id': request_group.requester_id,
        'resources': request_group.resources,
        'required_traits': sorted(request_group.required_traits),
        'forbidden_traits': sorted(request_group.forbidden_traits),
    }


def _ask(case):
    conf = nova.conf.CONF
    conf.set_override('endpoint_override', case.get('endpoint_override'),
                      group='cyborg')
    catalog = []
    if case.get('catalog_url'):
        # What keystonemiddleware hands Nova: the user's catalog.
        catalog = [{'type': 'accelerator', 'name': 'cyborg',
                    'endpoints': [{'publicURL': case['catalog_url'],
                                   'region': 'RegionOne'}]}]
    context = nova_context.RequestContext(
        user_id='nova-user', project_id='nova-project',
        auth_token='user-token', service_catalog=catalog, is_admin=False)
    try:
        groups = cyborg.get_device_profile_request_groups(context,
                                                          case['name'])
    except exception.DeviceProfileError as e:
        return {'error': type(e).__name__, 'message': str(e)}
    return {'groups': [_group(g) for g in groups]}


def main(cases_path, results_path):
    objects.register_all()
    # No configuration file: [cyborg] comes from the overrides in _ask.
    nova.conf.CONF([], project='nova')
    with open(cases_path) as f:
        cases = json.load(f)
    results = [_ask(case) for case in cases]
    with open(results_path, 'w') as f:
        json.dump(results, f)


if __name__ == '__main__':
    main(*sys.argv[1:])
