"""What the single-machine mode shows a newcomer: Nova's part, played
against its own API.

Makes the device profile ``demo-fpga`` (one FPGA with the fake trait) if
it is not there, creates its accelerator requests for a demo instance,
binds them to the fake device's resource provider as Nova's compute
service would, waits until they are resolved and prints them with their
attach handles. A second start first deletes the demo instance's
requests of the previous start, so the demo always binds afresh.
"""

import time
import uuid

import requests

PROFILE = 'demo-fpga'
GROUPS = [{'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]
# The same demo instance on every start of one host.
INSTANCE_NAMESPACE = uuid.UUID('5b0f3c2e-8d4a-4f7e-9c61-2a7d0e9b4c13')
RESOLVE_TIMEOUT = 30


class DemoFailed(Exception):
    pass


def _checked(response, *expected):
    if response.status_code not in expected:
        raise DemoFailed('%s %s answered %d: %s' % (
            response.request.method, response.request.url,
            response.status_code, response.text[:300]))
    return response


def demo_instance(hostname):
    return str(uuid.uuid5(INSTANCE_NAMESPACE, hostname))


def run(api_url, hostname, rp_uuid, timeout=10):
    """Bind the demo instance's ARQs; lines describing the result."""
    api = api_url.rstrip('/') + '/v2'
    session = requests.Session()
    arqs_url = api + '/accelerator_requests'
    instance = demo_instance(hostname)
    lines = []

    found = _checked(session.get(api + '/device_profiles',
                                 params={'name': PROFILE}, timeout=timeout),
                     200).json()['device_profiles']
    if found:
        lines.append('Device profile %s exists from an earlier start.'
                     % PROFILE)
    else:
        _checked(session.post(api + '/device_profiles', timeout=timeout,
                              json=[{'name': PROFILE, 'groups': GROUPS,
                                     'description': 'one FPGA with the '
                                                    'fake trait'}]), 201)
        lines.append('Device profile %s created: %s' % (PROFILE, GROUPS))

    _checked(session.delete(arqs_url, params={'instance': instance},
                            timeout=timeout), 204)
    created = _checked(session.post(
        arqs_url, json={'device_profile_name': PROFILE}, timeout=timeout),
        201).json()['arqs']
    lines.append('Accelerator requests created: %s'
                 % ', '.join(a['uuid'] for a in created))
    _checked(session.patch(arqs_url, timeout=timeout, json={
        arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': hostname},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
        for arq in created}), 202)
    lines.append('Bound to resource provider %s for instance %s; '
                 'resolved:' % (rp_uuid, instance))
    deadline = time.monotonic() + RESOLVE_TIMEOUT
    while True:
        answer = session.get(arqs_url, params={
            'instance': instance, 'bind_state': 'resolved'},
            timeout=timeout)
        if answer.status_code != 423:
            break
        if time.monotonic() > deadline:
            raise DemoFailed('The demo ARQs did not resolve within %d s.'
                             % RESOLVE_TIMEOUT)
        time.sleep(0.1)
    for arq in _checked(answer, 200).json()['arqs']:
        info = arq['attach_handle_info']
        lines.append('  %s %s: %s handle %s at %s' % (
            arq['uuid'], arq['state'], arq['attach_handle_type'] or '-',
            arq['attach_handle_uuid'] or '-',
            ('%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                              info['function'])) if info else '-'))
    return lines
