"""The compiled part of traceparse: the events' decoder (traceparse/ingest/decode.c). Optional: where it cannot be
built, traceparse decodes with msgspec alone (traceparse/ingest/column_batch.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("traceparse.ingest._decode", ["traceparse/ingest/decode.c"], optional=True,
                             extra_compile_args=["-O2"])])
