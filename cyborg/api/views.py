"""Shared pieces of response bodies: links and timestamps."""

import datetime


def base_url(request):
    """Where clients reach the service: configured, or as this request came."""
    configured = request.app_state.conf.api.public_endpoint
    return (configured or request.application_url).rstrip('/')


def self_link(base_url, collection, uuid):
    return [{'href': '%s/v2/%s/%s' % (base_url, collection, uuid),
             'rel': 'self'}]


def timestamp(value):
    """ISO 8601 in UTC, or None (JSON null) when unset."""
    if value is None:
        return None
    if value.tzinfo is None:
        # What the database gives (naive UTC): the same text, cheaper.
        return value.isoformat() + '+00:00'
    return value.replace(tzinfo=datetime.timezone.utc).isoformat()
