"""Probes for a GPU machine, beside ../shared/gpu-check (docs/guide/gpu.md says what they showed).

Each runs under ``hvd-selector run`` with the installed NCCL build, from outside the
checkout: ``hvd-selector run -np N python -m devtools.gpu_probes.NAME ARGS`` with the
checkout's root on PYTHONPATH, or ``python PATH/NAME.py``.
"""
