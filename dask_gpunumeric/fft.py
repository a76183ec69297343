"""``gnp.fft``: the array API FFT extension (plus NumPy's 2-d variants)."""
from .api.fft import *  # noqa: F403
from .api.fft import __all__  # noqa: F401
