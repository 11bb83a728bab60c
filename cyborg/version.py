"""The version of the installed cyborg package, as services report it."""

import functools
import importlib.metadata


@functools.lru_cache(maxsize=1)
def package_version():
    """``cyborg``'s distribution version; ``unknown`` when run from a
    tree that was never installed."""
    try:
        return importlib.metadata.version('cyborg')
    except importlib.metadata.PackageNotFoundError:
        return 'unknown'
