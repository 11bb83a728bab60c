"""RPC servers run on threads, chosen without a deprecated argument."""

import logging
import warnings

import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg import rpc
from tests.conftest import make_conf
from tests.oslo_log_lines import oslo_log_lines  # noqa: F401

LOG = logging.getLogger(__name__)


def test_servers_use_the_threading_executor_without_warning():
    conf = make_conf('sqlite://')
    transport = rpc.get_transport(conf, url='fake://')
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            server = rpc.get_server(transport, 'cyborg-test', 'host1', [])
        assert server.executor_type == 'threading'
        assert [str(w.message) for w in caught
                if 'executor' in str(w.message)] == []
    finally:
        transport.cleanup()


class Greeter:
    target = messaging.Target(version='1.0')

    def hello(self, context):
        LOG.info('hello from the endpoint')
        return context.request_id


def test_a_messages_context_ends_with_its_handling(
        oslo_log_lines):  # noqa: F811
    conf = make_conf('sqlite://')
    transport = rpc.get_transport(conf, url='fake://')
    server = rpc.get_server(transport, 'cyborg-test', 'host1', [Greeter()])
    # One executor thread: the second message runs where the first ran.
    transport.conf.set_override('executor_thread_pool_size', 1)
    server.start()
    try:
        client = rpc.get_client(transport, 'cyborg-test', '1.0',
                                server='host1', timeout=10)
        first = cyborg_context.admin_context(None)
        assert client.call(first, 'hello') == first.request_id
        # No endpoint has it: the server logs the error before any
        # context of the second message exists.
        with pytest.raises(messaging.MessagingException):
            client.call(cyborg_context.admin_context(None), 'no_such_method')
    finally:
        server.stop()
        server.wait()
        transport.cleanup()
    lines = oslo_log_lines.text.splitlines()
    hello = [line for line in lines if 'hello from the endpoint' in line]
    assert len(hello) == 1 and first.request_id in hello[0], lines
    failed = [line for line in lines
              if 'Exception during message handling' in line]
    assert failed, lines
    assert first.request_id not in failed[0], failed[0]
