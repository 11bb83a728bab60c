"""Imported first by the service processes: eventlet stays out of them.

futurist (under oslo.service's threading backend and oslo.messaging) and
oslo.privsep import eventlet whenever it is installed, and use it only in
a process that eventlet monkey-patched, which no cyborg service is
(threads only). That import alone is 17 MiB of each service's memory.
Marked missing, eventlet is not imported, and both go on without it.

Only the entry points of the services import this: a test runner or
another program that imports cyborg's modules keeps its own choice.
"""

import sys

# An eventlet imported already stays.
sys.modules.setdefault('eventlet', None)
