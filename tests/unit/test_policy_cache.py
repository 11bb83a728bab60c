"""The policy decision cache: same answers as oslo.policy, fewer checks."""

import os

import pytest

from cyborg import context as cyborg_context
from cyborg import exception
from cyborg import policy
from tests import conftest

RULE = 'cyborg:device_profile:create'


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def policy_file(tmp_path):
    path = tmp_path / 'policy.yaml'
    path.write_text('{}\n')
    return path


@pytest.fixture
def cache(policy_file):
    conf = conftest.make_conf('sqlite://')
    conf.set_override('policy_file', str(policy_file), group='oslo_policy')
    clock = Clock()
    cache = policy.DecisionCache(policy.make_enforcer(conf), clock=clock)
    cache.clock = clock
    return cache


def caller(*roles, system=None):
    return cyborg_context.RequestContext(
        roles=list(roles), project_id=None if system else 'p1',
        user_id='u1', system_scope=system)


def test_decisions_match_the_rules(cache):
    policy.authorize(cache, caller('admin'), RULE)
    with pytest.raises(exception.Forbidden) as member:
        policy.authorize(cache, caller('member'), RULE)
    with pytest.raises(exception.Forbidden) as system:
        policy.authorize(cache, caller('admin', system='all'), RULE)

    assert member.value.code == 'cyborg.policy.forbidden'
    assert system.value.code == 'cyborg.policy.scope'


def test_a_decision_is_checked_once(cache, monkeypatch):
    calls = []
    real = cache.enforcer.authorize
    monkeypatch.setattr(cache.enforcer, 'authorize',
                        lambda *a, **k: calls.append(a[0]) or real(*a, **k))

    for _ in range(5):
        policy.authorize(cache, caller('admin'), RULE)
    policy.authorize(cache, caller('admin', 'reader'), RULE)

    # Different credentials are a different decision.
    assert calls == [RULE, RULE]


def test_a_changed_policy_file_is_seen_after_the_recheck_delay(
        cache, policy_file):
    policy.authorize(cache, caller('member'), 'cyborg:arq:create')
    policy_file.write_text('"cyborg:arq:create": "role:admin"\n')
    # oslo.policy reloads a file whose mtime grew; make sure it did.
    stat = policy_file.stat()
    os.utime(policy_file, (stat.st_atime, stat.st_mtime + 10))

    cache.clock.now += 1
    policy.authorize(cache, caller('member'), 'cyborg:arq:create')
    cache.clock.now += 5
    with pytest.raises(exception.Forbidden):
        policy.authorize(cache, caller('member'), 'cyborg:arq:create')
