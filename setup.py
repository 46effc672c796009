"""Build hook for the optional compiled kernels; all metadata lives in pyproject.toml.

``zoo.rl_utils._ckernels`` is a small C extension (plain loops for gae, V-trace and the linear recurrence);
``zoo.accel._crecurrent`` the loops of an LSTM or GRU unroll with resets inside (zoo.accel.recurrent_scan).
Both are optional: without a C compiler the install still succeeds and zoo uses its numpy scan and torch's recurrent
modules instead.
"""

import sys

from setuptools import Extension, setup

# No FMA contraction: keep the kernels' rounding identical to the plain loop they implement.
flags = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension("zoo.rl_utils._ckernels", ["zoo/rl_utils/_ckernels.c"], extra_compile_args=flags, optional=True),
        # Float rounding here need only match torch's LSTM and GRU to a tolerance: products may contract to FMA.
        # -fno-trapping-math lets the gates' clamps become vector selects (AVX2 and SSE2 code vectorises too); it
        # changes no rounding and no floating-point environment.
        Extension("zoo.accel._crecurrent", ["zoo/accel/_crecurrent.c"],
                  extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-fno-trapping-math"], optional=True),
    ]
)
