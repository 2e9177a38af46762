"""Optional C speedups for per-record hot paths of the worker (worker/native.py says which and why)
and of the gateway (gateway/acks.py, gateway/records.py).

Everything else is in pyproject.toml. Each extension is ``optional``: without a C compiler the
install still succeeds and the pure-Python path runs (the ``worker.starting`` and
``gateway.listening`` log lines say which). After editing a ``.c`` file: ``python3 setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # worker/native.py lists them for the start log line.
        Extension("ferry.worker._records", ["worker/_records.c"], optional=True),
        Extension(
            "ferry.worker._encode",
            ["worker/_encode.c"],
            depends=["worker/_json_check.h", "ferry/_json_bytes.h"],
            optional=True,
        ),
        Extension("ferry.gateway._acks", ["gateway/_acks.c"], optional=True),
        Extension(
            "ferry.gateway._plain",
            ["gateway/_plain.c"],
            depends=["gateway/_body.h", "ferry/_json_bytes.h"],
            optional=True,
        ),
    ]
)
