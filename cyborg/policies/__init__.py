"""Policy defaults in code, one module per resource."""

import itertools

from cyborg.policies import arq
from cyborg.policies import attribute
from cyborg.policies import deployable
from cyborg.policies import device
from cyborg.policies import device_config_policy
from cyborg.policies import device_profile
from cyborg.policies import limits
from cyborg.policies import service


def list_rules():
    return list(itertools.chain(
        device_profile.rules, arq.rules, device.rules, deployable.rules,
        attribute.rules, service.rules, device_config_policy.rules,
        limits.rules))
