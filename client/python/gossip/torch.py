"""gossip.torch: the old name of gossipd.torch (deprecated, see gossip/__init__.py)."""

import gossipd.torch as _gossipd_torch

__all__ = list(_gossipd_torch.__all__)


def __getattr__(name):
    return getattr(_gossipd_torch, name)


def __dir__():
    return sorted(set(globals()) | set(dir(_gossipd_torch)))
