"""``gnp.random``: counter-based Philox4x32-10 random arrays, the same bits on NumPy and CUDA blocks."""
from .api.random import Generator, default_rng

__all__ = ["Generator", "default_rng"]
