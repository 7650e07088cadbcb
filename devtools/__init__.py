"""Development tools shared by the tests and the benchmarks; not shipped.

The benchmarks and tests/ both import from here, never from each other, so a
benchmark keeps working whatever the tests reorganise. Import it from the
repository root: pytest puts the root on ``sys.path`` (``pythonpath`` in
pyproject.toml) and the benchmarks run as ``python -m benchmarks.<name>``.

- ``native_builds``: build each native variant once per source state
  (build/test-variants/) and run code in its environment.
- ``hvd_nccl_build``: build and inspect the NCCL plugin alone
  (native/nccl/standalone/).
- ``loopback_http``: a real HTTP server on 127.0.0.1 serving a directory,
  which can fail on request (for the fetch tests).
- ``sdist``: the project's sdist with a variant index URL embedded.
- ``venvs``: fresh venvs, a clean user environment, local wheelhouses.
"""
