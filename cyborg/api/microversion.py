"""API microversions: one list, oldest first, one line each.

A request asks for one with ``OpenStack-API-Version: accelerator 2.N``
(a bare ``2.N`` and ``latest`` work too); no header means the minimum.
"""

import re

from cyborg import exception

SERVICE_TYPE = 'accelerator'
HEADER = 'OpenStack-API-Version'
MIN_HEADER = 'OpenStack-API-Minimum-Version'
MAX_HEADER = 'OpenStack-API-Maximum-Version'

VERSIONS = [
    ('2.0', 'The base API.'),
    ('2.1', 'An ARQ bind may set /project_id (admins only).'),
    ('2.2', 'GET /v2/device_profiles/{name} finds a profile by name.'),
    ('2.3', 'Devices show their status: enabled or maintaining.'),
    ('2.4', 'GET /v2/services lists conductors and agents (admins).'),
    ('2.5', 'Devices and deployables show health, quarantine and usage; '
            'devices filter by health; admins override the quarantine.'),
    ('2.6', 'Admins manage device configuration policies '
            '(/v2/device_config_policies) and read the configuration '
            'status of the devices each selects.'),
    ('2.7', 'Admins update device profiles (each change a kept revision, '
            'by which ARQs bind), enable and disable them and make them '
            'private to listed projects; profiles show revision, enabled '
            'and is_public, ARQs their profile revision.'),
    ('2.8', 'GET /v2/limits shows a project its limits on accelerator '
            'requests and its usage of each.'),
    ('2.9', 'Deployables show their scrub_method and their attach '
            'handles, each with its state (free, in_use, dirty, '
            'scrubbing) and last scrub.'),
]

_NUMBER = re.compile(r'^([1-9]\d*|0)\.([1-9]\d*|0)$')


def _as_tuple(text):
    major, minor = text.split('.')
    return int(major), int(minor)


MIN_VERSION = _as_tuple(VERSIONS[0][0])
MAX_VERSION = _as_tuple(VERSIONS[-1][0])
MIN_STRING = VERSIONS[0][0]
MAX_STRING = VERSIONS[-1][0]


def to_string(version):
    return '%d.%d' % version


def requested(header_value):
    """The (major, minor) a request asks for, given its header value.

    Raises NotAcceptable for an unparsable or unsupported version.
    """
    if header_value is None:
        return MIN_VERSION
    wanted = None
    for part in header_value.split(','):
        words = part.split()
        if len(words) == 2 and words[0].lower() == SERVICE_TYPE:
            wanted = words[1]
        elif len(words) == 1 and wanted is None:
            wanted = words[0]
    if wanted is None:
        # The header names only other services' versions.
        return MIN_VERSION
    if wanted.lower() == 'latest':
        return MAX_VERSION
    match = _NUMBER.match(wanted)
    if not match:
        raise exception.NotAcceptable(
            'The microversion %r is not of the form 2.N or "latest".'
            % wanted, code='cyborg.microversion_invalid')
    version = int(match.group(1)), int(match.group(2))
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise exception.NotAcceptable(
            'Microversion %s is not supported: this service speaks %s to %s.'
            % (wanted, MIN_STRING, MAX_STRING))
    return version


def response_headers(version):
    """Headers that every /v2 response carries."""
    return [
        (MIN_HEADER, MIN_STRING),
        (MAX_HEADER, MAX_STRING),
        (HEADER, '%s %s' % (SERVICE_TYPE, to_string(version))),
        ('Vary', HEADER),
    ]
