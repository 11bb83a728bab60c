"""Who reads device profiles and ARQs under the legacy policy defaults.

With ``[oslo_policy] enforce_new_defaults = False`` a rule allows what
its new default or its legacy one allows. Device profiles and ARQs stay
readable by any project's users (ARQs only their own). The inventory
reads, in both modes, are in ``test_inventory_policy``.
"""

import pytest
import webtest

from cyborg.api import app as api_app
from cyborg.db import session
from tests import conftest

# oslo.policy warns about every deprecated rule it evaluates.
pytestmark = pytest.mark.filterwarnings(
    'ignore:Policy .* was deprecated in .* in favor of:UserWarning')

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


@pytest.fixture(scope='module')
def legacy(module_db_url):
    """The app under the legacy defaults."""
    conf = conftest.make_conf(module_db_url)
    conf.set_override('enforce_new_defaults', False, group='oslo_policy')
    db = session.Database(conf)
    yield webtest.TestApp(api_app.build_app(conf, db))
    db.dispose()


@pytest.mark.parametrize('caller', sorted(CALLERS))
def test_profiles_and_requests_stay_readable_by_anyone(legacy, caller):
    profiles = legacy.get(DP, headers=CALLERS[caller])
    arqs = legacy.get(ARQ, headers=CALLERS[caller])

    assert (profiles.status_int, arqs.status_int) == (200, 200)
