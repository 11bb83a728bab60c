"""Payload versions, endpoints that ignore a newer caller's arguments and
clients capped by ``[upgrade_levels]``."""

import logging
import uuid

import pytest

from cyborg import conf as cyborg_conf
from cyborg import rpc
from cyborg.accelerator.drivers import fake
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.objects import inventory
from cyborg.objects import payload
from tests import conductor_rpc

KIND = payload.Kind('widget', '1.2', required=('name',),
                    optional={'size': 3, 'tags': list})


def test_known_fields_are_read_and_missing_optional_ones_defaulted():
    first = KIND.load({'name': 'a', 'version': '1.0'})
    second = KIND.load({'name': 'b', 'version': '1.0'})
    assert first == {'name': 'a', 'size': 3, 'tags': []}
    # A callable default is a new value per read.
    assert first['tags'] is not second['tags']
    assert KIND.load({'name': 'a', 'size': 5, 'version': '1.2'}) == {
        'name': 'a', 'size': 5, 'tags': []}


def test_unknown_fields_of_a_newer_minor_are_ignored_and_logged_once(caplog):
    field = 'added_%s' % uuid.uuid4().hex[:8]
    data = {'name': 'a', field: 1, 'version': '1.7'}
    with caplog.at_level(logging.DEBUG, logger='cyborg.objects.payload'):
        assert KIND.load(data) == {'name': 'a', 'size': 3, 'tags': []}
        assert KIND.load(data)['name'] == 'a'
    said = [r.getMessage() for r in caplog.records if field in r.getMessage()]
    assert said == ['Ignoring fields %s of a widget payload of version 1.7 '
                    '(this release writes 1.2)' % field]


def test_a_payload_without_version_is_1_0():
    assert KIND.load({'name': 'a'})['name'] == 'a'


@pytest.mark.parametrize('version, says', [
    ('2.0', 'upgrade this service to the sender\'s release'),
    ('0.9', 'upgrade the sender'),
])
def test_another_major_is_refused(version, says):
    with pytest.raises(payload.PayloadVersionError) as refused:
        KIND.load({'name': 'a', 'version': version})
    assert refused.value.message == (
        'The widget payload of version %s cannot be read by this service, '
        'which reads 1.x: %s.' % (version, says))
    assert refused.value.status == 400


@pytest.mark.parametrize('data, message', [
    ({'version': '1.2'}, 'The widget payload of version 1.2 lacks name.'),
    ({'name': 'a', 'version': 'one'},
     "A payload version is MAJOR.MINOR, not 'one'."),
    (['name'], "The widget payload is a JSON object, not ['name']."),
])
def test_malformed_payloads_are_refused(data, message):
    with pytest.raises(payload.PayloadError) as refused:
        KIND.load(data)
    assert refused.value.message == message


def test_dump_stamps_the_version():
    assert KIND.dump({'name': 'a', 'version': '0.1'}) == {
        'name': 'a', 'version': '1.2'}


def fake_host():
    return inventory.HostInventory('h1',
                                   fake.FakeDriver(None, None).discover())


def test_inventory_round_trip_carries_a_version_at_every_level():
    host = fake_host()
    data = host.to_dict()
    device = data['devices'][0]
    deployable = device['deployables'][0]
    assert (data['version'], device['version'], deployable['version'],
            deployable['attach_handles'][0]['version']) == (
                inventory.VERSION,) * 4
    # Maps of data carry none: their keys are not fields.
    assert 'version' not in device['controlpath_info']
    assert 'version' not in deployable['attributes']
    assert inventory.HostInventory.from_dict(data) == host


def _walk(data, change):
    if isinstance(data, list):
        return [_walk(d, change) for d in data]
    if isinstance(data, dict) and 'version' in data:
        return change({k: _walk(v, change) for k, v in data.items()})
    return data


def test_inventory_of_a_newer_minor_with_extra_fields_reads_the_same():
    host = fake_host()
    newer = _walk(host.to_dict(), lambda d: dict(d, version='1.5',
                                                 later_field=[1]))
    assert inventory.HostInventory.from_dict(newer) == host


