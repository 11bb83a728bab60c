"""The names of what a project's limits count, as registered in Keystone
for this service (service type ``accelerator``).

- ``accelerator_requests``: the project's ARQs.
- ``class:<resource class>``: units of a Placement resource class that
  the project's ARQs ask for (``class:FPGA``, ``class:PGPU``,
  ``class:CUSTOM_MIG_COMPUTE_SLICE``), as Nova names its own.
- ``device_profile:<name>``: the project's ARQs made from that profile
  (a limit per GPU model is a limit on its profiles).
"""

ARQS = 'accelerator_requests'
CLASS_PREFIX = 'class:'
PROFILE_PREFIX = 'device_profile:'


def resource_class(name):
    return CLASS_PREFIX + name


def device_profile(name):
    return PROFILE_PREFIX + name


def by_name(usage):
    """{resource name: amount} of a ``project_usage.Usage``."""
    named = {ARQS: usage.arqs}
    named.update((resource_class(rc), amount)
                 for rc, amount in usage.by_class.items())
    named.update((device_profile(profile), amount)
                 for profile, amount in usage.by_profile.items())
    return named
