"""The Nova client against a stand-in of Nova's external-events endpoint.

The stand-in (tests/nova_events.py) validates every body with Nova's own
schema and answers as Nova's controller does; the client reaches it over
TCP, built from ``[nova]`` options as the conductor builds it.
"""

import threading
import time
import uuid

import pytest
import requests

from cyborg import conf as cyborg_conf
from cyborg.clients import nova as nova_client
from tests import nova_events as stand_in
from tests.nova_events import nova_events  # noqa: F401

# Retries in these tests wait milliseconds, not seconds.
INTERVAL = 0.01
COMPUTE_2_82 = {'OpenStack-API-Version': 'compute 2.82'}


@pytest.fixture
def nova(nova_events):  # noqa: F811
    """The stand-in compute API (a shorter name for the tests below)."""
    return nova_events


def load_conf(tmp_path, text=''):
    """The service's configuration from a file holding ``text``."""
    path = tmp_path / 'cyborg.conf'
    path.write_text(text)
    return cyborg_conf.load(default_config_files=[str(path)])


def nova_section(nova, retries=2, interval=INTERVAL, **extra):
    lines = ['[nova]', 'endpoint_override = %s' % nova.url,
             'event_retries = %d' % retries,
             'event_retry_interval = %s' % interval]
    extra.setdefault('auth_type', 'none')
    lines += ['%s = %s' % item for item in extra.items()]
    return '\n'.join(lines) + '\n'


@pytest.fixture
def make_client(nova, tmp_path):
    def make(**options):
        conf = load_conf(tmp_path, nova_section(nova, **options))
        return nova_client.NovaClient.from_conf(conf)
    return make


@pytest.fixture
def client(make_client):
    return make_client()


def new_uuid():
    return str(uuid.uuid4())


def bound(instance_uuid, ok=True):
    return nova_client.BoundEvent(instance_uuid, new_uuid(), ok)


def test_one_post_per_instance_with_one_event_per_arq(nova, client):
    first, second, third = new_uuid(), new_uuid(), new_uuid()
    events = [bound(first), bound(second, ok=False), bound(first),
              bound(third), bound(third, ok=False)]

    deliveries = client.notify_bound(events)

    assert list(deliveries) == [first, second, third]
    for instance_uuid, delivery in deliveries.items():
        assert delivery.instance_uuid == instance_uuid
        assert delivery.delivered and delivery.status == 200
        assert delivery.attempts == 1
    assert deliveries[first].event_codes == {
        events[0].arq_uuid: 200, events[2].arq_uuid: 200}

    calls = nova.calls
    assert client.posts == len(calls) == 3
    assert not nova.invalid
    sent = [call.json()['events'] for call in calls]
    assert [[e['server_uuid'] for e in call] for call in sent] == [
        [first, first], [second], [third, third]]
    assert sent[0] == [
        {'name': 'accelerator-request-bound', 'server_uuid': first,
         'tag': events[0].arq_uuid, 'status': 'completed'},
        {'name': 'accelerator-request-bound', 'server_uuid': first,
         'tag': events[2].arq_uuid, 'status': 'completed'}]
    received = {(e.server_uuid, e.tag): e.status for e in nova.events}
    assert received == {
        (e.instance_uuid, e.arq_uuid): 'completed' if e.ok else 'failed'
        for e in events}
    for call in calls:
        assert call.path == stand_in.URL_PREFIX + stand_in.EVENTS_PATH
        assert call.microversion == '2.82'
        assert call.headers['OpenStack-API-Version'] == 'compute 2.82'
        assert call.headers['X-OpenStack-Nova-API-Version'] == '2.82'

    assert client.notify_bound([]) == {}
    assert client.posts == 3


def test_sent_body_is_valid_only_from_microversion_2_82(nova, client):
    instance_uuid = new_uuid()
    client.notify_bound([bound(instance_uuid), bound(instance_uuid, False)])
    body = nova.calls[0].json()

    request_schema, _ = stand_in.nova_schemas('2.82')
    stand_in.validate(request_schema, body)
    # Nova's schema below 2.82 does not know the event: the microversion
    # we send is not a formality.
    older_schema, _ = stand_in.nova_schemas('2.81')
    with pytest.raises(ValueError, match='accelerator-request-bound'):
        stand_in.validate(older_schema, body)


