"""A script of the repository (``tools/...``, a playbook module) loaded as
a module for a test, leaving ``sys.path`` as it was: scripts put their
own directories first for their imports."""

import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def load(path, name=None):
    """The module of the file at ``path`` (relative to the repository or
    absolute), named ``name`` (default: the file's stem)."""
    path = REPO / path
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(name or path.stem,
                                                      path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module
