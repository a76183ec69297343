"""``gnp.linalg``: the array API linear-algebra extension (plus NumPy's ``norm``, ``lstsq``, ...)."""
from ._linalg import *  # noqa: F403
from ._linalg import __all__  # noqa: F401
