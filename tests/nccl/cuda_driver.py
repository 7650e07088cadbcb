"""Kept for ../shared/gpu-check/plugin_check.py, which imports it by this name:
the module lives in devtools.cuda_driver (the GPU benchmark uses it too)."""

from devtools.cuda_driver import CudaDriver, from_bfloat16, numpy_dtype, to_bfloat16

__all__ = ["CudaDriver", "from_bfloat16", "numpy_dtype", "to_bfloat16"]
