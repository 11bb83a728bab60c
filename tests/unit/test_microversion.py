"""Parsing of the OpenStack-API-Version header."""

import pytest

from cyborg import exception
from cyborg.api import microversion


@pytest.mark.parametrize('header,expected', [
    (None, (2, 0)),
    ('accelerator 2.1', (2, 1)),
    ('ACCELERATOR 2.2', (2, 2)),
    ('2.3', (2, 3)),
    ('latest', microversion.MAX_VERSION),
    ('accelerator latest', microversion.MAX_VERSION),
    ('compute 2.90', (2, 0)),
    ('compute 2.90, accelerator 2.2', (2, 2)),
])
def test_requested_version(header, expected):
    assert microversion.requested(header) == expected


@pytest.mark.parametrize('header', [
    'accelerator 2.99', 'accelerator 1.0', 'accelerator 3.0', '2',
    'accelerator two', 'accelerator 2.01x', 'accelerator 2.-1',
])
def test_unsupported_or_unparsable_version_is_406(header):
    with pytest.raises(exception.NotAcceptable) as caught:
        microversion.requested(header)
    assert caught.value.status == 406


def test_versions_are_contiguous_from_2_0():
    numbers = [microversion._as_tuple(v) for v, _ in microversion.VERSIONS]
    assert numbers == [(2, minor) for minor in range(len(numbers))]
    assert all(why.endswith('.') for _, why in microversion.VERSIONS)


def test_response_headers_name_the_range_and_the_version():
    headers = dict(microversion.response_headers((2, 1)))
    assert headers == {
        'OpenStack-API-Minimum-Version': '2.0',
        'OpenStack-API-Maximum-Version': microversion.MAX_STRING,
        'OpenStack-API-Version': 'accelerator 2.1',
        'Vary': 'OpenStack-API-Version',
    }