@pytest.mark.parametrize('event, headers, status', [
    ({'status': 'done'}, COMPUTE_2_82, 400),
    ({'server_uuid': 'instance-1'}, COMPUTE_2_82, 400),
    ({'tag': 'x' * 256}, COMPUTE_2_82, 400),
    ({'extra': 'field'}, COMPUTE_2_82, 400),
    ({}, {'OpenStack-API-Version': 'compute 2.81'}, 400),
    ({}, {}, 400),
    ({}, {'OpenStack-API-Version': 'compute 2.999'}, 406),
], ids=['status', 'server_uuid', 'tag', 'extra', 'v2.81', 'no version',
        'v2.999'])
def test_stand_in_rejects_what_nova_rejects(nova, event, headers, status):
    body = {'events': [dict({'name': 'accelerator-request-bound',
                             'server_uuid': new_uuid(), 'tag': new_uuid(),
                             'status': 'completed'}, **event)]}

    answer = requests.post(nova.url + stand_in.EVENTS_PATH, json=body,
                           headers=headers, timeout=5)

    assert answer.status_code == status
    assert nova.invalid and nova.invalid[0].status == status
    assert nova.events == []


def test_bad_request_is_reported_and_not_retried(nova, client):
    good = new_uuid()
    events = [nova_client.BoundEvent('not-a-uuid', new_uuid(), True),
              bound(good)]

    deliveries = client.notify_bound(events)

    refused = deliveries['not-a-uuid']
    assert not refused.delivered and not refused.transient
    assert refused.status == 400 and refused.attempts == 1
    assert 'server_uuid' in refused.reason
    assert deliveries[good].delivered
    assert [c.status for c in nova.calls] == [400, 200]


@pytest.mark.parametrize('code', [422, 404])
def test_event_dropped_by_nova_counts_as_delivered(nova, client, code):
    # 422: the instance is not on a host yet; 404: Nova does not know it.
    dropped, placed = new_uuid(), new_uuid()
    nova.set_event_code(dropped, code)
    events = [bound(dropped), bound(dropped, ok=False), bound(placed)]

    deliveries = client.notify_bound(events)

    assert deliveries[dropped].delivered
    assert deliveries[dropped].status == 207
    assert deliveries[dropped].event_codes == {
        events[0].arq_uuid: code, events[1].arq_uuid: code}
    assert deliveries[placed].status == 200
    # Delivered means "do not post again": one call each.
    assert client.posts == 2


@pytest.mark.parametrize('failures', [
    (500,), (503, 503), (429, 502, stand_in.DROP)],
    ids=['500', '503 twice', '429 502 dropped'])
def test_transient_failures_are_retried(nova, make_client, failures):
    client = make_client(retries=3)
    nova.answer_next(*failures)
    instance_uuid = new_uuid()
    event = bound(instance_uuid)

    delivery = client.notify_bound([event])[instance_uuid]

    assert delivery.delivered and delivery.status == 200
    assert delivery.attempts == len(failures) + 1
    assert [c.status for c in nova.calls] == [
        None if f == stand_in.DROP else f for f in failures] + [200]
    # Failed attempts are not events Nova took.
    assert [(e.server_uuid, e.tag) for e in nova.events] == [
        (instance_uuid, event.arq_uuid)]


def test_retries_give_up_and_spare_the_rest_of_the_batch(nova, make_client):
    client = make_client(retries=2)
    busy, next_one, back, after = (new_uuid() for _ in range(4))
    # busy: 3 x 503 uses its retries; next_one gets one try (503);
    # back gets through, so after has its retries again (503, then 200).
    nova.answer_next(503, 503, 503, 503, stand_in.ANSWER, 503)

    deliveries = client.notify_bound(
        [bound(busy), bound(next_one), bound(back), bound(after)])

    assert not deliveries[busy].delivered
    assert deliveries[busy].transient and deliveries[busy].status == 503
    assert deliveries[busy].attempts == 3
    assert deliveries[next_one].attempts == 1
    assert not deliveries[next_one].delivered
    assert deliveries[next_one].transient
    assert deliveries[back].delivered and deliveries[back].attempts == 1
    assert deliveries[after].delivered and deliveries[after].attempts == 2
    assert [c.status for c in nova.calls] == [
        503, 503, 503, 503, 200, 503, 200]


def test_nova_down_reported_without_raising_or_blocking(nova, make_client):
    client = make_client(retries=2)
    first, second = new_uuid(), new_uuid()
    events = [bound(first), bound(second)]
    nova.stop()

    started = time.monotonic()
    deliveries = client.notify_bound(events)
    elapsed = time.monotonic() - started

    assert elapsed < 2
    for delivery in deliveries.values():
        assert not delivery.delivered and delivery.transient
        assert delivery.status is None
        assert 'refused' in delivery.reason.lower()
    assert deliveries[first].attempts == 3
    assert deliveries[second].attempts == 1
    assert client.posts == 4

    # Nova is back on the same port: the same events go through.
    nova.start()
    deliveries = client.notify_bound(events)
    assert all(d.delivered for d in deliveries.values())
    assert len(nova.events) == 2


