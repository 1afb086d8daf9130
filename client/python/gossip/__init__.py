"""gossip: the Python client's old name, kept for the scripts and tests of this source
tree. Deprecated: use `gossipd` (distribution gossipd-client), whose names this module
forwards (gossip.Client is gossipd.Client, ...). Not installed by the distribution, so
that it never clashes with the unrelated PyPI package called `gossip`."""

import warnings

import gossipd as _gossipd


warnings.warn("the 'gossip' module is deprecated: import gossipd (and gossipd.torch) instead",
              DeprecationWarning, stacklevel=2)  # the importer's line: warn() skips importlib's frames

__all__ = list(_gossipd.__all__)
__version__ = _gossipd.__version__


def __getattr__(name):
    return getattr(_gossipd, name)


def __dir__():
    return sorted(set(globals()) | set(dir(_gossipd)))
