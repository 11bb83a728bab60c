"""The policy enforcer and the one call controllers make to it."""

from oslo_config import cfg
from oslo_policy import policy

from cyborg import exception
from cyborg import policies


def make_enforcer(conf):
    enforcer = policy.Enforcer(conf)
    enforcer.register_defaults(policies.list_rules())
    return enforcer


def enforcer_for_generator():
    """Entry point for oslopolicy-sample-generator and friends."""
    from cyborg import conf as cyborg_conf
    cyborg_conf.register_opts(cfg.CONF)
    return make_enforcer(cfg.CONF)


def authorize(enforcer, context, rule, target=None):
    """Raise Forbidden unless ``context`` may do ``rule`` on ``target``."""
    target = target if target is not None else {
        'project_id': context.project_id}
    try:
        enforcer.authorize(rule, target, context, do_raise=True)
    except policy.InvalidScope:
        raise exception.Forbidden(
            'The token scope does not allow %s; use a project-scoped token.'
            % rule, code='cyborg.policy.scope') from None
    except policy.PolicyNotAuthorized:
        raise exception.Forbidden(
            'Policy does not allow %s to be performed.' % rule,
            code='cyborg.policy.forbidden') from None
