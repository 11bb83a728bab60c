"""Servers booted through a real Nova, in the session's ``nova_cloud``.

Every test here shares the one compute host of ``nova_cloud`` (its 16
FPGA accelerators) and deletes its servers before it ends (``servers``).
They are marked as one xdist group (``SHARED``), which ``--dist loadgroup``
(``tools/run-tests.sh``) runs on one worker: the cloud starts once. Under
another distribution each worker that runs one of them starts a
``nova_cloud`` of its own (its own host, databases and virtual hosts), so
the tests stay apart either way, only slower. A failing test prints the ends of
every process's log.
"""

import pytest

from tests.functional.nova import servers as nova_servers
from tests.glance_service import glance_service  # noqa: F401
from tests.nova_cloud import nova_cloud  # noqa: F401

# The user property that carries a boot's line (``servers.report``).
BOOT_LINE = 'nova_boot'
FPGA_GROUP = {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}


# Each test_servers_* module marks itself with this: one worker runs them.
SHARED = pytest.mark.xdist_group('nova_cloud')


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == 'call':
        # Carried to the controller under xdist, printed in the summary.
        report.user_properties.extend(
            (BOOT_LINE, line) for line in nova_servers.REPORTED)
        nova_servers.REPORTED.clear()
    if report.failed and 'nova_cloud' in item.fixturenames:
        cloud = item.funcargs.get('nova_cloud')
        if cloud is not None:
            report.sections.append(('process logs', cloud.tails(40)))
    return report


@pytest.fixture(scope='session')
def fpga_flavor(nova_cloud):  # noqa: F811
    """A flavor whose ``accel:device_profile`` asks for one fake FPGA."""
    nova_servers.device_profile(nova_cloud, 'one-fpga', [FPGA_GROUP])
    return nova_servers.flavor(nova_cloud, 'accel-one-fpga',
                               {'accel:device_profile': 'one-fpga'})


@pytest.fixture(scope='session')
def plain_flavor(nova_cloud):  # noqa: F811
    """The same flavor without an accelerator."""
    return nova_servers.flavor(nova_cloud, 'plain')


@pytest.fixture
def cloud(nova_cloud):  # noqa: F811
    """``nova_cloud``; the servers a test leaves go when it ends, and then
    nothing may be held any more."""
    yield nova_cloud
    left = list(nova_servers.holdings(nova_cloud).servers)
    nova_servers.delete(nova_cloud, left)
    held = nova_servers.wait_consistent(nova_cloud)
    assert (held.arqs, held.handles_in_use, held.allocations) == (
        [], 0, {}), held
