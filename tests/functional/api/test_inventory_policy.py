"""Who reads the inventory of every host, under each policy mode.

Devices, deployables and attributes show the hardware, hosts and health
of the whole cloud. The new defaults give those reads to admins alone;
with ``[oslo_policy] enforce_new_defaults = False`` the deprecated
default keeps a manager of any project reading them, as before, and a
reader or member of any project is refused in both modes.
"""

import pytest
import sqlalchemy as sa
import webtest

from cyborg.api import app as api_app
from cyborg.db import models
from cyborg.db import session
from tests import conftest
from tests import inventory_rows
from tests.functional.api import test_legacy_policy

# oslo.policy warns about every deprecated rule it evaluates.
pytestmark = pytest.mark.filterwarnings(
    'ignore:Policy .* was deprecated in .* in favor of:UserWarning')

DEV = '/v2/devices'
DEP = '/v2/deployables'
ATTR = '/v2/attributes'
# Each changed rule: the collection it guards, and whether it shows one
# item of it rather than the listing.
RULES = {
    'cyborg:device:get_all': (DEV, False),
    'cyborg:device:get_one': (DEV, True),
    'cyborg:deployable:get_all': (DEP, False),
    'cyborg:deployable:get_one': (DEP, True),
    'cyborg:attribute:get_all': (ATTR, False),
    'cyborg:attribute:get_one': (ATTR, True),
}
# From 2.5 device and deployable views carry the devices' health.
V25 = {'OpenStack-API-Version': 'accelerator 2.5'}
TABLES = (models.Device.__table__, models.Deployable.__table__,
          models.Attribute.__table__)


# Each with Keystone's implied roles (a manager is a member and a reader
# too); the admin is another project's: the inventory belongs to none.
CALLERS = {
    **test_legacy_policy.CALLERS,
    'other-manager': test_legacy_policy.as_role(
        'manager', 'member', 'reader', project='p2'),
}
READERS = {'new': {'admin'}, 'legacy': {'manager', 'other-manager', 'admin'}}


@pytest.fixture(scope='module')
def stack(module_db_url):
    """An app per policy mode over one database holding one host's
    device, and the uuid of an item of each collection."""
    apps, dbs = {}, []
    for mode in READERS:
        conf = conftest.make_conf(module_db_url)
        conf.set_override('enforce_new_defaults', mode == 'new',
                          group='oslo_policy')
        dbs.append(session.Database(conf))
        apps[mode] = webtest.TestApp(api_app.build_app(conf, dbs[-1]))
    device, = inventory_rows.add_host(dbs[0].engine, 'host1',
                                      inventory_rows.fake_devices())
    deployable = device.deployables['FakeDevice']
    yield apps, dbs[0].engine, {
        DEV: device.uuid, DEP: deployable.uuid,
        ATTR: deployable.attributes['rc']}
    for db in dbs:
        db.dispose()


def stored(engine):
    with engine.connect() as conn:
        return [sorted(tuple(row) for row in conn.execute(sa.select(t)))
                for t in TABLES]


@pytest.mark.parametrize('caller', sorted(CALLERS))
@pytest.mark.parametrize('mode', sorted(READERS))
@pytest.mark.parametrize('rule', sorted(RULES))
def test_who_reads_the_inventory(stack, rule, mode, caller):
    apps, engine, items = stack
    collection, one = RULES[rule]
    path = collection + '/' + items[collection] if one else collection
    before = stored(engine)

    response = apps[mode].get(path, headers={**CALLERS[caller], **V25},
                              expect_errors=True)

    if caller in READERS[mode]:
        assert response.status_int == 200
        assert items[collection] in response.text
        return
    assert response.status_int == 403
    assert response.json['code'] == 'cyborg.policy.forbidden'
    assert response.json['error_message'] == (
        'Policy does not allow %s to be performed.' % rule)
    # The refusal names no host and no item, and changes nothing.
    assert items[collection] not in response.text
    assert 'host1' not in response.text
    assert stored(engine) == before
