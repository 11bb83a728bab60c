"""Asking the conductor what this host's binds held, once the agent
starts again (``mdev_restore``, ``mig_restore``)."""

from oslo_log import log
import oslo_messaging as messaging

from cyborg import rpc
from cyborg import service

LOG = log.getLogger(__name__)

# The answer under an ``[upgrade_levels] conductor`` pin that forbids
# the question: nothing can be restored, and nothing is touched.
CAPPED = object()


def ask(question, what, timeout):
    """The conductor's answer to ``question()``; ``CAPPED`` under a pin
    (logged as an error); None when it did not answer (logged: asked
    again at the next report). ``what`` names what is restored."""
    try:
        return question()
    except rpc.VersionCapped as exc:
        LOG.error('cyborg-agent: the %s of this host\'s binds are not '
                  'restored after its restart: %s', what, exc)
        return CAPPED
    except messaging.MessagingTimeout:
        problem = 'the conductor did not answer within %s s' % (timeout,)
    except Exception as exc:
        problem = service.describe_error(exc)
    LOG.warning('cyborg-agent: cannot restore the %s of this host yet: %s; '
                'trying again at the next report', what, problem)
    return None