def test_inventory_of_an_unversioned_agent_without_optional_fields():
    host = fake_host()
    old = _walk(host.to_dict(), lambda d: {
        k: v for k, v in d.items()
        if k not in ('version', 'parent', 'vendor_board_info', 'traits')})
    read = inventory.HostInventory.from_dict(old)
    deployable = read.devices[0].deployables[0]
    assert deployable.traits == [] and deployable.parent is None
    assert read.devices[0].vendor_board_info == {}
    assert deployable.attach_handles == host.devices[0].deployables[
        0].attach_handles


def test_inventory_with_a_nested_entry_of_a_newer_major_is_refused():
    data = fake_host().to_dict()
    data['devices'][0]['deployables'][0]['attach_handles'][3]['version'] = (
        '2.1')
    with pytest.raises(payload.PayloadVersionError,
                       match='attach handle payload of version 2.1'):
        inventory.HostInventory.from_dict(data)


def test_inventory_lists_must_be_lists():
    data = fake_host().to_dict()
    data['devices'] = {'not': 'a list'}
    with pytest.raises(payload.PayloadError, match='devices is a list'):
        inventory.HostInventory.from_dict(data)


class Endpoint:
    def __init__(self):
        self.calls = []

    @rpc.ignores_unknown_args
    def act(self, context, name, size=1):
        self.calls.append((context, name, size))
        return name


def test_endpoints_drop_a_newer_callers_arguments(caplog):
    endpoint = Endpoint()
    with caplog.at_level(logging.DEBUG, logger='cyborg.rpc'):
        assert endpoint.act('ctx', name='a', size=2, later='x') == 'a'
        assert endpoint.act('ctx', 'b', later='y') == 'b'
    assert endpoint.calls == [('ctx', 'a', 2), ('ctx', 'b', 1)]
    said = [r.getMessage() for r in caplog.records
            if 'ignoring arguments' in r.getMessage()]
    assert said == ['Endpoint.act: ignoring arguments later of a newer '
                    'caller']
    # A missing argument is still an error.
    with pytest.raises(TypeError):
        endpoint.act('ctx', size=2)


def test_a_method_with_kwargs_cannot_be_decorated():
    with pytest.raises(TypeError, match='decorate the method itself'):
        rpc.ignores_unknown_args(lambda self, context, **kwargs: None)


def test_upgrade_levels_take_major_minor_only():
    conf = cyborg_conf.load(default_config_files=[])
    assert conf.upgrade_levels.conductor is None
    assert conf.upgrade_levels.agent is None
    conf.set_override('conductor', '1.2', group='upgrade_levels')
    assert conf.upgrade_levels.conductor == '1.2'
    with pytest.raises(ValueError):
        conf.set_override('agent', 'victoria', group='upgrade_levels')


@pytest.fixture
def transport():
    conf = cyborg_conf.load(default_config_files=[])
    conductor_rpc.use_fake_transport(conf)
    transport = rpc.get_transport(conf)
    yield transport
    transport.cleanup()


def test_capped_clients_refuse_what_the_cap_forbids(transport):
    capped = conductor_rpcapi.ConductorAPI(transport, version_cap='1.1')
    assert capped.can_send_version('1.1')
    assert not capped.can_send_version('1.2')
    assert conductor_rpcapi.ConductorAPI(transport).can_send_version(
        conductor_rpcapi.VERSION)
    with pytest.raises(rpc.VersionCapped) as refused:
        capped.program_deployable(None, 'dep', 'image')
    assert refused.value.status == 503
    assert 'program_deployable needs conductor RPC API 1.3' in str(
        refused.value)
    agent = agent_rpcapi.AgentAPI(transport, version_cap='1.0')
    with pytest.raises(rpc.VersionCapped) as refused:
        agent.prepare_attach_handle(None, 'h1', 'fake_driver', {}, 'arq')
    assert refused.value.message == (
        'prepare_attach_handle needs agent RPC API 1.1, but [upgrade_levels] '
        'agent = 1.0 pins it lower; raise or remove the pin once every agent '
        'runs a release that serves 1.1.')
