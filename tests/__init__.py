"""The test suite, a package so that every test directory is one too.

Helpers beside their tests are imported by package (``from .engine_helpers
import ...``, ``from tests.spack.spack_hosts import ...``); what tests share
with the benchmarks lives in ``devtools``. conftest.py files hold fixtures only.
"""
