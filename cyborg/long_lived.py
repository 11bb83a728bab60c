"""Keep the garbage collector's full passes short in a service process.

Once started, a service holds some 200,000 objects (modules, classes,
configuration, SQLAlchemy metadata, policy rules) that live as long as
the process. Python's full collection walks all of them every time it
runs, about 100 ms of one core, and the request or bind that triggers it
waits that long. Moved to the permanent generation after the start, they
are no longer walked: a full pass then looks only at what requests made.
"""

import gc


def settle():
    """Freeze what exists now, after a collection (so no garbage is kept
    forever)."""
    gc.collect()
    gc.freeze()


def unsettle():
    """Before a restart: what the old start made may become garbage."""
    gc.unfreeze()
