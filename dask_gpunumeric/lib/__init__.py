"""``gnp.lib``: the parts of ``numpy.lib`` that gnp implements."""
from . import stride_tricks

__all__ = ["stride_tricks"]