def test_no_answer_within_the_timeout_is_retried(nova, make_client):
    client = make_client(retries=1, timeout=0.3)
    nova.answer_next(stand_in.STALL)
    instance_uuid = new_uuid()

    started = time.monotonic()
    delivery = client.notify_bound([bound(instance_uuid)])[instance_uuid]

    assert time.monotonic() - started >= 0.3
    assert delivery.delivered and delivery.attempts == 2
    assert [c.status for c in nova.calls] == [None, 200]


@pytest.mark.parametrize('status', [400, 401, 403])
def test_refusals_are_not_retried(nova, make_client, status):
    client = make_client(retries=3)
    nova.answer_next(status)
    refused, other = new_uuid(), new_uuid()

    deliveries = client.notify_bound([bound(refused), bound(other)])

    assert not deliveries[refused].delivered
    assert not deliveries[refused].transient
    assert deliveries[refused].status == status
    assert deliveries[refused].attempts == 1
    assert str(status) in deliveries[refused].reason
    # The others are still told.
    assert deliveries[other].delivered
    assert [c.status for c in nova.calls] == [status, 200]


def test_concurrent_batches_all_arrive(nova, client):
    instances = [new_uuid() for _ in range(8)]
    results = {}

    def notify(instance_uuid):
        events = [bound(instance_uuid), bound(instance_uuid)]
        results.update(client.notify_bound(events))

    threads = [threading.Thread(target=notify, args=(i,))
               for i in instances]
    for thread in threads:
        thread.start()

    received = nova.wait_for_events(16, timeout=10)
    for thread in threads:
        thread.join(timeout=10)

    assert len(received) == 16
    assert {e.server_uuid for e in received} == set(instances)
    assert all(results[i].delivered for i in instances)
    assert client.posts == 8


def test_from_conf_without_nova_is_none(nova, tmp_path):
    conf = load_conf(tmp_path)

    assert nova_client.NovaClient.from_conf(conf) is None
    assert conf.nova.event_retries == 3
    assert conf.nova.event_retry_interval == 1.0

    nova.configure(conf)
    client = nova_client.NovaClient.from_conf(conf)
    instance_uuid = new_uuid()
    assert client.notify_bound([bound(instance_uuid)])[
        instance_uuid].delivered


def test_from_conf_with_the_none_plugin(nova, tmp_path):
    conf = load_conf(tmp_path, nova.conf_section()
                     + 'event_retries = 5\nevent_retry_interval = 0.5\n')

    client = nova_client.NovaClient.from_conf(conf)

    assert (client.retries, client.retry_interval) == (5, 0.5)
    instance_uuid = new_uuid()
    assert client.notify_bound([bound(instance_uuid)])[
        instance_uuid].delivered
    assert nova.calls[0].headers['User-Agent'].startswith('cyborg ')


def test_from_conf_endpoint_override_alone_reaches_nova(nova, tmp_path):
    conf = load_conf(tmp_path, '[nova]\nendpoint_override = %s\n'
                     % nova.url)

    client = nova_client.NovaClient.from_conf(conf)

    instance_uuid = new_uuid()
    assert client.notify_bound([bound(instance_uuid)])[
        instance_uuid].delivered


def test_from_conf_sends_the_token_of_the_auth_plugin(nova, make_client):
    nova.expected_token = 'compute-token'
    client = make_client(auth_type='admin_token', token='compute-token')
    wrong = make_client(auth_type='admin_token', token='stale-token')
    instance_uuid = new_uuid()

    assert client.notify_bound([bound(instance_uuid)])[
        instance_uuid].delivered
    refused = wrong.notify_bound([bound(instance_uuid)])[instance_uuid]
    assert refused.status == 401 and refused.attempts == 1
    assert [c.headers.get('X-Auth-Token') for c in nova.calls] == [
        'compute-token', 'stale-token']


def test_unanswered_requests_time_out_by_default(nova, tmp_path):
    # [nova] timeout unset: a hung Nova must not hold the conductor.
    conf = load_conf(tmp_path, nova_section(nova))

    client = nova_client.NovaClient.from_conf(conf)

    assert client._adapter.session.timeout == nova_client.DEFAULT_TIMEOUT
