"""Kept for ../shared/gpu-check/plugin_check.py, which imports it by this name:
the module lives in devtools.nccl_plugin_abi (the GPU benchmark uses it too)."""

from devtools.nccl_plugin_abi import ABI, DTYPES, OPS, STATUS, UNIQUE_ID_BYTES, Plugin, PluginError, PluginTable

__all__ = ["ABI", "DTYPES", "OPS", "STATUS", "UNIQUE_ID_BYTES", "Plugin", "PluginError", "PluginTable"]
