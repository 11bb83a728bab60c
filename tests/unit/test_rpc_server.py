"""RPC servers run on threads, chosen without a deprecated argument."""

import warnings

from cyborg import rpc
from tests.conftest import make_conf


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
