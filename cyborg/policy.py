"""The policy enforcer and the one call controllers make to it."""

import time

from oslo_config import cfg
from oslo_policy import policy

from cyborg import exception
from cyborg import policies


def make_enforcer(conf):
    enforcer = policy.Enforcer(conf)
    enforcer.register_defaults(policies.list_rules())
    return enforcer


class DecisionCache:
    """Remembers policy decisions per (rule, caller, target).

    A decision depends only on the rules, the caller's credentials and the
    target, so it is reused until the rules change. oslo.policy checks its
    policy file for changes on every call; here that happens at most once
    per ``recheck_seconds``, and a change empties the cache.
    """

    def __init__(self, enforcer, recheck_seconds=5.0, clock=time.monotonic):
        self.enforcer = enforcer
        self._recheck = recheck_seconds
        self._clock = clock
        self._next_check = 0.0
        self._rules = None
        self._decisions = {}

    def allowed(self, rule, target, context):
        """ALLOWED, FORBIDDEN or WRONG_SCOPE."""
        now = self._clock()
        if now >= self._next_check:
            self.enforcer.load_rules()
            if self.enforcer.rules is not self._rules:
                self._rules = self.enforcer.rules
                self._decisions.clear()
            self._next_check = now + self._recheck
        creds = context.to_policy_values()
        key = (rule, _frozen(creds), _frozen(target))
        decision = self._decisions.get(key)
        if decision is None:
            decision = _decide(self.enforcer, rule, target, context)
            if len(self._decisions) > 10000:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision


ALLOWED, FORBIDDEN, WRONG_SCOPE = 'allowed', 'forbidden', 'wrong scope'


def _decide(enforcer, rule, target, context):
    try:
        enforcer.authorize(rule, target, context, do_raise=True)
    except policy.InvalidScope:
        return WRONG_SCOPE
    except policy.PolicyNotAuthorized:
        return FORBIDDEN
    return ALLOWED


def _frozen(values):
    return tuple(sorted(
        (k, tuple(v) if isinstance(v, list) else v)
        for k, v in values.items()))


def enforcer_for_generator():
    """Entry point for oslopolicy-sample-generator and friends."""
    from cyborg import conf as cyborg_conf
    cyborg_conf.register_opts(cfg.CONF)
    return make_enforcer(cfg.CONF)


def is_allowed(enforcer, context, rule, target=None):
    """Whether ``context`` may do ``rule``; for rules that widen what a
    caller sees rather than gate a call."""
    try:
        authorize(enforcer, context, rule, target)
    except exception.Forbidden:
        return False
    return True


def authorize(enforcer, context, rule, target=None):
    """Raise Forbidden unless ``context`` may do ``rule`` on ``target``.

    ``enforcer`` is an oslo.policy Enforcer or a DecisionCache around one.
    """
    target = target if target is not None else {
        'project_id': context.project_id}
    if isinstance(enforcer, DecisionCache):
        decision = enforcer.allowed(rule, target, context)
    else:
        decision = _decide(enforcer, rule, target, context)
    if decision == WRONG_SCOPE:
        raise exception.Forbidden(
            'The token scope does not allow %s; use a project-scoped token.'
            % rule, code='cyborg.policy.scope')
    if decision == FORBIDDEN:
        raise exception.Forbidden(
            'Policy does not allow %s to be performed.' % rule,
            code='cyborg.policy.forbidden')
