"""``gnp.random``: counter-based Philox4x32-10 random arrays, the same bits on NumPy and CUDA blocks; NumPy's
legacy functions (``seed``, ``rand``, ``randn``, ...) draw from one module-level Generator."""
from .api.random import *  # noqa: F403
from .api.random import __all__  # noqa: F401
