"""What users call: argument validation, dtype rules and guards, building expressions; the Array class.

A module imports only modules before it (no cycles, imports inside functions included): ``guards``;
``array`` (the class, whose methods and operators call the gnp namespace handed to it on import);
``creation``; ``manipulation`` (axes, broadcasting, ``out=``); ``elementwise`` (ufuncs); then ``indexing``,
``reductions``, ``blockwise``, ``interop``; then the families built on them (``tensor``, ``sorting``,
``statistics``, ``linalg``, ``fft``, ``selection``, ``tiling``, ``matrices``, ``differences``,
``comparison``, ``padding``, ``convolution``, ``overlap``, ...).
"""
