"""``gnp.lib.stride_tricks``: ``sliding_window_view``, as in ``numpy.lib.stride_tricks``."""
from ..api.overlap import sliding_window_view

__all__ = ["sliding_window_view"]
