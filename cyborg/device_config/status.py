"""The states of a device's configuration, in the order a change goes.

``pending``: the device's settings differ from what its policy wants;
``draining``: nothing new may land on it while in-use handles are
released; ``applying``: the host is changing it; ``applied``: it holds
what its policy wants; ``failed``: the change failed, and the row says
which task and why.
"""

PENDING = 'pending'
DRAINING = 'draining'
APPLYING = 'applying'
APPLIED = 'applied'
FAILED = 'failed'
STATES = (PENDING, DRAINING, APPLYING, APPLIED, FAILED)
# Out of scheduling while in these: the device's providers are fully
# reserved in Placement and no new bind takes one of its handles.
HELD = (DRAINING, APPLYING, FAILED)
