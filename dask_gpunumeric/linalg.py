"""``gnp.linalg``: the array API linear-algebra extension (plus NumPy's ``norm``, ``lstsq``, ...)."""
from .api.linalg import *  # noqa: F403
from .api.linalg import __all__  # noqa: F401
