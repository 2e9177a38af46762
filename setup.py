"""Optional C speedups for the worker's per-record hot paths (worker/native.py says which and why).

Everything else is in pyproject.toml. Each extension is ``optional``: without a C compiler the
install still succeeds and the worker runs the pure-Python path (its ``worker.started`` log line
says which path it runs). After editing a ``.c`` file: ``python3 setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # worker/native.py lists them for the start log line.
        Extension("ferry.worker._records", ["worker/_records.c"], optional=True),
        Extension("ferry.worker._encode", ["worker/_encode.c"], depends=["worker/_json_check.h"], optional=True),
    ]
)
