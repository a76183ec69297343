"""``gnp.fft``: the array API FFT extension (plus NumPy's 2-d variants)."""
from ._fft import *  # noqa: F403
from ._fft import __all__  # noqa: F401
