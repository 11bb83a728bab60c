"""Who reads the inventory under the legacy policy defaults.

With ``[oslo_policy] enforce_new_defaults = False`` a rule allows what
its new default or its legacy one allows. The inventory of every host
(devices, deployables, attributes) was readable by anyone under the
legacy defaults; now their legacy default is the admin role, so only
project managers (the new default) and admins read it. Device profiles
and ARQs stay readable by any project's users (ARQs only their own).
"""

import pytest
import webtest

from cyborg.api import app as api_app
from cyborg.db import session
from tests import conftest
from tests import inventory_rows

# oslo.policy warns about every deprecated rule it evaluates.
pytestmark = pytest.mark.filterwarnings(
    'ignore:Policy .* was deprecated in .* in favor of:UserWarning')

DEV = '/v2/devices'
DEP = '/v2/deployables'
ATTR = '/v2/attributes'
DP = '/v2/device_profiles'
ARQ = '/v2/accelerator_requests'


def as_role(*roles, project='p1'):
    return {'X-Roles': ','.join(roles), 'X-Project-Id': project,
            'X-User-Id': 'u-' + roles[0]}


CALLERS = {
    'reader': as_role('reader'),
    'member': as_role('member', 'reader'),
    'other-member': as_role('member', 'reader', project='p2'),
    'no-role': as_role('some-other-role'),
    'manager': as_role('manager', 'member', 'reader'),
    'admin': as_role('admin', 'manager', 'member', 'reader', project='p0'),
}
INVENTORY_READERS = {'manager', 'admin'}


@pytest.fixture(scope='module')
def legacy(module_db_url):
    """The app under the legacy defaults, and one item of each kind."""
    conf = conftest.make_conf(module_db_url)
    conf.set_override('enforce_new_defaults', False, group='oslo_policy')
    db = session.Database(conf)
    app = webtest.TestApp(api_app.build_app(conf, db))
    device, = inventory_rows.add_host(db.engine, 'host1',
                                      inventory_rows.fake_devices())
    deployable = device.deployables['FakeDevice']
    yield app, {DEV: device.uuid, DEP: deployable.uuid,
                ATTR: deployable.attributes['rc']}
    db.dispose()


@pytest.mark.parametrize('caller', sorted(CALLERS))
@pytest.mark.parametrize('path,resource', [
    (DEV, 'device'), (DEP, 'deployable'), (ATTR, 'attribute')])
def test_only_managers_and_admins_read_the_inventory(legacy, caller, path,
                                                     resource):
    app, items = legacy
    headers = CALLERS[caller]

    listing = app.get(path, headers=headers, expect_errors=True)
    one = app.get(path + '/' + items[path], headers=headers,
                  expect_errors=True)

    if caller in INVENTORY_READERS:
        assert (listing.status_int, one.status_int) == (200, 200)
        assert one.json['uuid'] == items[path]
    else:
        assert (listing.status_int, one.status_int) == (403, 403)
        assert listing.json['error_message'] == (
            'Policy does not allow cyborg:%s:get_all to be performed.'
            % resource)
        assert one.json['error_message'] == (
            'Policy does not allow cyborg:%s:get_one to be performed.'
            % resource)


@pytest.mark.parametrize('caller', sorted(CALLERS))
def test_profiles_and_requests_stay_readable_by_anyone(legacy, caller):
    app, _ = legacy

    profiles = app.get(DP, headers=CALLERS[caller])
    arqs = app.get(ARQ, headers=CALLERS[caller])

    assert (profiles.status_int, arqs.status_int) == (200, 200)
