"""The C extension only; everything else is in pyproject.toml. Declared here because setup()'s
ext_modules is setuptools' stable interface (pyproject's ext-modules table is experimental).

Optional: without a C compiler the install still succeeds and xplane files are read with
protobuf, slower (analyzers/ingest/xplane.py says so).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("analyzers.ingest._xplane_wire",
                             sources=["analyzers/ingest/_xplane_wire.c"], optional=True)])
